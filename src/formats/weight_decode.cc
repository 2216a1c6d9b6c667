// Ranged reads of a WeightRecord's parts through TensorSource, CSF scale decoding, validation, f32 decode.
#include "formats/weight_decode.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "formats/csf.h"

namespace bloomery {
namespace {

uint64_t ceil_div(uint64_t a, uint64_t b) {
  return (a + b - 1) / b;
}

Where with_field(Where w, std::string field) {
  w.field = std::move(field);
  return w;
}

uint64_t shard_rows(const TensorEntry& t) {
  return t.shape.empty() ? 1 : t.shape[0];
}

// Reads rows [r0, r1) of a (possibly split) part: `parts` are shards in order, each holding consecutive rows
// of `row_bytes` (the main tensor of a split table, or its per-shard block scales).
void read_split_rows(const TensorSource& src, const std::vector<const TensorEntry*>& parts,
                     uint64_t total_rows, uint64_t row_bytes, uint64_t r0, uint64_t r1, uint8_t* dst) {
  uint64_t first = 0;  // global row index of the current shard's first row
  for (const TensorEntry* t : parts) {
    const uint64_t n = parts.size() == 1 ? total_rows : shard_rows(*t);
    const uint64_t lo = std::max(r0, first), hi = std::min(r1, first + n);
    if (lo < hi) {
      src.read(*t, (lo - first) * row_bytes, (hi - lo) * row_bytes, dst);
      dst += (hi - lo) * row_bytes;
    }
    first += n;
    if (first >= r1) break;
  }
}

std::vector<uint8_t> read_range(const TensorSource& src, const TensorEntry& t, uint64_t offset,
                                uint64_t len) {
  std::vector<uint8_t> out(len);
  if (len) src.read(t, offset, len, out.data());
  return out;
}

}  // namespace

LoadedWeight load_weight_rows(const TensorSource& src, const WeightRecord& rec, uint64_t row0, uint64_t nrows,
                              Warnings& warnings, bool check_elements) {
  if (rec.main.empty() || rec.main[0] == nullptr)
    raise("E_INTERNAL_RECORD", Where{{}, rec.name, {}}, "a record with a main tensor", "none");
  const Where where{src.display_path(rec.main[0]->file_index), rec.name, {}};
  const FormatId f = rec.format;
  const bool csf_coded = rec.scale_encoding == ScaleEncoding::NvFp4Csf;
  const uint64_t R = rec.rows(), K = rec.cols();
  if (row0 > R || nrows > R - row0)
    raise("E_INTERNAL_DECODE_RANGE", where, fmt::format("rows within [0, {})", R),
          fmt::format("[{}, {})", row0, row0 + nrows));

  // Header of the whole weight: dtypes and full sizes, checked against the stored tensors before any read.
  WeightBytes whole;
  whole.format = f;
  whole.main_dtype = rec.main[0]->dtype;
  whole.rows = R;
  whole.cols = K;
  whole.block_n = rec.block_n;
  whole.block_k = rec.block_k;
  for (const TensorEntry* t : rec.main)
    if (t->dtype != whole.main_dtype)
      raise("E_PLE_DTYPE_MIXED", with_field(where, t->name), std::string(dtype_name(whole.main_dtype)),
            std::string(dtype_name(t->dtype)));
  if (csf_coded) {
    if (!is_nvfp4(f) || !rec.csf_fixed || !rec.csf_exceptions)
      raise("E_CSF_PARTNER_MISSING", with_field(where, "weight_scale"),
            "an NVFP4 weight with both nvfp4_csf_fixed and nvfp4_csf_exceptions",
            fmt::format("{} with fixed {} and exceptions {}", format_name(f),
                        rec.csf_fixed ? "present" : "absent", rec.csf_exceptions ? "present" : "absent"));
    if (rec.csf_fixed->dtype != DType::U8)
      raise("E_CSF_FIXED_DTYPE", with_field(where, rec.csf_fixed->name), "U8",
            std::string(dtype_name(rec.csf_fixed->dtype)));
    if (rec.csf_exceptions->dtype != DType::U32 || rec.csf_exceptions->shape.size() > 1)
      raise("E_CSF_EXC_DTYPE", with_field(where, rec.csf_exceptions->name), "1-D U32",
            fmt::format("{} of rank {}", dtype_name(rec.csf_exceptions->dtype),
                        rec.csf_exceptions->shape.size()));
    whole.scale_dtype = DType::F8_E4M3;
  } else if (rec.block_scale) {
    whole.scale_dtype = rec.block_scale->dtype;
  } else if (!rec.block_scale_shards.empty()) {
    whole.scale_dtype = rec.block_scale_shards[0]->dtype;
    for (const TensorEntry* t : rec.block_scale_shards)
      if (t->dtype != whole.scale_dtype)
        raise("E_PLE_DTYPE_MIXED", with_field(where, t->name), std::string(dtype_name(whole.scale_dtype)),
              std::string(dtype_name(t->dtype)));
  }
  if (rec.global_scale) whole.global_dtype = rec.global_scale->dtype;
  if (rec.input_scale) whole.input_dtype = rec.input_scale->dtype;

  const PartSizes want = expected_part_sizes(whole, where);
  if (want.global_scale && !rec.global_scale) {
    const char* id = f == FormatId::NVFP4_CT ? "E_CT_NVFP4_GLOBAL_MISSING"
                     : is_nvfp4(f)           ? "E_NVFP4_GLOBAL_MISSING"
                                             : "E_Q_MISSING_COMPANION";
    raise(id, with_field(where, "global scale"), "a global scale tensor", "none");
  }
  const bool split_scales = !rec.block_scale_shards.empty();
  if (want.block_scale && !rec.block_scale && !csf_coded && !split_scales)
    raise("E_Q_MISSING_COMPANION", with_field(where, "weight_scale"), "a block scale tensor", "none");
  PartSizes stored;
  for (const TensorEntry* t : rec.main) stored.main += t->nbytes;
  stored.block_scale = csf_coded ? want.block_scale : rec.block_scale ? rec.block_scale->nbytes : 0;
  for (const TensorEntry* t : rec.block_scale_shards) stored.block_scale += t->nbytes;
  stored.global_scale = rec.global_scale ? rec.global_scale->nbytes : 0;
  check_part_sizes(whole, stored, where);
  if (rec.main.size() > 1) {  // a split table: every shard holds whole rows, in order
    uint64_t total = 0;
    for (const TensorEntry* t : rec.main) {
      if (t->nbytes != shard_rows(*t) * want.main_row)
        raise("E_PLE_SHARD_SHAPE", with_field(where, t->name), fmt::format("rows of {} bytes", want.main_row),
              fmt::format("{} bytes for {} rows", t->nbytes, shard_rows(*t)));
      total += shard_rows(*t);
    }
    if (total != R)
      raise("E_PLE_ROWS", where, fmt::format("{} rows over the shards", R), std::to_string(total));
    for (size_t i = 0; i < rec.block_scale_shards.size(); ++i) {
      const TensorEntry* s = rec.block_scale_shards[i];
      if (i >= rec.main.size() || s->nbytes != shard_rows(*rec.main[i]) * want.block_scale_row)
        raise("E_PLE_SHARD_SHAPE", with_field(where, s->name),
              fmt::format("the scales of its shard's rows ({} bytes each)", want.block_scale_row),
              fmt::format("{} bytes", s->nbytes));
    }
  }
  if (csf_coded) csf::check_geometry(R, K / 16, rec.csf_fixed->shape, with_field(where, rec.csf_fixed->name));

  // The window: FP8 block windows start on a tile row so the window's grid lines up with the stored grid.
  const uint64_t unit = f == FormatId::FP8_BLOCK ? uint64_t(rec.block_n) : 1;
  const uint64_t ws = row0 / unit * unit, we = row0 + nrows, wrows = we - ws;

  LoadedWeight lw;
  lw.first_row = row0 - ws;
  lw.main.resize(wrows * want.main_row);
  read_split_rows(src, rec.main, R, want.main_row, ws, we, lw.main.data());

  if (csf_coded) {
    const uint64_t C = K / 16, sb = csf::slab_bytes(C);
    const uint64_t s0 = ws / csf::kSlabRows, s1 = ceil_div(we, csf::kSlabRows);
    const std::vector<uint8_t> slabs = read_range(src, *rec.csf_fixed, s0 * sb, (s1 - s0) * sb);
    const Where cw = with_field(where, rec.csf_exceptions->name);
    const std::vector<uint32_t> exc =
        csf::load_exceptions(read_range(src, *rec.csf_exceptions, 0, rec.csf_exceptions->nbytes), cw);
    std::vector<uint8_t> scales((s1 - s0) * csf::kSlabRows * C);
    csf::decode_slabs(slabs, s0, exc, R, C, scales.data(), cw);
    const uint64_t skip = (ws - s0 * csf::kSlabRows) * C;
    lw.block_scale.assign(scales.begin() + skip, scales.begin() + skip + wrows * C);
  } else if (want.block_scale && split_scales) {
    lw.block_scale.resize(wrows * want.block_scale_row);
    read_split_rows(src, rec.block_scale_shards, R, want.block_scale_row, ws, we, lw.block_scale.data());
  } else if (want.block_scale) {
    const uint64_t g0 = f == FormatId::FP8_BLOCK ? ws / rec.block_n : ws;
    const uint64_t g1 = f == FormatId::FP8_BLOCK ? ceil_div(we, rec.block_n) : we;
    lw.block_scale =
        read_range(src, *rec.block_scale, g0 * want.block_scale_row, (g1 - g0) * want.block_scale_row);
  }
  if (want.global_scale) lw.global_scale = read_range(src, *rec.global_scale, 0, rec.global_scale->nbytes);
  if (rec.input_scale && rec.input_scale->nbytes <= 8)
    lw.input_scale = read_range(src, *rec.input_scale, 0, rec.input_scale->nbytes);
  else if (rec.input_scale && f != FormatId::W4A16_NVFP4 && is_nvfp4(f))
    raise(f == FormatId::NVFP4_CT ? "E_CT_NVFP4_GLOBAL_SHAPE" : "E_NVFP4_GLOBAL_SHAPE",
          with_field(where, rec.input_scale->name), "one element",
          fmt::format("{} bytes", rec.input_scale->nbytes));

  lw.bytes = whole;
  lw.bytes.rows = wrows;
  lw.bytes.main = lw.main;
  lw.bytes.block_scale = lw.block_scale;
  lw.bytes.global_scale = lw.global_scale;
  lw.bytes.input_scale = lw.input_scale;
  validate_weight_bytes(lw.bytes, where, warnings, check_elements);
  return lw;
}

void decode_weight_rows(const TensorSource& src, const WeightRecord& rec, uint64_t row0, uint64_t nrows,
                        float* out, Warnings& warnings) {
  const LoadedWeight lw = load_weight_rows(src, rec, row0, nrows, warnings);
  decode_rows(lw.bytes, lw.first_row, nrows, out);
}

std::vector<float> decode_weight_rows(const TensorSource& src, const WeightRecord& rec, uint64_t row0,
                                      uint64_t nrows, Warnings& warnings) {
  std::vector<float> out(nrows * rec.cols());
  decode_weight_rows(src, rec, row0, nrows, out.data(), warnings);
  return out;
}

std::vector<float> decode_weight(const TensorSource& src, const WeightRecord& rec, Warnings& warnings,
                                 bool check_elements) {
  const LoadedWeight lw = load_weight_rows(src, rec, 0, rec.rows(), warnings, check_elements);
  std::vector<float> out(rec.rows() * rec.cols());
  decode_rows(lw.bytes, 0, rec.rows(), out.data());
  return out;
}

}  // namespace bloomery
