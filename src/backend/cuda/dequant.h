// Dequantisation of a weight stored on the card in its checkpoint format to f32 rows on the card.
// Used to check every format's GPU reading against the CPU decoders, and by prompt paths that want a dense
// tile.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "formats/format_table.h"

namespace bloomery::cuda {

// A weight as it lies on the card. Scale vectors and grids that were BF16/E8M0 on disk are widened to f32 at
// upload (lossless); the element bytes and NVFP4/MX block scales stay in their stored bytes.
struct DeviceWeight {
  FormatId format = FormatId::BF16;
  uint64_t rows = 0, cols = 0;
  const void* data = nullptr;             // stored elements (nibbles, E4M3 bytes, BF16/F16/F32 values)
  const uint8_t* block_scales = nullptr;  // NVFP4: E4M3 [rows, cols/16]; MX: E8M0 [rows, cols/32]
  const float* scale_f32 = nullptr;       // FP8 channel [rows]; FP8 block grid [ceil(rows/bn), ceil(cols/bk)]
  float global = 1.0f;                    // NVFP4 weight_scale_2 (a multiplier); FP8 per-tensor scale
  int block_n = 0, block_k = 0;           // FP8 block tile
};

// out: rows × cols f32, row-major. Launches on `stream`; errors name the format and the shape.
void dequantize(const DeviceWeight& w, float* out, cudaStream_t stream);

}  // namespace bloomery::cuda
