// The FP8-family scale of one weight row per 32-element chunk (weight_access.cuh's fp8_scale with the row's
// part of the address computed once), shared by the decode GEMVs that read FP8 rows chunk by chunk: the
// tensor-core GEMV (gemv_tc.cu) and the one-row GEMV (gemv_row.cuh). raw(c) is issued with the
// chunk's weight loads, value() converts it at use, so the loads ahead do not wait on it.
#pragma once

#include <cstdint>

#include "backend/cuda/dequant.h"
#include "backend/cuda/elements.cuh"

namespace bloomery::cuda {

// Elements one scale covers at least: an MX block (FP8 block tiles are multiples of it).
constexpr int kFp8ScaleChunk = 32;

struct RowScale {
  const uint8_t* mx = nullptr;  // MXFP8: the row's E8M0 bytes, one a chunk
  const float* tile = nullptr;  // FP8 block: the row's tile row of f32 scales
  int chunks_per_tile = 1;
  float fixed = 1.0f;  // FP8 per-tensor / per-channel (and rows past the product: unused)

  // True when w's scales come in whole chunks (FP8 block tiles a positive multiple of 32 wide).
  static bool fits(const DeviceWeight& w) {
    if (w.format == FormatId::FP8_BLOCK)
      return w.block_k > 0 && w.block_k % kFp8ScaleChunk == 0 && w.block_n > 0;
    return w.format == FormatId::MXFP8 || w.format == FormatId::FP8_TENSOR ||
           w.format == FormatId::FP8_CHANNEL;
  }
  __device__ static RowScale of(const DeviceWeight& w, int64_t row) {
    RowScale r;
    if (w.format == FormatId::MXFP8) {
      r.mx = w.block_scales + row * static_cast<int64_t>(w.cols / kFp8ScaleChunk);
    } else if (w.format == FormatId::FP8_BLOCK) {
      const int64_t tiles_k = (static_cast<int64_t>(w.cols) + w.block_k - 1) / w.block_k;
      r.tile = w.scale_f32 + row / w.block_n * tiles_k;
      r.chunks_per_tile = w.block_k / kFp8ScaleChunk;
    } else {
      r.fixed = w.format == FormatId::FP8_CHANNEL ? w.scale_f32[row] : w.global;
    }
    return r;
  }
  __device__ uint32_t raw(int c) const {
    if (mx) return __ldg(mx + c);
    if (tile) return __float_as_uint(__ldg(tile + c / chunks_per_tile));
    return __float_as_uint(fixed);
  }
  __device__ float value(uint32_t raw) const { return mx ? e8m0_to_f32(raw) : __uint_as_float(raw); }
};

}  // namespace bloomery::cuda
