// The tensor-core decode GEMV's entry points for gemv.cu (gemv_tc.cu): BF16- and FP8-stored weights, 1 ≤ T ≤
// 8 rows of x. Public switch: gemv_tc() / set_gemv_tc() in kernels.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "backend/cuda/kernels.h"

namespace bloomery::cuda {

// One row of x of a BF16 weight stays on the split-K kernel: on the H200 it read [10240, 2560] at 2,729 GB/s
// against the tensor cores' 2,612 (2 rows: 2,059 against 2,404; 4 rows: 1,651 against 2,242;
// bench/results/gemv-tc-*). FP8 weights take the tensor cores from two rows, and at one row when the product
// is large: on an H100 the MXFP8 [12288, 2560] read 1,195 GB/s split-K against the tensor cores' 1,595 and
// [10240, 2560] 1,189 against 1,373, while [2560, 6144] lost (1,059 against 947) and the small products lost
// a microsecond or more (bench/results/fp8-tc-2026-12-05).
constexpr int kGemvTcMinRowsBf16 = 2;
constexpr uint64_t kGemvTcFp8OneRowElems = uint64_t{1} << 24;

// True when W and x take the tensor-core kernel: BF16 storage (T ≥ 2) or the FP8 family (MXFP8, FP8
// per-tensor, per-channel, block with tiles a multiple of 32 wide; T ≥ 2, or T = 1 from kGemvTcFp8OneRowElems
// elements), K a multiple of 32, x 16-byte aligned, T ≤ 8. Independent of the switch (the caller checks
// gemv_tc()).
bool gemv_tc_fits(const DeviceWeight& w, const float* x, int T);
// The FP8 family on the tensor cores: off by default until a step-level A/B keeps it (its GPU tests pass, the
// isolated products are faster from two rows: docs/performance.md "FP8 decode GEMV on the tensor cores");
// BLOOMERY_CUDA_GEMV_TC_FP8=1 or this setter (tests, between steps) turns it on.
bool fp8_on_tc();
void set_gemv_tc_fp8(bool on);
// y[t, r] = e(x[t] · W[row0 + r]) for r < n, t < T (the split-K kernel's epilogue, row scale, accumulation).
void gemv_tc_product(const DeviceWeight& w, int64_t row0, int64_t n, const float* x, int T, float* y,
                     cudaStream_t s, const Epilogue& e);
// Products of one x, every one gemv_tc_fits: the bits of one gemv_tc_product() each, in as few launches as
// their cluster sizes allow (gemv_tc.cu).
void gemv_tc_group(std::span<const GemvProduct> ps, const float* x, int T, cudaStream_t s);

}  // namespace bloomery::cuda
