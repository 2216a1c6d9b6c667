// Roofline accounting for `bloomery bench`: the bytes one decoded token reads (weights actually touched plus
// KV cache / recurrent state) and the card's (or host's) copy bandwidth measured by the tool itself.
#pragma once

#include <cstdint>
#include <string>

#include "models/model_loader.h"

namespace bloomery::tools {

struct DecodeBytes {
  uint64_t dense = 0;        // every non-expert weight of the target model (embedding: one row), as stored
  uint64_t experts = 0;      // the selected routed experts: per MoE layer, top_k × (bytes of one expert)
  uint64_t state = 0;        // KV cache read at the given depth + recurrent/conv state read and written
  bool state_known = false;  // false: the family's state is not modelled here (state = 0)
  uint64_t total() const { return dense + experts + state; }
};

// Bytes per decoded token at context depth `depth`. backend "cpu" keeps weights as decoded f32 (4 bytes per
// element); "cuda" reads the stored bytes. The draft (MTP/NextN) layer is not counted: decode does not run
// it.
DecodeBytes decode_bytes(const LoadedModel& lm, const std::string& backend, int64_t depth);

// Copy bandwidth in bytes/s (bytes read + written): a large device-to-device cudaMemcpy for "cuda", a host
// memcpy on one thread for "cpu". Returns 0 when it cannot be measured.
double copy_bandwidth(const std::string& backend);

}  // namespace bloomery::tools
