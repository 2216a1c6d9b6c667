// The tensor-core decode GEMV's entry points for gemv.cu (gemv_tc.cu): BF16- and FP8-stored weights, 1 ≤ T ≤
// 8 rows of x. Public switch: gemv_tc() / set_gemv_tc() in kernels.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "backend/cuda/kernels.h"

namespace bloomery::cuda {

// One row of x stays on the split-K kernel: on the H200 a BF16 [10240, 2560] read 2,729 GB/s there against
// the tensor cores' 2,612 (2 rows: 2,059 against 2,404; 4 rows: 1,651 against 2,242;
// bench/results/gemv-tc-*). An MXFP8 product at one row gained alone only when large ([12288, 2560] 1,204 →
// 1,493 GB/s, smaller ones tied or lost) and the qad decode step at C = 1 did not gain with it
// (bench/results/fp8-tc-2026-12-05).
constexpr int kGemvTcMinRows = 2;

// True when W and x take the tensor-core kernel: BF16 storage or the FP8 family (MXFP8, FP8 per-tensor,
// per-channel, block with tiles a multiple of 32 wide), 2 ≤ T ≤ 8, K a multiple of 32, x 16-byte aligned.
// Independent of the switch (the caller checks gemv_tc()).
bool gemv_tc_fits(const DeviceWeight& w, const float* x, int T);
// The FP8 family on the tensor cores (on; BLOOMERY_CUDA_GEMV_TC_FP8=0 or this setter between steps: split-K).
// Kept on its A/B: qad tg32 d4096 C = 4 on an H200 170-176 → 221-229 tok/s (docs/performance.md).
bool fp8_on_tc();
void set_gemv_tc_fp8(bool on);
// y[t, r] = e(x[t] · W[row0 + r]) for r < n, t < T (the split-K kernel's epilogue, row scale, accumulation).
void gemv_tc_product(const DeviceWeight& w, int64_t row0, int64_t n, const float* x, int T, float* y,
                     cudaStream_t s, const Epilogue& e);
// Products of one x, every one gemv_tc_fits: the bits of one gemv_tc_product() each, in as few launches as
// their cluster sizes allow (gemv_tc.cu).
void gemv_tc_group(std::span<const GemvProduct> ps, const float* x, int T, cudaStream_t s);

}  // namespace bloomery::cuda
