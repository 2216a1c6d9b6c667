// /metrics: Prometheus text with llama-server's metric names (serving.md §5) from the scheduler's counters,
// plus bloomery's own load and request-error counters.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "runtime/scheduler.h"

namespace bloomery::server {

// Counters the HTTP layer keeps (the scheduler keeps the engine's).
class ServerCounters {
 public:
  void request_error(const std::string& type);
  std::map<std::string, uint64_t> errors() const;
  std::atomic<double> load_seconds{0.0};
  std::atomic<uint64_t> load_bytes{0};

 private:
  mutable std::mutex mu_;
  std::map<std::string, uint64_t> errors_;
};

std::string render_metrics(const SchedulerStats& s, const ServerCounters& c);

}  // namespace bloomery::server
