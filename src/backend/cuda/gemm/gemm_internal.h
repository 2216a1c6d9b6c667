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

// Tensor-core kernel (tc_gemm.cu): K a multiple of 32, weight bytes and x 16-byte aligned (cudaMalloc'd
// weights always are). Every stored format.
bool tc_gemm_supported(int64_t K, const void* weight_data, const float* x);
// split: x enters as two BF16 terms (hi + lo, ~16 significant bits, twice the mma work) instead of one.
void tc_gemm(const DeviceWeight& w, int64_t row0, int64_t n, const float* x, int64_t T, float* y, bool split,
             cudaStream_t s);
// The grouped kernel's tile (tc_gemm.cu, WarpTile): Wide multiplies whole 128-row tiles of an expert's rows,
// Tall only its rows rounded up to 16, in 64-row tiles (two blocks per SM in split mode).
enum class GroupedTile { Wide, Tall };
// The tile grouped_gemm takes: Tall unless BLOOMERY_CUDA_GROUPED_TILE=wide (a measurement switch, read once).
GroupedTile grouped_tile();
void tc_grouped_gemm(const DeviceWeight* weights, int64_t E, const int32_t* offsets, int64_t max_rows,
                     int64_t n, int64_t K, FormatId format, const float* xs, float* ys, bool split,
                     GroupedTile tile, cudaStream_t s);

// x (rows × K, 16-byte aligned, K a multiple of 8) rounded to BF16 in a stream-ordered allocation on `s`;
// split: the low terms BF16(x − hi) follow the high ones (hi + rows·K). Free it with cudaFreeAsync on `s`.
void* round_activations_bf16(const float* x, int64_t rows, int64_t K, bool split, cudaStream_t s);

// cuBLASLt for BF16-stored weights (lt_gemm.cc): y = x · W[row0 : row0 + n]ᵀ with the activations in BF16
// (split: hi + lo, two products into one f32 result). False when it does not apply (another format, a shape
// it refuses, or switched off), and nothing ran: the caller takes its own kernel.
bool lt_gemm(const DeviceWeight& w, int64_t row0, int64_t n, const float* x, int64_t T, float* y, bool split,
             cudaStream_t s);

// How prompt GEMMs run: the tensor-core kernel with BF16 activations (Bf16, the default; products of up to
// kSplitRowsUpTo rows, gemm.cu, still take the split), with split hi + lo BF16 activations (Bf16x2, close to
// f32 accuracy: the reference mode), or the SIMT f32 kernel (Simt). gemm_mode_at_start(): kDefaultGemmMode
// (gemm.cu) unless BLOOMERY_CUDA_GEMM=bf16|bf16x2|simt (read once); set_gemm_mode between steps (tests that
// hold products to f32 bounds run in Bf16x2).
enum class GemmMode { Bf16, Bf16x2, Simt };
GemmMode gemm_mode_at_start();
GemmMode gemm_mode();
void set_gemm_mode(GemmMode mode);
// The SIMT f32 kernel for any shape (dense): what gemm() falls back to when the tensor-core kernel cannot
// take the shape.
void gemm_simt(const DeviceWeight& w, int64_t row0, int64_t n, const float* x, int64_t T, float* y,
               cudaStream_t s);

}  // namespace bloomery::cuda
