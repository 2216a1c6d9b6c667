// The start screen on stdout: model family and checkpoint, formats and bytes per role, the memory plan, slots
// and context per slot, the address, one line per choice made without a flag (naming the flag), and the load
// progress bar.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "server/engine_host.h"
#include "server/flags.h"

namespace bloomery::server {

// The slot layout bloomery chose, with the reason for every value the user did not set.
struct ServePlan {
  int n_slots = 1;
  int64_t n_ctx_total = 0;
  int64_t n_ctx_slot = 0;
  int threads = 0;
  int http_threads = 0;
  std::vector<std::string> choices;  // "slots: 4 (auto; change with -np/--parallel)"
};

ServePlan plan_serving(const ServerOptions& o, const CheckpointSummary& s, int hardware_threads);

std::string start_screen(const ServerOptions& o, const EngineHost& host, const ServePlan& plan,
                         const MemoryPlan& memory);

// "[#####.....]  52%  31/60 tensors" (no newline).
std::string progress_bar(size_t done, size_t total, int width = 30);

std::string human_bytes(uint64_t b);

}  // namespace bloomery::server
