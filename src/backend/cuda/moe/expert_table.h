// The device table of a layer's routed experts (gate, up and down DeviceWeight descriptors, E of each), built
// once per distinct `experts` span and kept, so the routed-expert kernels find every expert's stored bytes
// from the routed ids on the card without a host round trip.
#pragma once

#include <span>

#include "backend/backend.h"
#include "backend/cuda/moe/moe_kernels.h"

namespace bloomery::cuda {

struct ExpertSet {
  MoeTable tab;  // device descriptors; a missing expert has data == nullptr
  int64_t I = 0, D = 0;
  FormatId gate_fmt = FormatId::BF16, up_fmt = FormatId::BF16, down_fmt = FormatId::BF16;
  int64_t loaded = 0;       // experts with gate, up and down
  bool uniform = false;     // every loaded expert: gate/up [I, D], down [D, I], same formats and FP8 tiles
  bool units_ok = false;    // uniform, and every row readable in 16-byte units; gate and up share a width
  bool all_loaded = false;  // no missing expert
};

// The table for `experts` (keyed by the span's data pointer and size and by `owner`, the backend; rebuilt
// when the weights behind that span were replaced or freed). The first call for a span uploads the table
// (one synchronous copy); later calls are a lookup. The model keeps the span's vector alive.
const ExpertSet& expert_set(const void* owner, std::span<const ExpertWeights> experts);

}  // namespace bloomery::cuda
