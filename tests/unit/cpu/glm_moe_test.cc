// glm5_next sigmoid noaux_tc router (§1.3): the bias steers selection only, weights renormalised and scaled,
// group filter, tie reporting.
#include <cmath>

#include <gtest/gtest.h>

#include "cpu_test_util.h"

namespace bloomery {

TEST(GlmRouter, BiasSelectsWeightsUseSigmoid) {
  auto be = make_cpu_backend(1);
  const int64_t E = 6, k = 2;
  std::vector<float> logits = {2.0f, 1.0f, 0.5f, -1.0f, 0.0f, 1.5f};
  std::vector<float> bias = {0.0f, 0.0f, 0.0f, 2.0f, 0.0f, 0.0f};  // lifts expert 3 into the choice
  Weight wb = be->upload_weight("bias", bias, {E});
  Tensor lg = be->upload(logits, {1, E}), ids = be->alloc({1, k}, ElemType::I32), w = be->alloc({1, k});
  SigmoidRouterSpec spec;
  spec.top_k = 2;
  spec.routed_scaling = 2.5f;
  EXPECT_EQ(be->route_sigmoid_topk(ids, w, lg, &wb, spec), 0);
  auto sig = [](float x) { return 1.0 / (1.0 + std::exp(-x)); };
  EXPECT_EQ(ids.i32()[0], 3);  // σ(−1) + 2 is the largest choice score
  EXPECT_EQ(ids.i32()[1], 0);
  const double s3 = sig(-1.0f), s0 = sig(2.0f);
  EXPECT_NEAR(w.f32()[0], s3 / (s3 + s0 + 1e-20) * 2.5, 1e-6);
  EXPECT_NEAR(w.f32()[1], s0 / (s3 + s0 + 1e-20) * 2.5, 1e-6);
}

TEST(GlmRouter, GroupFilterAndTies) {
  auto be = make_cpu_backend(1);
  const int64_t E = 8;
  // Groups of 4: group 0 = {3, 0, 0, 0}, group 1 = {2, 2, 0, 0}: top-2 sums 3 vs 4 → group 1 kept.
  std::vector<float> logits = {3.0f, 0.0f, 0.0f, 0.0f, 2.0f, 2.0f, 0.0f, 0.0f};
  Tensor lg = be->upload(logits, {1, E}), ids = be->alloc({1, 1}, ElemType::I32), w = be->alloc({1, 1});
  SigmoidRouterSpec spec;
  spec.top_k = 1;
  spec.n_group = 2;
  spec.topk_group = 1;
  // σ(3) + σ(0) = 1.45 vs σ(2) + σ(2) = 1.76: group 1 wins although expert 0 has the best single score;
  // inside it experts 4 and 5 tie at the cut → lower index, reported.
  EXPECT_EQ(be->route_sigmoid_topk(ids, w, lg, nullptr, spec), 1);
  EXPECT_EQ(ids.i32()[0], 4);
  EXPECT_NEAR(w.f32()[0], 1.0, 1e-6);  // renormalised single expert, scaling 1
}

}  // namespace bloomery
