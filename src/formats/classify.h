// Per-tensor classification (formats.md §4.8): every stored tensor of a folder becomes part of exactly one
// WeightRecord, whose format is decided by the tensors present and reconciled with the plan's prediction.
// Also the cross-tensor checks: expert stacks (§6.8), PLE table shards (§7), the CSF inventory (§8.3).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/quant_plan.h"
#include "formats/tensor_source.h"
#include "formats/weight_record.h"

namespace bloomery {

struct ClassifyOptions {
  // The text model's config fields (config.json's text_config, or the flat config): num_hidden_layers,
  // num_experts / n_routed_experts, split_ngram_parts, ple_embed_dim, ngram_size, heads_per_ngram,
  // make_ngram_vocab_size_divisible_by. Null: the checks that need them use only what the tensors say.
  nlohmann::json text_config;
  // Reads a small tensor's bytes for the value checks that need them (CSF globals and gate/up equality, the
  // PLE row count from ngram_heads_vocab_sizes). Empty: those checks are skipped (unit tests on names only).
  std::function<std::vector<uint8_t>(const TensorEntry&)> read;
  // NVFP4 PLE tables stored as per-shard "shard_{j}.weight" + "shard_{j}.weight_scale" with a table-wide
  // "weight_scale_2" (the repository fixtures' convention; §7 has no verified names) become one record with
  // block_scale_shards, which decode_weight reads shard by shard. False refuses such tables
  // (E_Q_UNRECOGNISED).
  bool nvfp4_ple_shards = true;
  // The file a tensor lives in, for messages. Empty: messages name the tensor only.
  std::function<std::string(const TensorEntry&)> file_of;
};

// Classifies `tensors` (which must outlive the records: records point into it). Returns one record per
// logical weight plus one per other parameter / buffer / KV scale, sorted by name. Throws the first
// structural error.
std::vector<WeightRecord> classify_tensors(const std::vector<TensorEntry>& tensors, const QuantPlan& plan,
                                           const ClassifyOptions& options, Warnings& warnings);

// The text-model part of a config.json (text_config when present, else the config itself).
const nlohmann::json& text_config_of(const nlohmann::json& config);

struct ResolvedCheckpoint {
  QuantPlan plan;
  std::vector<WeightRecord> weights;  // sorted by name; point into the TensorSource's entries
};

// Plan (§4.2) + classification of every tensor of an opened folder.
ResolvedCheckpoint resolve_checkpoint(const TensorSource& source, Warnings& warnings);

// Routed-expert module parts: "<container>.experts.<e>.<proj>" → container ("….experts"), e, proj.
bool parse_expert_module(std::string_view module, std::string* container, int* expert, std::string* proj);

}  // namespace bloomery
