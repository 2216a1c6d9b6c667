// Checks of classify.cc that look across records: plan reconciliation (§4.8), quantisable roles, expert
// stacks (§6.8), the CSF inventory (§8.3) and PLE row counts (§7). Internal to src/formats.
#pragma once

#include <string_view>
#include <vector>

#include "formats/classify.h"

namespace bloomery {

// The module's leaf is a norm or a convolution (kept in high precision by every kernel, §4.8).
bool is_norm_or_conv(std::string_view module);
// A draft (MTP / NextN) module: under "mtp." or decoder layer index == num_hidden_layers.
bool is_draft_module(std::string_view module, const nlohmann::json& text_config);

// §4.8 reconcile table for one classified weight against the plan's prediction for its module.
void reconcile_with_plan(WeightRecord& r, const Prediction& predicted, const ClassifyOptions& options,
                         Warnings& warnings);
// E_Q_ROLE_NOT_QUANTISABLE: a quantised norm, conv, A_log or dt_bias.
void check_role_quantisable(const std::vector<WeightRecord>& records, const ClassifyOptions& options);
// E_CSF_INVENTORY, E_CSF_PROJECTIONS, E_CSF_GLOBALS, E_CSF_W13_GLOBAL_MISMATCH.
void check_csf_inventory(const std::vector<WeightRecord>& records, const QuantPlan& plan,
                         const ClassifyOptions& options);
// E_MOE_EXPERT_MISSING, E_MOE_MIXED_FORMATS.
void check_expert_stacks(const std::vector<WeightRecord>& records, const ClassifyOptions& options);
// E_PLE_ROWS / E_PLE_SHARD_SHAPE / E_PLE_SHARD_MISSING against the config and ngram_heads_vocab_sizes.
void check_ple_rows(const std::vector<WeightRecord>& records, const std::vector<TensorEntry>& tensors,
                    const ClassifyOptions& options);

// W_Q_PLAN_KEY_UNMATCHED: a MIXED_PRECISION quantized_layers key (or a compressed-tensors exact target) that
// no stored module matches, e.g. a vision tower stripped from the export. Advisory: the tensors decide
// (§4.8).
void check_plan_keys_used(const std::vector<WeightRecord>& records, const QuantPlan& plan,
                          Warnings& warnings);

}  // namespace bloomery
