// Roofline accounting for `bloomery bench`: the bytes one decode step reads (weights actually touched plus KV
// cache / indexer / recurrent state) and the card's (or host's) copy bandwidth measured by the tool itself.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/model_loader.h"

namespace bloomery::tools {

// One logical weight as the roofline sees it: its name, module and what reading it whole costs.
struct WeightCost {
  std::string name, module;
  uint64_t rows = 0;
  uint64_t stored = 0;  // stored bytes of every part (elements + scales)
  uint64_t f32 = 0;     // rows · cols · 4 (what the CPU backend keeps)
};

// The weights of a folder loaded by load_model (skipped vision tensors left out). A tensor-parallel rank's
// (config.tp_size > 1): the weights it loaded, its slices' bytes.
std::vector<WeightCost> weight_costs(const LoadedModel& lm);

struct DecodeBytes {
  uint64_t dense = 0;    // every non-expert weight (embedding: one row per sequence; PLE table: its rows)
  uint64_t experts = 0;  // routed experts touched: per MoE layer, U(C) × (bytes of one expert)
  uint64_t state = 0;    // KV / indexer reads at the depth + recurrent/conv state read and written, all C
  double unique_experts = 0;  // U(C) per MoE layer (expected distinct experts, uniform routing)
  bool state_known = false;   // false: the family's state is not modelled here (state = 0)
  uint64_t total() const { return dense + experts + state; }  // bytes of one decode step of C sequences
};

// Bytes of one decode step that advances `conc` sequences by one token each, all at context depth `depth`.
// backend "cpu" keeps weights as decoded f32 (4 bytes per element); "cuda" reads the stored bytes. The
// draft (MTP/NextN) layer is not counted: decode does not run it. The routed experts of a step are the union
// over the C tokens; it is not observed but estimated as U(C) = E·(1 − (1 − k/E)^C) (targets.md §2.1),
// exact for C = 1 and an upper bound for skewed routing. `family` and `config` (the text config) select
// the state model (qwen3_next, qwen4_exp). tp_size > 1: one rank's bytes, given that rank's `weights`
// (weight_costs, build_synthetic_rank); its state is its heads' (GDN key and value heads / tp_size, its
// KV heads: Hkv / tp_size, or the one it keeps when they are replicated). kv_bytes: bytes of a K/V cache
// value (4 for f32, 2 for the BF16 cache of -ctk bf16).
DecodeBytes decode_bytes(const std::vector<WeightCost>& weights, const std::string& family,
                         const nlohmann::json& config, const std::string& backend, int64_t depth,
                         int64_t conc = 1, int tp_size = 1, int kv_bytes = 4);

// Bytes of one K-row verify of one sequence at `depth` (the pending token and K − 1 drafts): the weights a
// K-row step touches (dense once, the routed experts' union over the K rows, U(K) as above) and one
// sequence's state. Against decode_bytes(…, conc = 1) it is the floor of a verify's cost in plain steps for a
// step bound by its reads: a verify whose rows pick other experts cannot cost less than the bytes it must
// read.
DecodeBytes verify_bytes(const std::vector<WeightCost>& weights, const std::string& family,
                         const nlohmann::json& config, const std::string& backend, int64_t depth,
                         int64_t rows, int tp_size = 1, int kv_bytes = 4);

// Copy bandwidth in bytes/s (bytes read + written): the best of a few large device-to-device cudaMemcpy
// for "cuda", a host memcpy on one thread for "cpu". Returns 0 when it cannot be measured.
double copy_bandwidth(const std::string& backend);

}  // namespace bloomery::tools
