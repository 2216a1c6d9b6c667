// Launchers shared inside src/backend/cuda/gemm: the SIMT f32 baseline (any shape) and the tensor-core
// kernel (tc_gemm.cu). Raw pointers only, so .cu files stay free of fmt.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/dequant.h"

namespace bloomery::cuda {

// SIMT grouped GEMM (f32 FMA; any K): the grouped_gemm contract of grouped_gemm.h.
void gemm_simt_grouped(const DeviceWeight* weights, int64_t E, const int32_t* offsets, int64_t max_rows,
                       int64_t n, int64_t K, FormatId format, const float* xs, float* ys, cudaStream_t s);

}  // namespace bloomery::cuda
