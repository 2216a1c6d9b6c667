// Decoding one logical weight (a WeightRecord) from its TensorSource to f32, whole or by row range, reading
// only the byte ranges the rows need (a split PLE table's rows come from their shard). CSF-coded NVFP4 scales
// are decoded back to E4M3 bytes first; every part is validated (decode.h) before any element is decoded.
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "formats/decode.h"
#include "formats/tensor_source.h"
#include "formats/weight_record.h"

namespace bloomery {

// A window of a weight's stored bytes, as the format stores them (CSF scales already decoded to E4M3 bytes).
// `bytes` spans point into the owned buffers below; `first_row` is the requested row0's index inside the
// window (non-zero only for FP8_BLOCK, whose windows start on a tile row).
struct LoadedWeight {
  WeightBytes bytes;
  uint64_t first_row = 0;
  std::vector<uint8_t> main, block_scale, global_scale, input_scale;

  LoadedWeight() = default;
  LoadedWeight(const LoadedWeight&) = delete;  // spans point into this object's own buffers
  LoadedWeight& operator=(const LoadedWeight&) = delete;
  LoadedWeight(LoadedWeight&&) = default;  // vector moves keep their heap storage, so spans stay valid
  LoadedWeight& operator=(LoadedWeight&&) = default;
};

// Reads and validates rows [row0, row0 + nrows) of `rec`'s stored parts. Throws the format's E_ ids.
LoadedWeight load_weight_rows(const TensorSource& src, const WeightRecord& rec, uint64_t row0, uint64_t nrows,
                              Warnings& warnings, bool check_elements = false);

// The whole weight as f32 [rows, cols], row-major.
std::vector<float> decode_weight(const TensorSource& src, const WeightRecord& rec, Warnings& warnings,
                                 bool check_elements = false);
// Rows [row0, row0 + nrows) as f32 into out[nrows · cols].
void decode_weight_rows(const TensorSource& src, const WeightRecord& rec, uint64_t row0, uint64_t nrows,
                        float* out, Warnings& warnings);
std::vector<float> decode_weight_rows(const TensorSource& src, const WeightRecord& rec, uint64_t row0,
                                      uint64_t nrows, Warnings& warnings);

}  // namespace bloomery
