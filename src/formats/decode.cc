// CPU decoders and byte-level validation of every weight format (formats.md §6); arithmetic order in
// decode.h.
#include "formats/decode.h"

#include <cmath>
#include <cstring>
#include <string>

#include "formats/elements.h"

namespace bloomery {
namespace {

std::string hex2(uint8_t b) {
  return fmt::format("0x{:02X}", b);
}

bool is_fp8(FormatId f) {
  return f == FormatId::FP8_TENSOR || f == FormatId::FP8_CHANNEL || f == FormatId::FP8_BLOCK;
}
bool is_float_scale(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16;
}
bool is_e8m0(DType t) {
  return t == DType::U8 || t == DType::F8_E8M0;
}

// The error ids of one format's parts (§6.2.2, §6.3, §6.5, §6.6, §6.7, §12).
struct PartIds {
  const char* main_dtype;
  const char* main_shape;
  const char* k_align;
  const char* scale_dtype;
  const char* scale_shape;
  const char* global_shape;
};

PartIds part_ids(FormatId f) {
  switch (f) {
    case FormatId::NVFP4:
    case FormatId::W4A16_NVFP4:
      return {"E_NVFP4_WEIGHT_DTYPE", "E_NVFP4_WEIGHT_SHAPE", "E_NVFP4_K_ALIGN",
              "E_NVFP4_SCALE_DTYPE",  "E_NVFP4_SCALE_SHAPE",  "E_NVFP4_GLOBAL_SHAPE"};
    case FormatId::NVFP4_CT:  // weight_packed and weight_global_scale are the renamed tensors (§6.3)
      return {"E_CT_NVFP4_WEIGHT_DTYPE", "E_CT_NVFP4_WEIGHT_SHAPE", "E_CT_NVFP4_K_ALIGN",
              "E_NVFP4_SCALE_DTYPE",     "E_NVFP4_SCALE_SHAPE",     "E_CT_NVFP4_GLOBAL_SHAPE"};
    case FormatId::MXFP4:
      return {"E_MXFP4_SHAPE", "E_MXFP4_SHAPE", "E_MXFP4_SHAPE", "E_MXFP4_SCALE_DTYPE", "E_MXFP4_SHAPE", ""};
    case FormatId::MXFP8:
      return {"E_MXFP8_WEIGHT_DTYPE", "E_MXFP8_WEIGHT_DTYPE", "E_MXFP8_K_ALIGN",
              "E_MXFP8_SCALE_SHAPE",  "E_MXFP8_SCALE_SHAPE",  ""};
    case FormatId::FP8_TENSOR:
    case FormatId::FP8_CHANNEL:
    case FormatId::FP8_BLOCK:
      return {"E_FP8_WEIGHT_DTYPE", "E_FP8_WEIGHT_DTYPE", "",
              "E_FP8_SCALE_SHAPE",  "E_FP8_SCALE_SHAPE",  "E_FP8_SCALE_SHAPE"};
    default:
      return {"E_ST_DTYPE_UNSUPPORTED", "E_DENSE_SHAPE", "", "", "", ""};
  }
}

Where with_field(Where w, std::string field) {
  w.field = std::move(field);
  return w;
}

uint64_t ceil_div(uint64_t a, uint64_t b) {
  return (a + b - 1) / b;
}

// Bytes of one element of a scale dtype we can read, 0 if unreadable.
uint64_t scale_elem_bytes(DType t) {
  switch (t) {
    case DType::F32:
      return 4;
    case DType::BF16:
    case DType::F16:
      return 2;
    case DType::U8:
    case DType::F8_E8M0:
    case DType::F8_E4M3:
      return 1;
    default:
      return 0;
  }
}

// A global (one-element) scale from its span; the span size has been checked.
float global_value(DType t, std::span<const uint8_t> bytes) {
  return scale_value(t, bytes.data(), 0);
}

void require_finite_positive(float v, const char* id, const Where& where, const char* what) {
  if (!(v > 0.0f) || !std::isfinite(v))
    raise(id, where, fmt::format("{} > 0 and finite", what), fmt::format("{}", v));
}

}  // namespace

float scale_value(DType dtype, const uint8_t* data, uint64_t index) {
  switch (dtype) {
    case DType::F32:
      return elem::load_f32le(data + 4 * index);
    case DType::BF16:
      return elem::bf16(elem::load_u16le(data + 2 * index));
    case DType::F16:
      return elem::f16(elem::load_u16le(data + 2 * index));
    case DType::U8:
    case DType::F8_E8M0:
      return elem::e8m0(data[index]);
    case DType::F8_E4M3:
      return elem::e4m3(data[index]);
    default:
      raise("E_ST_DTYPE_UNSUPPORTED", {}, "a scale dtype F32, BF16, F16, U8, F8_E8M0 or F8_E4M3",
            std::string(dtype_name(dtype)));
  }
}

PartSizes expected_part_sizes(const WeightBytes& w, const Where& where) {
  const PartIds ids = part_ids(w.format);
  const FormatId f = w.format;
  PartSizes s;
  const uint64_t R = w.rows, K = w.cols;
  auto bad_main_dtype = [&](const char* expected) {
    raise(ids.main_dtype, with_field(where, "weight"), expected, std::string(dtype_name(w.main_dtype)));
  };
  auto bad_scale_dtype = [&](const char* expected) {
    raise(ids.scale_dtype, with_field(where, "weight_scale"), expected,
          std::string(dtype_name(w.scale_dtype)));
  };
  auto global_bytes = [&](DType t) {
    if (!is_float_scale(t))
      raise(ids.global_shape[0] ? ids.global_shape : "E_ST_DTYPE_UNSUPPORTED",
            with_field(where, "global scale"), "an F32, BF16 or F16 scalar", std::string(dtype_name(t)));
    return scale_elem_bytes(t);
  };
  if (f == FormatId::BF16 || f == FormatId::F16 || f == FormatId::F32) {
    if (!is_float_scale(w.main_dtype)) bad_main_dtype("BF16, F16 or F32");
    s.main_row = K * scale_elem_bytes(w.main_dtype);
  } else if (is_nvfp4(f) || f == FormatId::MXFP4) {
    const uint64_t blk = f == FormatId::MXFP4 ? 32 : 16;
    if (w.main_dtype != DType::U8 && w.main_dtype != DType::I8 && w.main_dtype != DType::F4)
      bad_main_dtype("U8, I8 or F4 (packed E2M1)");
    if (K % blk != 0)
      raise(ids.k_align, with_field(where, "weight"), fmt::format("K a multiple of {}", blk),
            std::to_string(K));
    s.main_row = K / 2;
    if (is_nvfp4(f)) {
      if (w.scale_dtype != DType::F8_E4M3) bad_scale_dtype("F8_E4M3");
    } else if (!is_e8m0(w.scale_dtype) && w.scale_dtype != DType::F32) {
      bad_scale_dtype("U8 or F8_E8M0 (E8M0), or F32");
    }
    s.block_scale_row = (K / blk) * scale_elem_bytes(w.scale_dtype);
    s.block_scale_rows = R;
    if (is_nvfp4(f)) s.global_scale = global_bytes(w.global_dtype);
  } else if (f == FormatId::MXFP8 || is_fp8(f)) {
    if (w.main_dtype != DType::F8_E4M3) bad_main_dtype("F8_E4M3");
    s.main_row = K;
    if (f == FormatId::MXFP8) {
      if (K % 32 != 0)
        raise(ids.k_align, with_field(where, "weight"), "K a multiple of 32", std::to_string(K));
      if (!is_e8m0(w.scale_dtype)) bad_scale_dtype("U8 or F8_E8M0 (E8M0)");
      s.block_scale_row = K / 32;
      s.block_scale_rows = R;
    } else if (f == FormatId::FP8_TENSOR) {
      s.global_scale = global_bytes(w.global_dtype);
    } else if (f == FormatId::FP8_CHANNEL) {
      if (!is_float_scale(w.scale_dtype)) bad_scale_dtype("F32, BF16 or F16");
      s.block_scale_row = scale_elem_bytes(w.scale_dtype);
      s.block_scale_rows = R;
    } else {
      if (w.block_n <= 0 || w.block_k <= 0)
        raise("E_FP8_BLOCK_GRID", with_field(where, "weight_scale"), "a known block size (bn, bk > 0)",
              fmt::format("{}x{}", w.block_n, w.block_k));
      if (!is_float_scale(w.scale_dtype) && !is_e8m0(w.scale_dtype))
        bad_scale_dtype("F32, BF16, F16, or E8M0 (U8 / F8_E8M0)");
      s.block_scale_row = ceil_div(K, w.block_k) * scale_elem_bytes(w.scale_dtype);
      s.block_scale_rows = ceil_div(R, w.block_n);
    }
  } else {
    raise("E_INTERNAL_FORMAT_TABLE", where, "a known FormatId", std::to_string(int(f)));
  }
  s.main = s.main_row * R;
  s.block_scale = s.block_scale_row * s.block_scale_rows;
  return s;
}

void check_part_sizes(const WeightBytes& w, const PartSizes& stored, const Where& where) {
  const PartIds ids = part_ids(w.format);
  const PartSizes want = expected_part_sizes(w, where);
  if (stored.main != want.main)
    raise(ids.main_shape, with_field(where, "weight"),
          fmt::format("{} bytes for [{}, {}] {}", want.main, w.rows, w.cols, format_name(w.format)),
          fmt::format("{} bytes", stored.main));
  if (stored.block_scale != want.block_scale)
    raise(ids.scale_shape, with_field(where, "weight_scale"),
          want.block_scale_rows ? fmt::format("{} bytes ({} rows of {})", want.block_scale,
                                              want.block_scale_rows, want.block_scale_row)
                                : std::string("no block scale"),
          fmt::format("{} bytes", stored.block_scale));
  if (stored.global_scale != want.global_scale)
    raise(ids.global_shape[0] ? ids.global_shape : "E_INTERNAL_FORMAT_TABLE",
          with_field(where, "global scale"), want.global_scale ? "one element" : "no global scale",
          fmt::format("{} bytes", stored.global_scale));
}

namespace {

// Every format's validate starts here: dtypes and byte counts of the spans.
void check_spans(const WeightBytes& w, const Where& where) {
  PartSizes stored;
  stored.main = w.main.size();
  stored.block_scale = w.block_scale.size();
  stored.global_scale = w.global_scale.size();
  check_part_sizes(w, stored, where);
}

// Shared by the FP8 families and FP8-block E8M0 grids: float scales > 0 and finite, E8M0 bytes not 0xFF.
void check_scale_values(DType t, std::span<const uint8_t> bytes, const Where& where) {
  const uint64_t n = bytes.size() / scale_elem_bytes(t);
  for (uint64_t i = 0; i < n; ++i) {
    if (is_e8m0(t)) {
      if (bytes[i] == 0xFF)
        raise("E_MX_SCALE_NAN", with_field(where, "weight_scale"), "E8M0 bytes 0x00..0xFE",
              fmt::format("0xFF at scale element {}", i));
    } else {
      const float v = scale_value(t, bytes.data(), i);
      if (!(v > 0.0f) || !std::isfinite(v))
        raise("E_FP8_SCALE_NONFINITE", with_field(where, "weight_scale"), "scales > 0 and finite",
              fmt::format("{} at scale element {}", v, i));
    }
  }
}

void check_e4m3_elements(const WeightBytes& w, const Where& where) {
  for (uint64_t i = 0; i < w.main.size(); ++i)
    if (elem::e4m3_is_nan(w.main[i]))
      raise("E_FP8_WEIGHT_NAN", with_field(where, "weight"), "no E4M3 NaN codes (0x7F, 0xFF)",
            fmt::format("{} at row {}, column {}", hex2(w.main[i]), i / w.cols, i % w.cols));
}

}  // namespace

float nvfp4_global_multiplier(const WeightBytes& w) {
  const float g = global_value(w.global_dtype, w.global_scale);
  // compressed-tensors stores the divisor; §6.3: convert once in f32, then treat as §6.2.
  return w.format == FormatId::NVFP4_CT ? 1.0f / g : g;
}

float nvfp4_input_multiplier(const WeightBytes& w) {
  if (w.input_scale.empty() || w.format == FormatId::W4A16_NVFP4) return 0.0f;
  const float v = scale_value(w.input_dtype, w.input_scale.data(), 0);
  return w.format == FormatId::NVFP4_CT ? 1.0f / v : v;
}

void validate_weight_bytes(const WeightBytes& w, const Where& where, Warnings& warnings,
                           bool check_elements) {
  format_info(w.format).validate(w, where, warnings, check_elements);
}

void decode_rows(const WeightBytes& w, uint64_t row0, uint64_t nrows, float* out) {
  if (row0 > w.rows || nrows > w.rows - row0)
    raise("E_INTERNAL_DECODE_RANGE", {}, fmt::format("rows within [0, {})", w.rows),
          fmt::format("[{}, {})", row0, row0 + nrows));
  format_info(w.format).decode(w, row0, nrows, out);
}

namespace decoders {

// ---- dense
// -------------------------------------------------------------------------------------------------

void validate_dense(const WeightBytes& w, const Where& where, Warnings&, bool) {
  check_spans(w, where);
}

void decode_dense(const WeightBytes& w, uint64_t row0, uint64_t nrows, float* out) {
  const uint64_t n = nrows * w.cols, first = row0 * w.cols;
  const uint8_t* p = w.main.data();
  switch (w.main_dtype) {
    case DType::F32:
      std::memcpy(out, p + 4 * first, 4 * n);
      break;
    case DType::BF16:
      for (uint64_t i = 0; i < n; ++i) out[i] = elem::bf16(elem::load_u16le(p + 2 * (first + i)));
      break;
    case DType::F16:
      for (uint64_t i = 0; i < n; ++i) out[i] = elem::f16(elem::load_u16le(p + 2 * (first + i)));
      break;
    default:
      raise("E_ST_DTYPE_UNSUPPORTED", {}, "BF16, F16 or F32", std::string(dtype_name(w.main_dtype)));
  }
}

// ---- NVFP4 (ModelOpt, W4A16, compressed-tensors)
// ---------------------------------------------------------------

void validate_nvfp4(const WeightBytes& w, const Where& where, Warnings& warnings, bool) {
  check_spans(w, where);
  const bool ct = w.format == FormatId::NVFP4_CT;
  const float g = global_value(w.global_dtype, w.global_scale);
  if (ct) {
    require_finite_positive(g, "E_CT_GLOBAL_NONPOSITIVE", with_field(where, "weight_global_scale"),
                            "weight_global_scale");
    if (!std::isfinite(1.0f / g))
      raise("E_CT_GLOBAL_NONPOSITIVE", with_field(where, "weight_global_scale"),
            "a divisor whose f32 reciprocal is finite", fmt::format("{}", g));
  } else {
    require_finite_positive(g, "E_NVFP4_GLOBAL_NONFINITE", with_field(where, "weight_scale_2"),
                            "weight_scale_2");
  }
  // input_scale is checked only where it is used (plain NVFP4 / CT); W4A16 ignores it (§6.4).
  if (!w.input_scale.empty() && w.format != FormatId::W4A16_NVFP4) {
    const char* name = ct ? "input_global_scale" : "input_scale";
    if (w.input_scale.size() != scale_elem_bytes(w.input_dtype) || !is_float_scale(w.input_dtype))
      raise(ct ? "E_CT_NVFP4_GLOBAL_SHAPE" : "E_NVFP4_GLOBAL_SHAPE", with_field(where, name),
            "one F32/BF16/F16 element",
            fmt::format("{} bytes of {}", w.input_scale.size(), dtype_name(w.input_dtype)));
    require_finite_positive(scale_value(w.input_dtype, w.input_scale.data(), 0),
                            ct ? "E_CT_GLOBAL_NONPOSITIVE" : "E_NVFP4_GLOBAL_NONFINITE",
                            with_field(where, name), name);
  }
  uint64_t negative = 0, zero = 0;
  const uint64_t kb = w.cols / 16;
  for (uint64_t i = 0; i < w.block_scale.size(); ++i) {
    const uint8_t b = w.block_scale[i];
    if (elem::e4m3_is_nan(b))
      raise("E_NVFP4_SCALE_NAN", with_field(where, "weight_scale"), "E4M3 block scales that are not NaN",
            fmt::format("{} at row {}, block {}", hex2(b), i / kb, i % kb));
    if (b & 0x80) ++negative;
    if ((b & 0x7F) == 0) ++zero;
  }
  if (negative)
    warnings.add("W_NVFP4_SCALE_NEGATIVE", with_field(where, "weight_scale"),
                 fmt::format("{} block scales have the sign bit set (decoded as negative)", negative));
  if (zero)
    warnings.add("W_NVFP4_SCALE_ZERO", with_field(where, "weight_scale"),
                 fmt::format("{} block scales are zero (their blocks decode to 0)", zero));
}

void decode_nvfp4(const WeightBytes& w, uint64_t row0, uint64_t nrows, float* out) {
  const float g = nvfp4_global_multiplier(w);
  const uint64_t K = w.cols, kb = K / 16;
  const float* e2m1 = elem::e2m1_table();
  float lut[16];
  for (uint64_t r = 0; r < nrows; ++r) {
    const uint8_t* codes = w.main.data() + (row0 + r) * (K / 2);
    const uint8_t* scales = w.block_scale.data() + (row0 + r) * kb;
    float* o = out + r * K;
    for (uint64_t b = 0; b < kb; ++b) {
      // The block's 16 possible values, each computed in the documented order (e2m1 * s) * g.
      const float s = elem::e4m3(scales[b]);
      for (int c = 0; c < 16; ++c) lut[c] = (e2m1[c] * s) * g;
      for (int j = 0; j < 8; ++j) {
        const uint8_t byte = codes[b * 8 + j];
        o[b * 16 + 2 * j] = lut[byte & 0xF];  // low nibble = even element (§6.2)
        o[b * 16 + 2 * j + 1] = lut[byte >> 4];
      }
    }
  }
}

// ---- MXFP4 / MXFP8
// -------------------------------------------------------------------------------------------

void validate_mxfp4(const WeightBytes& w, const Where& where, Warnings&, bool) {
  check_spans(w, where);
  if (is_e8m0(w.scale_dtype)) {
    check_scale_values(w.scale_dtype, w.block_scale, where);
  } else {
    for (uint64_t i = 0; i < w.block_scale.size() / 4; ++i) {
      const float v = scale_value(w.scale_dtype, w.block_scale.data(), i);
      if (!std::isfinite(v))
        raise("E_MX_SCALE_NAN", with_field(where, "weight_scale"), "finite F32 scales",
              fmt::format("{} at scale element {}", v, i));
    }
  }
}

void decode_mxfp4(const WeightBytes& w, uint64_t row0, uint64_t nrows, float* out) {
  const uint64_t K = w.cols, kb = K / 32;
  const float* e2m1 = elem::e2m1_table();
  float lut[16];
  for (uint64_t r = 0; r < nrows; ++r) {
    const uint8_t* codes = w.main.data() + (row0 + r) * (K / 2);
    float* o = out + r * K;
    for (uint64_t b = 0; b < kb; ++b) {
      const float s = scale_value(w.scale_dtype, w.block_scale.data(), (row0 + r) * kb + b);
      for (int c = 0; c < 16; ++c) lut[c] = e2m1[c] * s;
      for (int j = 0; j < 16; ++j) {
        const uint8_t byte = codes[b * 16 + j];
        o[b * 32 + 2 * j] = lut[byte & 0xF];
        o[b * 32 + 2 * j + 1] = lut[byte >> 4];
      }
    }
  }
}

void validate_mxfp8(const WeightBytes& w, const Where& where, Warnings&, bool check_elements) {
  check_spans(w, where);
  check_scale_values(w.scale_dtype, w.block_scale, where);
  if (check_elements) check_e4m3_elements(w, where);
}

void decode_mxfp8(const WeightBytes& w, uint64_t row0, uint64_t nrows, float* out) {
  const uint64_t K = w.cols, kb = K / 32;
  const float* e4m3 = elem::e4m3_table();
  for (uint64_t r = 0; r < nrows; ++r) {
    const uint8_t* x = w.main.data() + (row0 + r) * K;
    const uint8_t* scales = w.block_scale.data() + (row0 + r) * kb;
    float* o = out + r * K;
    for (uint64_t b = 0; b < kb; ++b) {
      const float s = elem::e8m0(scales[b]);
      for (int j = 0; j < 32; ++j) o[b * 32 + j] = e4m3[x[b * 32 + j]] * s;
    }
  }
}

// ---- FP8 per-tensor / per-channel / block
// ------------------------------------------------------------------

void validate_fp8(const WeightBytes& w, const Where& where, Warnings&, bool check_elements) {
  check_spans(w, where);
  if (w.format == FormatId::FP8_TENSOR)
    check_scale_values(w.global_dtype, w.global_scale, where);
  else
    check_scale_values(w.scale_dtype, w.block_scale, where);
  if (check_elements) check_e4m3_elements(w, where);
}

void decode_fp8(const WeightBytes& w, uint64_t row0, uint64_t nrows, float* out) {
  const uint64_t K = w.cols;
  const float* e4m3 = elem::e4m3_table();
  const float tensor_scale =
      w.format == FormatId::FP8_TENSOR ? global_value(w.global_dtype, w.global_scale) : 0.0f;
  const uint64_t grid_cols = w.format == FormatId::FP8_BLOCK ? ceil_div(K, w.block_k) : 0;
  for (uint64_t r = 0; r < nrows; ++r) {
    const uint64_t row = row0 + r;
    const uint8_t* x = w.main.data() + row * K;
    float* o = out + r * K;
    if (w.format == FormatId::FP8_BLOCK) {
      const uint64_t grid_row = row / w.block_n;
      for (uint64_t c0 = 0, gc = 0; c0 < K; c0 += w.block_k, ++gc) {
        const float s = scale_value(w.scale_dtype, w.block_scale.data(), grid_row * grid_cols + gc);
        const uint64_t c1 = std::min<uint64_t>(K, c0 + w.block_k);  // the last tile may be partial
        for (uint64_t c = c0; c < c1; ++c) o[c] = e4m3[x[c]] * s;
      }
    } else {
      const float s = w.format == FormatId::FP8_TENSOR
                          ? tensor_scale
                          : scale_value(w.scale_dtype, w.block_scale.data(), row);
      for (uint64_t c = 0; c < K; ++c) o[c] = e4m3[x[c]] * s;
    }
  }
}

}  // namespace decoders
}  // namespace bloomery
