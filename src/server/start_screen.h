// The start screen on stdout: model family and checkpoint, formats and bytes per role, the loader's memory
// plan, slots and context per slot, the address, one line per choice made without a flag (naming the flag).
// The load progress bar is the loader's (core/progress.h, on stderr).
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

std::string human_bytes(uint64_t b);

}  // namespace bloomery::server
