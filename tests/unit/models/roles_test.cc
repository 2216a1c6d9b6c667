// Tensor roles by name for the three families (models.md §2.3, §3.3, §4.3).
#include <gtest/gtest.h>

#include "models/roles.h"

namespace bloomery {
namespace {

TEST(Roles, Qwen4ExpNames) {
  RoleContext ctx = role_context_from_config(
      {{"text_config",
        {{"num_hidden_layers", 48}, {"layer_types", {"linear_attention", "linear_attention"}}}}});
  EXPECT_EQ(ctx.num_hidden_layers, 48);
  const std::string p = "model.language_model.";
  EXPECT_EQ(role_of(p + "layers.0.mlp.experts.7.down_proj.weight", ctx), Role::RoutedExpert);
  EXPECT_EQ(role_of(p + "layers.0.mlp.shared_expert.up_proj.weight", ctx), Role::SharedExpert);
  EXPECT_EQ(role_of(p + "layers.0.mlp.shared_expert_gate.weight", ctx), Role::SharedExpert);
  EXPECT_EQ(role_of(p + "layers.0.mlp.gate.weight", ctx), Role::Router);
  EXPECT_EQ(role_of(p + "layers.3.self_attn.q_proj.weight", ctx), Role::Attention);
  EXPECT_EQ(role_of(p + "layers.3.self_attn.indexer.index_qk_proj.weight", ctx), Role::Indexer);
  EXPECT_EQ(role_of(p + "layers.0.linear_attn.in_proj_qkv.weight", ctx), Role::LinearAttention);
  EXPECT_EQ(role_of(p + "layers.0.attn_hyper_connection.hc_norm.weight", ctx), Role::HyperConnection);
  EXPECT_EQ(role_of(p + "hyper_connection_mixer.input_mix_weight_up.weight", ctx), Role::HyperConnection);
  EXPECT_EQ(role_of(p + "embed_tokens.weight", ctx), Role::Embedding);
  EXPECT_EQ(role_of(p + "layers.1.ple.ple_embedding.ngram_embedding.shard_11.weight", ctx), Role::PleTable);
  EXPECT_EQ(role_of(p + "layers.1.ple.ple_embedding.ngram_embedding.weight", ctx), Role::PleTable);
  EXPECT_EQ(role_of(p + "layers.1.ple.key_proj.weight", ctx), Role::Ple);
  EXPECT_EQ(role_of("lm_head.weight", ctx), Role::Head);
  EXPECT_EQ(role_of("mtp.layers.0.mlp.experts.0.up_proj.weight", ctx), Role::Draft);
  EXPECT_EQ(role_of("mtp.fc_hidden.weight", ctx), Role::Draft);
  EXPECT_EQ(role_of("model.visual.blocks.0.attn.qkv.weight", ctx), Role::Vision);
}

TEST(Roles, Glm5NextNames) {
  RoleContext ctx;
  ctx.num_hidden_layers = 45;
  ctx.layer_types = {"linear_attention", "linear_attention", "linear_attention", "deepseek_sparse_attention"};
  const std::string p = "model.language_model.";
  EXPECT_EQ(role_of(p + "layers.0.self_attn.q_proj.weight", ctx), Role::LinearAttention);  // KDA layer
  EXPECT_EQ(role_of(p + "layers.3.self_attn.q_a_proj.weight", ctx), Role::Attention);      // MLA-DSA layer
  EXPECT_EQ(role_of(p + "layers.3.self_attn.indexer.wk.weight", ctx), Role::Indexer);
  EXPECT_EQ(role_of(p + "layers.3.hc_attn_fn", ctx), Role::HyperConnection);
  EXPECT_EQ(role_of(p + "layers.0.mlp.gate_proj.weight", ctx), Role::DenseMlp);
  EXPECT_EQ(role_of(p + "layers.3.mlp.gate.e_score_correction_bias", ctx), Role::Router);
  EXPECT_EQ(role_of(p + "layers.3.mlp.shared_experts.down_proj.weight", ctx), Role::SharedExpert);
  EXPECT_EQ(role_of(p + "layers.45.eh_proj.weight", ctx), Role::Draft);  // NextN = num_hidden_layers
  EXPECT_EQ(role_of(p + "layers.45.mlp.experts.0.up_proj.weight", ctx), Role::Draft);
  EXPECT_EQ(role_of(p + "layers.44.mlp.experts.0.up_proj.weight", ctx), Role::RoutedExpert);
  EXPECT_EQ(role_of(p + "norm.weight", ctx), Role::Norm);
  EXPECT_EQ(role_name(Role::LinearAttention), "linear_attention");
}

TEST(Roles, Qwen3NextNames) {
  RoleContext ctx = role_context_from_config({{"num_hidden_layers", 48}});
  EXPECT_EQ(role_of("model.layers.0.linear_attn.in_proj_qkvz.weight", ctx), Role::LinearAttention);
  EXPECT_EQ(role_of("model.layers.3.self_attn.o_proj.weight", ctx), Role::Attention);
  EXPECT_EQ(role_of("model.layers.3.input_layernorm.weight", ctx), Role::Norm);
  EXPECT_EQ(role_of("mtp.fc.weight", ctx), Role::Draft);
  EXPECT_EQ(role_of("model.layers.48.mlp.gate.weight", ctx), Role::Draft);
}

}  // namespace
}  // namespace bloomery
