// Prompt GEMM entry, y[T, n] = x[T, K] · W[row0 : row0+n, K]ᵀ: the tensor-core kernel (tc_gemm.cu) when K is
// a multiple of 32 and the weight and x are 16-byte aligned, else the SIMT f32 kernel here (any shape; also
// the grouped fallback and BLOOMERY_CUDA_GEMM=simt). SIMT: 64×64 output tiles, K in steps of 32; each step
// decodes the weight tile to f32 in shared memory (bit-exact with the CPU decoders) and every thread
// accumulates a 4×4 block in f32 registers (13 TFLOP/s on the H200 at [12288, 2560] × 4096 rows).
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm/gemm_internal.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/misc/pdl.cuh"
#include "backend/cuda/weight_access.cuh"

namespace bloomery::cuda {

// The prompt GEMM's default mode (gemm_internal.h): plain BF16 activations. They pass the CUDA accuracy gate
// (GoldenCuda), the trained models' perplexity (within 0.03 % of f32) and the speculative-decoding suite on
// the card (121 tests, H100, 2026-12-07, with kSplitRowsUpTo below), and take 16-19 % off pp4096
// (docs/performance.md, "Plain BF16 prompt activations"). Split-BF16 (Bf16x2) stays the reference mode.
constexpr GemmMode kDefaultGemmMode = GemmMode::Bf16;

// Products of at most this many rows take split-BF16 whatever the mode: the rows a verify (k + 1 ≤ 9), a
// batch of decoding slots or their drafts bring. There the GEMM is bound by its weight read (one 128-row
// tile; its time is flat to T = 128), so the second BF16 term costs nothing, and such rows keep the
// f32-grade products the one-row GEMV steps have: greedy output with drafting on equals drafting off, and a
// slot decodes the same alone or batched. A plain-BF16 verify of 9 rows parted from one-row steps at margins
// of 0.07-0.2 logits on the fixtures (bench/results/bf16-act-2026-12-06/final-check).
constexpr int64_t kSplitRowsUpTo = 32;

namespace {

constexpr int kBM = 64, kBN = 64, kBK = 32, kThreads = 256;

// Dense when `offsets` is null; grouped otherwise: blockIdx.z is the expert, whose weight is experts[z] and
// whose rows of x and y are [offsets[z], offsets[z+1]) (T is then unused; tiles past the expert's rows exit).
__global__ void __launch_bounds__(kThreads)
    gemm_tiled(DeviceWeight w, int64_t row0, int64_t n, const float* __restrict__ x, int64_t T,
               float* __restrict__ y, const DeviceWeight* __restrict__ experts,
               const int32_t* __restrict__ offsets) {
  pdl_wait();
  pdl_launch_dependents();
  if (offsets) {
    const int64_t begin = offsets[blockIdx.z], end = offsets[blockIdx.z + 1];
    if (blockIdx.y * static_cast<int64_t>(kBM) >= end - begin) return;
    w = experts[blockIdx.z];
    T = end - begin;
    x += begin * static_cast<int64_t>(w.cols);
    y += begin * n;
  }
  __shared__ float xs[kBK][kBM + 1];
  __shared__ float ws[kBK][kBN + 1];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t t0 = blockIdx.y * static_cast<int64_t>(kBM), r0 = blockIdx.x * static_cast<int64_t>(kBN);
  const int64_t K = static_cast<int64_t>(w.cols);
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < K; k0 += kBK) {
    // 64 × 32 of x and of W per step: 8 elements of each per thread, consecutive threads on consecutive k.
#pragma unroll
    for (int i = 0; i < (kBM * kBK) / kThreads; ++i) {
      const int e = threadIdx.x + i * kThreads, rr = e / kBK, kk = e % kBK;
      const int64_t t = t0 + rr, r = r0 + rr, k = k0 + kk;
      xs[kk][rr] = (t < T && k < K) ? x[t * K + k] : 0.0f;
      ws[kk][rr] = (r < n && k < K) ? weight_element(w, row0 + r, k) : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < kBK; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = xs[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = ws[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t t = t0 + ty + 16 * i, r = r0 + tx + 16 * j;
      if (t < T && r < n) y[t * n + r] = acc[i][j];
    }
}

__global__ void gather_weight_rows(DeviceWeight w, const int64_t* __restrict__ ids, float* __restrict__ out) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t i = blockIdx.x, row = ids[i];
  for (uint64_t k = threadIdx.x; k < w.cols; k += blockDim.x) out[i * w.cols + k] = weight_element(w, row, k);
}

std::string shape_of(const DeviceWeight& w) {
  return std::string(format_name(w.format)) + " W[" + std::to_string(w.rows) + ", " + std::to_string(w.cols) +
         "]";
}

}  // namespace

void gemm(const DeviceWeight& w, int64_t row0, int64_t n, const float* x, int64_t T, float* y,
          cudaStream_t s) {
  const GemmMode mode = gemm_mode();
  const bool split = mode == GemmMode::Bf16x2 || T <= kSplitRowsUpTo;
  if (mode != GemmMode::Simt && lt_gemm(w, row0, n, x, T, y, split, s)) return;
  if (mode != GemmMode::Simt && tc_gemm_supported(static_cast<int64_t>(w.cols), w.data, x))
    return tc_gemm(w, row0, n, x, T, y, split, s);
  gemm_simt(w, row0, n, x, T, y, s);
}

GemmMode gemm_mode_at_start() {
  static const GemmMode mode = [] {
    const char* v = std::getenv("BLOOMERY_CUDA_GEMM");
    if (v && std::strcmp(v, "bf16") == 0) return GemmMode::Bf16;
    if (v && std::strcmp(v, "bf16x2") == 0) return GemmMode::Bf16x2;
    if (v && std::strcmp(v, "simt") == 0) return GemmMode::Simt;
    return kDefaultGemmMode;
  }();
  return mode;
}

namespace {

std::atomic<GemmMode>& gemm_mode_slot() {
  static std::atomic<GemmMode> mode{gemm_mode_at_start()};
  return mode;
}

}  // namespace

GemmMode gemm_mode() {
  return gemm_mode_slot().load(std::memory_order_relaxed);
}

void set_gemm_mode(GemmMode mode) {
  gemm_mode_slot().store(mode, std::memory_order_relaxed);
}

void gemm_simt(const DeviceWeight& w, int64_t row0, int64_t n, const float* x, int64_t T, float* y,
               cudaStream_t s) {
  if (n == 0 || T == 0) return;
  const dim3 grid(static_cast<unsigned>((n + kBN - 1) / kBN), static_cast<unsigned>((T + kBM - 1) / kBM));
  pdl_launch(gemm_tiled, grid, kThreads, 0, s, w, row0, n, x, T, y, nullptr, nullptr);
  BLOOMERY_CUDA_CHECK_LAUNCH("gemm " + shape_of(w) + " rows " + std::to_string(row0) + "+" +
                             std::to_string(n) + " x[" + std::to_string(T) + "]");
}

void gemm_simt_grouped(const DeviceWeight* weights, int64_t E, const int32_t* offsets, int64_t max_rows,
                       int64_t n, int64_t K, FormatId format, const float* xs, float* ys, cudaStream_t s) {
  if (n == 0 || max_rows == 0 || E == 0) return;
  const dim3 grid(static_cast<unsigned>((n + kBN - 1) / kBN),
                  static_cast<unsigned>((max_rows + kBM - 1) / kBM), static_cast<unsigned>(E));
  DeviceWeight dummy;
  dummy.format = format;
  dummy.cols = static_cast<uint64_t>(K);
  pdl_launch(gemm_tiled, grid, kThreads, 0, s, dummy, 0, n, xs, max_rows, ys, weights, offsets);
  BLOOMERY_CUDA_CHECK_LAUNCH("grouped gemm (SIMT) " + std::string(format_name(format)) +
                             " E=" + std::to_string(E) + " W[" + std::to_string(n) + ", " +
                             std::to_string(K) + "] rows<=" + std::to_string(max_rows));
}

void gather_rows(const DeviceWeight& w, const int64_t* ids, int64_t count, float* out, cudaStream_t s) {
  if (count == 0) return;
  pdl_launch(gather_weight_rows, static_cast<unsigned>(count), 256, 0, s, w, ids, out);
  BLOOMERY_CUDA_CHECK_LAUNCH("gather_rows " + shape_of(w) + " ids " + std::to_string(count));
}

}  // namespace bloomery::cuda
