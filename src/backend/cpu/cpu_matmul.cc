// Matmul of f32 activations by decoded f32 weights, y = x Wᵀ, spread over weight rows (and tokens) on the
// pool.
#include <algorithm>

#include "backend/cpu/cpu_backend.h"
#include "backend/op_checks.h"

namespace bloomery::cpu {

namespace {

// Σ_k a[k]·b[k] with 16 independent partial sums (vectorisable without reassociation flags).
inline float dot(const float* a, const float* b, int64_t K) {
  float acc[16] = {};
  int64_t k = 0;
  for (; k + 16 <= K; k += 16)
    for (int j = 0; j < 16; ++j) acc[j] += a[k + j] * b[k + j];
  float tail = 0.0f;
  for (; k < K; ++k) tail += a[k] * b[k];
  float s = 0.0f;
  for (int j = 0; j < 16; ++j) s += acc[j];
  return s + tail;
}

}  // namespace

void dot_rows(const float* x, const float* w, int64_t K, int64_t n0, int64_t n1, float* y) {
  for (int64_t n = n0; n < n1; ++n) y[n] = dot(x, w + n * K, K);
}

void CpuBackend::matmul_rows(Tensor& out, const Tensor& x, const Weight& w, int64_t row0, int64_t n) {
  BLOOMERY_NEED(!w.streamed() && w.dense().defined(), "matmul", "a dense weight", w.name());
  check_matmul_args(out, x, w, row0, n);
  const int64_t K = w.cols(), T = x.rows();
  const float* W = w.dense().f32() + row0 * K;
  const float* X = x.f32();
  float* Y = out.f32();
  // Tiles of weight rows × all tokens: each weight row is read once per tile of 8 tokens.
  constexpr int64_t kTokTile = 8;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, K));
  owned_pool_->parallel_for(
      n,
      [&](int64_t r0, int64_t r1) {
        for (int64_t t0 = 0; t0 < T; t0 += kTokTile) {
          const int64_t t1 = std::min(T, t0 + kTokTile);
          for (int64_t r = r0; r < r1; ++r) {
            const float* wr = W + r * K;
            for (int64_t t = t0; t < t1; ++t) Y[t * n + r] = dot(X + t * K, wr, K);
          }
        }
      },
      grain);
}

void CpuBackend::matmul(Tensor& out, const Tensor& x, const Weight& w) {
  matmul_rows(out, x, w, 0, w.rows());
}

}  // namespace bloomery::cpu
