// The role of a checkpoint tensor in the model, from its name alone, generic across qwen3_next, qwen4_exp and
// glm5_next (models.md §2.3, §3.3, §4.3). Used by inspect's per-role totals and by placement.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace bloomery {

enum class Role : uint8_t {
  RoutedExpert,     // …mlp.experts.{e}.* (or fused experts parameters)
  SharedExpert,     // …mlp.shared_expert(s).*, shared_expert_gate
  Router,           // …mlp.gate.* (weight, e_score_correction_bias)
  Attention,        // softmax attention (self_attn.* of full / QSA / MLA-DSA layers), minus the indexer
  LinearAttention,  // GDN (linear_attn.*) and KDA (self_attn.* of a linear_attention layer)
  Indexer,          // sparse-attention indexer (…self_attn.indexer.*)
  HyperConnection,  // Qwen hyper-connections and GLM mHC (hc_*)
  Embedding,        // embed_tokens
  PleTable,         // the PLE n-gram table (ngram_embedding shards and its scale)
  Ple,              // the rest of a PLE block (projections, norms, conv, I64 buffers)
  Head,             // lm_head
  Draft,            // MTP / NextN draft layer (mtp.*, or decoder layer index == num_hidden_layers)
  Norm,             // norms outside the blocks above (input_layernorm, model.norm, …)
  DenseMlp,         // a dense MLP (GLM layers 0–2, mlp_only_layers)
  Vision,           // model.visual.* (skipped)
  Other,
};
constexpr int kRoleCount = static_cast<int>(Role::Other) + 1;

std::string_view role_name(Role r);

// What a name alone cannot tell: where the draft layer starts and which layers are linear attention.
struct RoleContext {
  int64_t num_hidden_layers = 0;         // 0 = unknown (then only "mtp." marks the draft)
  std::vector<std::string> layer_types;  // config layer_types; empty = unknown
};
// From config.json (text_config when present).
RoleContext role_context_from_config(const nlohmann::json& config);

Role role_of(std::string_view name, const RoleContext& ctx);

}  // namespace bloomery
