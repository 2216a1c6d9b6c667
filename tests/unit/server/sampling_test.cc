#include "server/sampling.h"

#include <cmath>
#include <map>

#include <gtest/gtest.h>

using namespace bloomery;

TEST(Sampling, GreedyTakesLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0;
  std::mt19937_64 rng(1);
  std::vector<float> l = {0, 3, 3, 1};
  EXPECT_EQ(server::sample_token(l, p, {}, rng).id, 1);
}

TEST(Sampling, LogprobsAreRawLogSoftmax) {
  SamplingParams p;
  p.temperature = 0;
  p.n_probs = 2;
  std::mt19937_64 rng(1);
  std::vector<float> l = {1, 2, 3};
  SampledToken t = server::sample_token(l, p, {}, rng);
  double z = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_EQ(t.id, 2);
  EXPECT_NEAR(t.logprob, 3 - z, 1e-6);
  ASSERT_EQ(t.top.size(), 2u);
  EXPECT_EQ(t.top[0].id, 2);
  EXPECT_EQ(t.top[1].id, 1);
  EXPECT_NEAR(t.top[1].logprob, 2 - z, 1e-6);
}

TEST(Sampling, TopKOneIsGreedyAndSeedsRepeat) {
  SamplingParams p;
  p.temperature = 1.0;
  p.top_k = 1;
  p.min_p = 0;
  p.top_p = 1;
  std::mt19937_64 rng(7);
  std::vector<float> l = {0.5f, 0.1f, 0.4f};
  for (int i = 0; i < 20; ++i) EXPECT_EQ(server::sample_token(l, p, {}, rng).id, 0);
  p.top_k = 0;
  std::vector<int32_t> a, b;
  std::mt19937_64 r1(42), r2(42);
  for (int i = 0; i < 50; ++i) {
    a.push_back(server::sample_token(l, p, {}, r1).id);
    b.push_back(server::sample_token(l, p, {}, r2).id);
  }
  EXPECT_EQ(a, b);
  std::map<int32_t, int> seen;
  for (auto id : a) seen[id]++;
  EXPECT_GE(seen.size(), 2u);  // temperature 1 over close logits draws more than one token
}

TEST(Sampling, MinPAndTopPCut) {
  SamplingParams p;
  p.temperature = 1.0;
  p.top_k = 0;
  p.top_p = 1.0;
  p.min_p = 0.6;  // keeps tokens with p >= 0.6 * p_max = 0.36: only token 0
  std::vector<float> l = {std::log(0.6f), std::log(0.35f), std::log(0.05f)};
  std::mt19937_64 rng(3);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(server::sample_token(l, p, {}, rng).id, 0);
  p.min_p = 0.0;
  p.top_p = 0.9;  // 0.6 + 0.35 >= 0.9: token 2 is cut
  for (int i = 0; i < 200; ++i) EXPECT_NE(server::sample_token(l, p, {}, rng).id, 2);
}

TEST(Sampling, PenaltiesAndBiasChangeTheChoice) {
  SamplingParams p;
  p.temperature = 0;
  std::mt19937_64 rng(1);
  std::vector<float> l = {2.0f, 1.9f};
  std::vector<int32_t> recent = {0, 0, 0};
  p.frequency_penalty = 0.1;  // 2.0 - 0.3 < 1.9
  EXPECT_EQ(server::sample_token(l, p, recent, rng).id, 1);
  p.frequency_penalty = 0;
  p.presence_penalty = 0.2;
  EXPECT_EQ(server::sample_token(l, p, recent, rng).id, 1);
  p.presence_penalty = 0;
  p.logit_bias = {{1, 1.0f}};
  EXPECT_EQ(server::sample_token(l, p, {}, rng).id, 1);
}
