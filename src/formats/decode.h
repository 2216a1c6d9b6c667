// CPU decoders of every weight format (formats.md §6): stored bytes of one weight (or a window of its rows) →
// f32.
//
// Order of arithmetic, fixed here and mirrored by reference/formats/*.py so both agree bit-exactly in f32
// (every step is one IEEE f32 operation, round to nearest even; no FMA, no reassociation):
//   NVFP4, W4A16_NVFP4 : w = (e2m1(code) * e4m3(block_scale)) * weight_scale_2
//   NVFP4_CT           : g = 1.0f / weight_global_scale (once, in f32), then w = (e2m1 * e4m3(block_scale)) *
//   g MXFP4              : w = e2m1(code) * 2^(b-127)            (or * an F32 scale) MXFP8              : w =
//   e4m3(elem) * 2^(b-127) FP8 tensor/channel : w = e4m3(elem) * s                    (s read from F32, or
//   widened exactly from BF16/F16) FP8 block          : w = e4m3(elem) * S[n/bn][k/bk]        (S from
//   F32/BF16/F16, or 2^(b-127) from E8M0/U8) dense              : exact widening of BF16/F16, F32 copied
// The first product of NVFP4/MX is always exact (few significant bits); only the global multiply rounds.
// Element NaN bit patterns are those of formats/elements.h.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "core/dtype.h"
#include "core/error.h"
#include "formats/format_table.h"

namespace bloomery {

// The stored bytes of one weight, or of a window of its rows (then `rows` is the window's row count and each
// span holds exactly the window's part; for FP8_BLOCK a window starts on a tile row boundary).
struct WeightBytes {
  FormatId format = FormatId::BF16;
  DType main_dtype = DType::BF16;
  DType scale_dtype = DType::U8;  // block_scale dtype (weight_scale / weight_scale_inv)
  DType global_dtype =
      DType::F32;  // global_scale dtype (weight_scale_2, weight_global_scale, FP8 tensor scale)
  DType input_dtype = DType::F32;  // input_scale dtype, when input_scale is set
  uint64_t rows = 0, cols = 0;     // logical (dequantised) rows × cols
  std::span<const uint8_t> main;
  std::span<const uint8_t> block_scale;   // NVFP4/MX: [rows, cols/blk]; FP8 channel: [rows]; FP8 block: grid
  std::span<const uint8_t> global_scale;  // one element
  std::span<const uint8_t> input_scale;   // one element or empty; only validated (NVFP4, NVFP4_CT)
  int block_n = 0, block_k = 0;           // FP8_BLOCK tile shape
};

// Expected byte counts of each part for the fields of `w` (spans ignored). Throws the format's dtype /
// alignment errors (E_NVFP4_WEIGHT_DTYPE, E_NVFP4_K_ALIGN, E_FP8_BLOCK_GRID, ...). 0 = part absent.
struct PartSizes {
  uint64_t main = 0, block_scale = 0, global_scale = 0;
  uint64_t main_row = 0;          // bytes of one weight row in `main`
  uint64_t block_scale_row = 0;   // bytes of one row of the block-scale tensor (FP8 block: one grid row)
  uint64_t block_scale_rows = 0;  // rows of the block-scale tensor (FP8 block: grid rows)
};
PartSizes expected_part_sizes(const WeightBytes& w, const Where& where);
// Throws the format's shape error unless the stored sizes equal the expected ones.
void check_part_sizes(const WeightBytes& w, const PartSizes& stored, const Where& where);

// Validates and decodes through the format table (format_info(w.format).validate / .decode).
void validate_weight_bytes(const WeightBytes& w, const Where& where, Warnings& warnings,
                           bool check_elements = false);
void decode_rows(const WeightBytes& w, uint64_t row0, uint64_t nrows, float* out);

// A float scale element of a scale tensor: F32, BF16, F16 exactly, U8 / F8_E8M0 as 2^(b-127), F8_E4M3.
float scale_value(DType dtype, const uint8_t* data, uint64_t index);

// The f32 multiplier applied after the block product for NVFP4 forms (weight_scale_2, or
// 1/weight_global_scale).
float nvfp4_global_multiplier(const WeightBytes& w);
// The activation global scale as a multiplier (input_scale, or 1/input_global_scale for NVFP4_CT, §6.3);
// 0 when the weight has none (W4A16 semantics).
float nvfp4_input_multiplier(const WeightBytes& w);

namespace decoders {
// Per-format entry points wired into the format table (format_table.cc).
void validate_dense(const WeightBytes&, const Where&, Warnings&, bool);
void decode_dense(const WeightBytes&, uint64_t, uint64_t, float*);
void validate_nvfp4(const WeightBytes&, const Where&, Warnings&, bool);
void decode_nvfp4(const WeightBytes&, uint64_t, uint64_t, float*);
void validate_mxfp4(const WeightBytes&, const Where&, Warnings&, bool);
void decode_mxfp4(const WeightBytes&, uint64_t, uint64_t, float*);
void validate_mxfp8(const WeightBytes&, const Where&, Warnings&, bool);
void decode_mxfp8(const WeightBytes&, uint64_t, uint64_t, float*);
void validate_fp8(const WeightBytes&, const Where&, Warnings&, bool);
void decode_fp8(const WeightBytes&, uint64_t, uint64_t, float*);
}  // namespace decoders

}  // namespace bloomery
