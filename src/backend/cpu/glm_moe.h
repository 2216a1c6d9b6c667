// glm5_next MoE router (models.md §1.3, §4.8): sigmoid noaux_tc selection; experts use the generic moe op.
#pragma once

#include <cstdint>

namespace bloomery::cpu {

struct GlmRouterConfig {
  const float* bias = nullptr;  // [E] e_score_correction_bias (selection only)
  int E = 0, top_k = 0, n_group = 1, topk_group = 1;
  bool norm_topk_prob = true;
  float routed_scaling = 1.0f;
};

// From one token's f32 router logits [E]: idx [top_k] chosen experts (stable top-k of sigmoid + bias after
// the group filter), w [top_k] their weights s/(sum + 1e-20)*scaling; returns true if an exact tie decided
// the choice.
bool glm_route_logits(const GlmRouterConfig& c, const float* logits, int* idx, float* w);

}  // namespace bloomery::cpu
