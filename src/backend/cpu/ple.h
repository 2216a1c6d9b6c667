// qwen4_exp PLE (models.md §3.6, formats.md §7): hashed n-gram ids, row gather, gated insertion into the
// streams.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/ple_hash.h"

namespace bloomery::cpu {

// One PLE layer's dense weights (f32, row-major [out, in]).
struct PleWeights {
  const float* key_proj = nullptr;    // [n*D, E]
  const float* value_proj = nullptr;  // [D, E]
  const float* norm_key = nullptr;    // [n*D]
  const float* norm_query = nullptr;  // [n*D]
  const float* norm_conv = nullptr;   // [n*D]
  const float* conv = nullptr;        // [n*D, K]
  int n = 0, D = 0, E = 0, K = 4, dilation = 3;
  float eps = 1e-6f;
};

// Dilated conv history: the last (K-1)*dilation normalised rows Gn [., n*D], oldest first (zeros at start).
struct PleConvState {
  std::vector<float> hist;
};
PleConvState ple_conv_start(const PleWeights& w);

// One token: e [E] the gathered rows, X [n*D] the streams before the layer; out [n*D] = G + C (to add to X).
void ple_forward_token(const PleWeights& w, const float* e, const float* X, PleConvState& conv, float* out);

}  // namespace bloomery::cpu
