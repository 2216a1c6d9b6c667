// Matmul of f32 activations by decoded f32 weights, y = x Wᵀ, spread over weight rows (and tokens) on the
// pool.
#include <algorithm>

#include "backend/cpu/cpu_backend.h"
#include "backend/op_checks.h"

namespace bloomery::cpu {

// x86-64 with GCC: the dot products also come as an AVX2 clone, chosen when the library loads on a CPU that
// has it (the build's baseline is SSE2). The clone runs the same operations on each of the 16 partial sums in
// the same order, only 8 lanes at a time instead of 4, and avx2 does not imply FMA, so no multiply-add is
// fused: the bits are the baseline's.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define BLOOMERY_DOT_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define BLOOMERY_DOT_CLONES
#endif

namespace {

// Σ_k a[k]·b[k] with 16 independent partial sums (vectorisable without reassociation flags).
__attribute__((always_inline)) inline float dot(const float* a, const float* b, int64_t K) {
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

BLOOMERY_DOT_CLONES void dot_rows(const float* x, const float* w, int64_t K, int64_t n0, int64_t n1,
                                  float* y) {
  for (int64_t n = n0; n < n1; ++n) y[n] = dot(x, w + n * K, K);
}

namespace {

// Weight rows [r0, r1) × all T tokens of y = x Wᵀ (y row stride n): each weight row is read once per tile of
// 8 tokens.
BLOOMERY_DOT_CLONES void matmul_tile(const float* X, const float* W, float* Y, int64_t K, int64_t T,
                                     int64_t n, int64_t r0, int64_t r1) {
  constexpr int64_t kTokTile = 8;
  for (int64_t t0 = 0; t0 < T; t0 += kTokTile) {
    const int64_t t1 = std::min(T, t0 + kTokTile);
    for (int64_t r = r0; r < r1; ++r) {
      const float* wr = W + r * K;
      for (int64_t t = t0; t < t1; ++t) Y[t * n + r] = dot(X + t * K, wr, K);
    }
  }
}

}  // namespace

void CpuBackend::matmul_rows(Tensor& out, const Tensor& x, const Weight& w, int64_t row0, int64_t n) {
  BLOOMERY_NEED(!w.streamed() && w.dense().defined(), "matmul", "a dense weight", w.name());
  check_matmul_args(out, x, w, row0, n);
  const int64_t K = w.cols(), T = x.rows();
  const float* W = w.dense().f32() + row0 * K;
  const float* X = x.f32();
  float* Y = out.f32();
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, K));
  owned_pool_->parallel_for(
      n, [&](int64_t r0, int64_t r1) { matmul_tile(X, W, Y, K, T, n, r0, r1); }, grain);
}

void CpuBackend::matmul(Tensor& out, const Tensor& x, const Weight& w) {
  matmul_rows(out, x, w, 0, w.rows());
}

}  // namespace bloomery::cpu
