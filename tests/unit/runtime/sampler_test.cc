// Sampler: greedy ties, seed determinism, and each filter's effect on which tokens can appear.
#include "runtime/sampler.h"

#include <cmath>
#include <map>
#include <set>
#include <vector>

#include <gtest/gtest.h>

namespace bloomery {

TEST(Sampler, GreedyTakesLowestIdOnTies) {
  Sampler s;
  std::vector<float> l = {0.5f, 2.0f, 1.0f, 2.0f};
  EXPECT_EQ(s.sample(l), 1);
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDiffers) {
  std::vector<float> l(50);
  for (size_t i = 0; i < l.size(); ++i) l[i] = std::sin(static_cast<float>(i)) * 2.0f;
  auto draw = [&](uint64_t seed) {
    Sampler s(SamplerConfig{1.0f, 0, 1.0f, 0.0f, seed});
    std::vector<int32_t> r;
    for (int i = 0; i < 64; ++i) r.push_back(s.sample(l));
    return r;
  };
  EXPECT_EQ(draw(7), draw(7));
  EXPECT_NE(draw(7), draw(8));
}

TEST(Sampler, TopKLimitsCandidates) {
  std::vector<float> l = {1.0f, 3.0f, 2.0f, 0.0f, 2.5f};
  Sampler s(
      SamplerConfig{5.0f, 2, 1.0f, 0.0f, 3});  // hot temperature: without top-k every token would appear
  std::set<int32_t> seen;
  for (int i = 0; i < 500; ++i) seen.insert(s.sample(l));
  EXPECT_EQ(seen, (std::set<int32_t>{1, 4}));
}

TEST(Sampler, TopPAndMinPCut) {
  // softmax at T=1 of {0, ln 2, ln 4} = {1/7, 2/7, 4/7}
  std::vector<float> l = {0.0f, std::log(2.0f), std::log(4.0f)};
  {
    Sampler s(SamplerConfig{1.0f, 0, 0.5f, 0.0f, 11});  // 4/7 ≥ 0.5: only the top token
    for (int i = 0; i < 200; ++i) EXPECT_EQ(s.sample(l), 2);
  }
  {
    Sampler s(SamplerConfig{1.0f, 0, 0.8f, 0.0f, 11});  // 6/7 ≥ 0.8: tokens 2 and 1
    std::set<int32_t> seen;
    for (int i = 0; i < 500; ++i) seen.insert(s.sample(l));
    EXPECT_EQ(seen, (std::set<int32_t>{1, 2}));
  }
  {
    Sampler s(SamplerConfig{1.0f, 0, 1.0f, 0.4f, 11});  // p ≥ 0.4 · 4/7 keeps 2/7 and 4/7
    std::set<int32_t> seen;
    for (int i = 0; i < 500; ++i) seen.insert(s.sample(l));
    EXPECT_EQ(seen, (std::set<int32_t>{1, 2}));
  }
}

TEST(Sampler, TemperatureAppliesAfterTheCuts) {
  // llama-server's order. At temperature 1 the probabilities are 0.6, 0.3, 0.1: top-p 0.85 keeps tokens 0 and
  // 1. Scaling first (temperature 2: 0.47, 0.33, 0.19) would keep token 2 as well.
  std::vector<float> l = {std::log(0.6f), std::log(0.3f), std::log(0.1f)};
  Sampler s(SamplerConfig{2.0f, 0, 0.85f, 0.0f, 9});
  std::map<int32_t, int> seen;
  for (int i = 0; i < 4000; ++i) seen[s.sample(l)]++;
  EXPECT_EQ(seen.count(2), 0u);
  // Among the survivors the temperature flattens the draw: 0.6 : 0.3 at T = 2 is √2 : 1, about 0.586.
  EXPECT_NEAR(seen[0] / 4000.0, std::sqrt(2.0) / (1.0 + std::sqrt(2.0)), 0.03);
}

TEST(Sampler, FrequenciesFollowTheDistribution) {
  std::vector<float> l = {0.0f, std::log(3.0f)};  // 1/4, 3/4
  Sampler s(SamplerConfig{1.0f, 0, 1.0f, 0.0f, 5});
  int ones = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ones += s.sample(l) == 1;
  EXPECT_NEAR(static_cast<double>(ones) / n, 0.75, 0.02);
}

}  // namespace bloomery
