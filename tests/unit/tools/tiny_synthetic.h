// Tiny configs of the synthetic families for the tools' unit tests (bench_test, synthetic_families_test,
// synthetic_tp_test): one place for the widths every test builds.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "tools/synthetic_model.h"

namespace bloomery::tools {

// qwen4_exp's tiny widths (the fixture's: 6/2 heads of 32, GDN 2/6 × 16, 16 experts top-4, an 8-head
// indexer).
inline nlohmann::json tiny_qwen4_widths() {
  return {{"vocab_size", 384},
          {"hidden_size", 64},
          {"num_attention_heads", 6},
          {"num_key_value_heads", 2},
          {"head_dim", 32},
          {"linear_num_key_heads", 2},
          {"linear_num_value_heads", 6},
          {"linear_key_head_dim", 16},
          {"linear_value_head_dim", 16},
          {"num_experts", 16},
          {"num_experts_per_tok", 4},
          {"moe_intermediate_size", 32},
          {"shared_expert_intermediate_size", 32},
          {"hc_lowrank", 8},
          {"ple_embed_dim", 256},
          {"ngram_vocab_size_base", 256},
          {"split_ngram_parts", 4},
          {"indexer_n_heads", 8},
          {"indexer_head_dim", 16},
          {"indexer_budget", 8},
          {"rope_parameters",
           {{"rope_theta", 1e7}, {"partial_rotary_factor", 0.25}, {"mrope_section", {2, 1, 1}}}},
          {"max_position_embeddings", 4096}};
}

// Tiny configs of each family's built-in one (every layer kind, NVFP4 experts whose halves still hold
// whole 16-column scale blocks at TP 2).
inline nlohmann::json tiny_synthetic(const std::string& family) {
  nlohmann::json c = synthetic_config(family);
  if (family == "glm5_next") {
    c["text_config"].merge_patch({{"vocab_size", 256},
                                  {"hidden_size", 64},
                                  {"num_attention_heads", 4},
                                  {"num_key_value_heads", 4},
                                  {"q_lora_rank", 32},
                                  {"kv_lora_rank", 32},
                                  {"qk_nope_head_dim", 16},
                                  {"v_head_dim", 16},
                                  {"linear_attn_config", {{"num_heads", 4}, {"head_dim", 16}}},
                                  {"index_n_heads", 4},
                                  {"index_head_dim", 16},
                                  {"index_topk", 8},
                                  {"n_routed_experts", 8},
                                  {"num_experts_per_tok", 2},
                                  {"moe_intermediate_size", 32},
                                  {"intermediate_size", 64}});
    return limit_layers(c, 4);  // KDA × 3 + one DSA; dense then sparse MLPs
  }
  if (family == "qwen3_next") {
    c.merge_patch({{"vocab_size", 384},
                   {"hidden_size", 64},
                   {"num_attention_heads", 4},
                   {"num_key_value_heads", 2},
                   {"head_dim", 32},
                   {"linear_num_key_heads", 2},
                   {"linear_num_value_heads", 4},
                   {"linear_key_head_dim", 16},
                   {"linear_value_head_dim", 16},
                   {"num_experts", 16},
                   {"num_experts_per_tok", 4},
                   {"moe_intermediate_size", 32},
                   {"shared_expert_intermediate_size", 32},
                   {"intermediate_size", 128}});
    return limit_layers(c, 4);  // GDN, GDN, GDN, attention
  }
  c["text_config"].merge_patch(tiny_qwen4_widths());
  c["text_config"]["ple_layer_ids"] = nlohmann::json::array({1});
  return limit_layers(c, 4);  // GDN × 3 + one QSA, PLE on layer 1
}

}  // namespace bloomery::tools
