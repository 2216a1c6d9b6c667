// The one format table: every stored weight format's layout, CPU decoder and tensor-parallel cut unit.
// Nothing outside src/formats switches on FormatId; other code asks this table.
// Spec: shared/spec/formats.md §5, §6, §7, §8.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace bloomery {

struct WeightBytes;  // formats/decode.h
struct Where;        // core/error.h
class Warnings;      // core/error.h

enum class FormatId : uint8_t {
  BF16,   // dense
  F16,    // dense
  F32,    // dense
  NVFP4,  // ModelOpt: U8 nibbles [N,K/2] + E4M3 [N,K/16] + F32 weight_scale_2 (multiplier) + input_scale
  W4A16_NVFP4,  // NVFP4 tensors without input_scale: activations stay high precision
  NVFP4_CT,     // compressed-tensors: weight_packed + weight_scale + weight_global_scale (a divisor)
  MXFP4,        // U8 nibbles [N,K/2] + E8M0 [N,K/32]
  MXFP8,        // F8_E4M3 [N,K] + E8M0 [N,K/32]
  FP8_TENSOR,   // F8_E4M3 [N,K] + one scale (multiplier)
  FP8_CHANNEL,  // F8_E4M3 [N,K] + scale [N] or [N,1]
  FP8_BLOCK,    // F8_E4M3 [N,K] + 2-D grid [ceil(N/bn), ceil(K/bk)] of F32/BF16 multipliers or E8M0 bytes
  kCount
};

// How block scales are encoded on disk (NVFP4 only has a choice).
enum class ScaleEncoding : uint8_t { Plain, NvFp4Csf };

struct FormatInfo {
  FormatId id;
  std::string_view name;          // printed by inspect
  int block_n;                    // rows sharing one scale (0 = whole tensor or per-record, e.g. FP8 block)
  int block_k;                    // K elements sharing one scale (0 = whole row or per-record)
  int bits_per_element;           // stored weight bits per element (4 or 8 or 16 or 32)
  std::string_view scale_layout;  // human description of the scale tensors
  int tp_row_unit;  // smallest row step a tensor-parallel cut may take (0 = per-record: a scale tile)
  int tp_col_unit;  // smallest column (K) step
  bool quantized;
  // Checks a weight's stored bytes (dtypes, byte counts, scale contents) and throws the format's E_ ids;
  // W_ warnings go to `warnings`. `check_elements` also scans weight elements for NaN codes (inspect
  // --check).
  void (*validate)(const WeightBytes& w, const Where& where, Warnings& warnings, bool check_elements);
  // Decodes rows [row0, row0+nrows) of a validated WeightBytes to f32, row-major, `nrows × cols` floats.
  void (*decode)(const WeightBytes& w, uint64_t row0, uint64_t nrows, float* out);
};

const FormatInfo& format_info(FormatId id);
std::string_view format_name(FormatId id);
// The NVFP4 family: E2M1 elements, E4M3 scales per 16 elements and an f32 global (ModelOpt NVFP4, its
// W4A16 variant and compressed-tensors' NVFP4, whose global is stored as a divisor).
bool is_nvfp4(FormatId f);
// Inverse of format_name (exact match); false when unknown.
bool format_from_name(std::string_view name, FormatId* out);

}  // namespace bloomery
