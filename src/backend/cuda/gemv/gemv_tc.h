// The tensor-core decode GEMV's entry points for gemv.cu (gemv_tc.cu): BF16-stored weights, 1 ≤ T ≤ 8 rows of
// x. Public switch: gemv_tc() / set_gemv_tc() in kernels.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "backend/cuda/kernels.h"

namespace bloomery::cuda {

// One row of x stays on the split-K kernel: on the H200 it read [10240, 2560] at 2,729 GB/s against the
// tensor cores' 2,612 (2 rows: 2,059 against 2,404; 4 rows: 1,651 against 2,242; bench/results/gemv-tc-*).
constexpr int kGemvTcMinRows = 2;

// True when W and x take the tensor-core kernel: BF16 storage, K a multiple of 32 (a lane group's 64-byte run
// per row), x 16-byte aligned, 1 ≤ T ≤ 8. Independent of the switch (the caller checks gemv_tc()).
bool gemv_tc_fits(const DeviceWeight& w, const float* x, int T);
// y[t, r] = e(x[t] · W[row0 + r]) for r < n, t < T (the split-K kernel's epilogue, row scale, accumulation).
void gemv_tc_product(const DeviceWeight& w, int64_t row0, int64_t n, const float* x, int T, float* y,
                     cudaStream_t s, const Epilogue& e);
// Products of one x, every one gemv_tc_fits: the bits of one gemv_tc_product() each, in as few launches as
// their cluster sizes allow (gemv_tc.cu).
void gemv_tc_group(std::span<const GemvProduct> ps, const float* x, int T, cudaStream_t s);

}  // namespace bloomery::cuda
