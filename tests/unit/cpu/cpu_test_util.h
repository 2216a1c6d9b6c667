// Helpers for the CPU op tests: seeded random tensors and max-abs comparisons.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"

namespace bloomery::test {

inline std::vector<float> randv(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = a.size() == b.size() ? 0.0f : INFINITY;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

inline float max_abs(const std::vector<float>& a) {
  float m = 0.0f;
  for (float x : a) m = std::max(m, std::fabs(x));
  return m;
}

}  // namespace bloomery::test
