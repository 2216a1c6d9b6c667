// The format table's rows (formats.md §5–§6): layout facts, TP cut units and each format's CPU decoder.
#include "formats/format_table.h"

#include <array>
#include <string>

#include "core/error.h"

#include "formats/decode.h"

namespace bloomery {
namespace {

using namespace decoders;

// One row per FormatId, in enum order (checked below).
const std::array<FormatInfo, size_t(FormatId::kCount)> kFormats{{
    {FormatId::BF16, "BF16", 1, 1, 16, "none", 1, 1, false, validate_dense, decode_dense},
    {FormatId::F16, "F16", 1, 1, 16, "none", 1, 1, false, validate_dense, decode_dense},
    {FormatId::F32, "F32", 1, 1, 32, "none", 1, 1, false, validate_dense, decode_dense},
    {FormatId::NVFP4, "NVFP4", 1, 16, 4,
     "weight U8 [N,K/2] (low nibble = even k); weight_scale F8_E4M3 [N,K/16] linear; weight_scale_2 F32 "
     "multiplier; input_scale F32",
     1, 16, true, validate_nvfp4, decode_nvfp4},
    {FormatId::W4A16_NVFP4, "W4A16_NVFP4", 1, 16, 4,
     "weight U8 [N,K/2]; weight_scale F8_E4M3 [N,K/16]; weight_scale_2 F32 multiplier; no input_scale", 1, 16,
     true, validate_nvfp4, decode_nvfp4},
    {FormatId::NVFP4_CT, "NVFP4_CT", 1, 16, 4,
     "weight_packed U8 [N,K/2]; weight_scale F8_E4M3 [N,K/16]; weight_global_scale F32 divisor", 1, 16, true,
     validate_nvfp4, decode_nvfp4},
    {FormatId::MXFP4, "MXFP4", 1, 32, 4, "weight U8 [N,K/2]; weight_scale E8M0 (U8/F8_E8M0) [N,K/32]", 1, 32,
     true, validate_mxfp4, decode_mxfp4},
    {FormatId::MXFP8, "MXFP8", 1, 32, 8, "weight F8_E4M3 [N,K]; weight_scale E8M0 (U8/F8_E8M0) [N,K/32]", 1,
     32, true, validate_mxfp8, decode_mxfp8},
    {FormatId::FP8_TENSOR, "FP8_TENSOR", 0, 0, 8, "weight F8_E4M3 [N,K]; weight_scale F32/BF16 [] or [1]", 1,
     1, true, validate_fp8, decode_fp8},
    {FormatId::FP8_CHANNEL, "FP8_CHANNEL", 1, 0, 8,
     "weight F8_E4M3 [N,K]; weight_scale F32/BF16 [N] or [N,1]", 1, 1, true, validate_fp8, decode_fp8},
    // Block shape and TP unit come from the record (bn × bk tiles, e.g. 128×128 or 32×32): 0 here.
    {FormatId::FP8_BLOCK, "FP8_BLOCK", 0, 0, 8,
     "weight F8_E4M3 [N,K]; weight_scale(_inv) F32/BF16/E8M0 grid [ceil(N/bn), ceil(K/bk)] (4-D "
     "[N/b,1,K/b,1] "
     "squeezed)",
     0, 0, true, validate_fp8, decode_fp8},
}};

}  // namespace

const FormatInfo& format_info(FormatId id) {
  const size_t i = size_t(id);
  if (i >= kFormats.size() || kFormats[i].id != id)
    raise("E_INTERNAL_FORMAT_TABLE", {}, "a FormatId with a table row", std::to_string(i));
  return kFormats[i];
}

bool is_nvfp4(FormatId f) {
  return f == FormatId::NVFP4 || f == FormatId::W4A16_NVFP4 || f == FormatId::NVFP4_CT;
}

std::string_view format_name(FormatId id) {
  return format_info(id).name;
}

bool format_from_name(std::string_view name, FormatId* out) {
  for (const FormatInfo& f : kFormats)
    if (f.name == name) {
      *out = f.id;
      return true;
    }
  return false;
}

}  // namespace bloomery
