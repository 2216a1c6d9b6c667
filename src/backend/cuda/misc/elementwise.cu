// Elementwise kernels (fill, add, mul, scaled add, σ-gate, activations, per-row scale, SwiGLU, column
// copies): grid-stride loops, one f32 operation order per element as in the CPU backend. BF16 tensors (KV
// caches) are uint16 bits: filled and written rounded to nearest even, read widened exactly.
#include <cuda_bf16.h>

#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/misc/device_math.cuh"
#include "backend/cuda/misc/pdl.cuh"

namespace bloomery::cuda {
namespace {

constexpr int kThreads = 256;

#define GRID_STRIDE(i, n)                                                                \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += gridDim.x * static_cast<int64_t>(blockDim.x))

__global__ void fill_k(float* p, int64_t n, float v) {
  pdl_wait();
  pdl_launch_dependents();
  GRID_STRIDE(i, n) p[i] = v;
}

__global__ void fill_bf16_k(uint16_t* p, int64_t n, float v) {
  pdl_wait();
  pdl_launch_dependents();
  const uint16_t b = __bfloat16_as_ushort(__float2bfloat16_rn(v));
  GRID_STRIDE(i, n) p[i] = b;
}

// f32 -> BF16, nearest even (a NaN stays a NaN): what the CPU backend's elem::bf16_rne gives, NaN payloads
// aside.
__global__ void round_bf16_k(uint16_t* __restrict__ dst, const float* __restrict__ src, int64_t n) {
  pdl_wait();
  pdl_launch_dependents();
  GRID_STRIDE(i, n) dst[i] = __bfloat16_as_ushort(__float2bfloat16_rn(src[i]));
}

__global__ void widen_bf16_k(float* __restrict__ dst, const uint16_t* __restrict__ src, int64_t n) {
  pdl_wait();
  pdl_launch_dependents();
  GRID_STRIDE(i, n) dst[i] = __uint_as_float(static_cast<uint32_t>(src[i]) << 16);
}

__global__ void binary_k(int op, float* out, const float* a, const float* b, float sc, int64_t n) {
  pdl_wait();
  pdl_launch_dependents();
  GRID_STRIDE(i, n) {
    const float x = a[i], y = b[i];
    switch (op) {
      case 0:
        out[i] = x + y;
        break;
      case 1:
        out[i] = x * y;
        break;
      case 2:
        out[i] = x + sc * y;
        break;
      default:
        out[i] = x * act_apply(kActSigmoid, y);
    }
  }
}

__global__ void scale_k(float* out, const float* x, float s, int64_t n) {
  pdl_wait();
  pdl_launch_dependents();
  GRID_STRIDE(i, n) out[i] = x[i] * s;
}

__global__ void activate_k(float* out, const float* x, int act, int64_t n) {
  pdl_wait();
  pdl_launch_dependents();
  GRID_STRIDE(i, n) out[i] = act_apply(act, x[i]);
}

__global__ void epilogue_k(float* y, Epilogue e, int64_t n) {
  pdl_wait();
  pdl_launch_dependents();
  GRID_STRIDE(i, n) y[i] = epilogue_apply(e.pre, e.act, e.post, y[i]);
}

// Row-wise kernels run on a 2-D grid, rows on x (strided) and runs of kRowCols columns on y, so that no
// thread divides a 64-bit flat index by the row length: that division made the prompt's column splits run at
// an eighth of the copy rate (docs/performance.md, "Prompt attention on the tensor cores").
constexpr int64_t kRowCols = 4 * kThreads;

dim3 row_grid(int64_t R, int64_t C) {
  return dim3(static_cast<unsigned>(R < (int64_t{1} << 20) ? R : (int64_t{1} << 20)),
              static_cast<unsigned>((C + kRowCols - 1) / kRowCols));
}

#define ROW_COLS(r, c, R, C)                                                                          \
  for (int64_t r = blockIdx.x; r < (R); r += gridDim.x)                                               \
    for (int64_t c = blockIdx.y * kRowCols + threadIdx.x, c##_end = blockIdx.y * kRowCols + kRowCols; \
         c < (C) && c < c##_end; c += blockDim.x)

__global__ void scale_rows_k(float* out, const float* x, const float* s, int64_t R, int64_t C) {
  pdl_wait();
  pdl_launch_dependents();
  ROW_COLS(r, c, R, C) out[r * C + c] = x[r * C + c] * s[r];
}

__global__ void swiglu_k(float* out, const float* gate, const float* up, float limit, int64_t n) {
  pdl_wait();
  pdl_launch_dependents();
  GRID_STRIDE(i, n) {
    float g = gate[i], u = up[i];
    if (limit > 0.0f) {
      g = fminf(g, limit);
      u = fminf(fmaxf(u, -limit), limit);
    }
    out[i] = act_apply(kActSilu, g) * u;
  }
}

__global__ void copy_cols_k(float* dst, int64_t ds, int64_t d0, const float* src, int64_t ss, int64_t s0,
                            int64_t R, int64_t n) {
  pdl_wait();
  pdl_launch_dependents();
  ROW_COLS(r, c, R, n) dst[r * ds + d0 + c] = src[r * ss + s0 + c];
}

// Consecutive column blocks of src [R, ss] into up to kSplitMax outputs in one pass (split_cols).
__global__ void split_cols_k(SplitCols a, const float* src, int64_t ss, int64_t R) {
  pdl_wait();
  pdl_launch_dependents();
  ROW_COLS(r, c, R, a.total) {
    int p = 0;
    while (p + 1 < a.count && c >= a.c0[p + 1]) ++p;
    const int64_t n = (p + 1 < a.count ? a.c0[p + 1] : a.total) - a.c0[p];
    a.out[p][r * n + (c - a.c0[p])] = src[r * ss + c];
  }
}

std::string sz(int64_t n) {
  return "[" + std::to_string(n) + "]";
}

}  // namespace

void fill(float* p, int64_t n, float v, cudaStream_t s) {
  if (n == 0) return;
  pdl_launch(fill_k, grid_for(n, kThreads), kThreads, 0, s, p, n, v);
  BLOOMERY_CUDA_CHECK_LAUNCH("fill " + sz(n));
}

void fill_bf16(uint16_t* p, int64_t n, float v, cudaStream_t s) {
  if (n == 0) return;
  pdl_launch(fill_bf16_k, grid_for(n, kThreads), kThreads, 0, s, p, n, v);
  BLOOMERY_CUDA_CHECK_LAUNCH("fill bf16 " + sz(n));
}

void round_to_bf16(uint16_t* dst, const float* src, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  pdl_launch(round_bf16_k, grid_for(n, kThreads), kThreads, 0, s, dst, src, n);
  BLOOMERY_CUDA_CHECK_LAUNCH("copy f32 -> bf16 " + sz(n));
}

void widen_bf16(float* dst, const uint16_t* src, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  pdl_launch(widen_bf16_k, grid_for(n, kThreads), kThreads, 0, s, dst, src, n);
  BLOOMERY_CUDA_CHECK_LAUNCH("copy bf16 -> f32 " + sz(n));
}

void binary(Binary op, float* out, const float* a, const float* b, float scalar, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  pdl_launch(binary_k, grid_for(n, kThreads), kThreads, 0, s, static_cast<int>(op), out, a, b, scalar, n);
  BLOOMERY_CUDA_CHECK_LAUNCH("binary op " + std::to_string(static_cast<int>(op)) + " " + sz(n));
}

void scale(float* out, const float* x, float sc, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  pdl_launch(scale_k, grid_for(n, kThreads), kThreads, 0, s, out, x, sc, n);
  BLOOMERY_CUDA_CHECK_LAUNCH("scale " + sz(n));
}

void activate(float* out, const float* x, int act, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  pdl_launch(activate_k, grid_for(n, kThreads), kThreads, 0, s, out, x, act, n);
  BLOOMERY_CUDA_CHECK_LAUNCH("activate " + sz(n));
}

void epilogue(float* y, int64_t n, const Epilogue& e, cudaStream_t s) {
  if (!e.elementwise_only())  // row scales and accumulation live in the split-K GEMV's store only
    cuda_fail(cudaErrorInvalidValue, "epilogue", "a row scale or accumulating store outside the split-K GEMV",
              __FILE__, __LINE__);
  if (n == 0 || e.none()) return;
  pdl_launch(epilogue_k, grid_for(n, kThreads), kThreads, 0, s, y, e, n);
  BLOOMERY_CUDA_CHECK_LAUNCH("epilogue " + sz(n));
}

void scale_rows(float* out, const float* x, const float* sc, int64_t R, int64_t C, cudaStream_t s) {
  if (R * C == 0) return;
  pdl_launch(scale_rows_k, row_grid(R, C), kThreads, 0, s, out, x, sc, R, C);
  BLOOMERY_CUDA_CHECK_LAUNCH("scale_rows [" + std::to_string(R) + ", " + std::to_string(C) + "]");
}

void swiglu(float* out, const float* gate, const float* up, float limit, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  pdl_launch(swiglu_k, grid_for(n, kThreads), kThreads, 0, s, out, gate, up, limit, n);
  BLOOMERY_CUDA_CHECK_LAUNCH("swiglu " + sz(n));
}

void split_cols(const SplitCols& a, const float* src, int64_t ss, int64_t R, cudaStream_t s) {
  if (R * a.total == 0) return;
  pdl_launch(split_cols_k, row_grid(R, a.total), kThreads, 0, s, a, src, ss, R);
  BLOOMERY_CUDA_CHECK_LAUNCH("split_cols [" + std::to_string(R) + ", " + std::to_string(a.total) + "] into " +
                             std::to_string(a.count));
}

void copy_cols(float* dst, int64_t ds, int64_t d0, const float* src, int64_t ss, int64_t s0, int64_t R,
               int64_t n, cudaStream_t s) {
  if (R * n == 0) return;
  pdl_launch(copy_cols_k, row_grid(R, n), kThreads, 0, s, dst, ds, d0, src, ss, s0, R, n);
  BLOOMERY_CUDA_CHECK_LAUNCH("copy_cols [" + std::to_string(R) + ", " + std::to_string(n) + "]");
}

}  // namespace bloomery::cuda
