// Tensor-parallel slices of stored weights: row windows through load_weight_rows, column windows by one read
// per row (elements) and per scale row (block scales), CSF scale streams sliced compressed (csf::slice).
#include "formats/weight_slice.h"

#include <algorithm>
#include <string>

#include "formats/csf.h"
#include "formats/decode.h"
#include "formats/format_table.h"

namespace bloomery {
namespace {

uint64_t ceil_div(uint64_t a, uint64_t b) {
  return (a + b - 1) / b;
}

std::string ranges_str(const TensorCut& cut) {
  std::string s;
  for (const auto& r : cut.ranges) s += fmt::format("{}[{}, {})", s.empty() ? "" : ", ", r.first, r.second);
  return s;
}

void append(std::vector<uint8_t>& to, const std::vector<uint8_t>& from) {
  to.insert(to.end(), from.begin(), from.end());
}

// Points the WeightBytes spans at the LoadedWeight's own buffers.
void point_spans(LoadedWeight& lw) {
  lw.bytes.main = lw.main;
  lw.bytes.block_scale = lw.block_scale;
  lw.bytes.global_scale = lw.global_scale;
  lw.bytes.input_scale = lw.input_scale;
}

LoadedWeight slice_rows(const TensorSource& src, const WeightRecord& rec, const TensorCut& cut,
                        Warnings& warnings) {
  LoadedWeight out;
  for (const auto& [b, e] : cut.ranges) {
    LoadedWeight piece = load_weight_rows(src, rec, b, e - b, warnings);
    if (out.main.empty() && out.block_scale.empty()) {
      out.bytes = piece.bytes;
      out.global_scale = piece.global_scale;
      out.input_scale = piece.input_scale;
    }
    append(out.main, piece.main);
    append(out.block_scale, piece.block_scale);
  }
  out.bytes.rows = cut.count();
  point_spans(out);
  return out;
}

LoadedWeight slice_cols(const TensorSource& src, const WeightRecord& rec, uint64_t c0, uint64_t c1,
                        Warnings& warnings, const Where& where) {
  // The zero-row window runs every header check and reads the global and input scales.
  LoadedWeight out = load_weight_rows(src, rec, 0, 0, warnings);
  const uint64_t R = rec.rows(), K = rec.cols(), n = c1 - c0;
  WeightBytes whole = out.bytes;
  whole.rows = R;
  whole.cols = K;
  const PartSizes want = expected_part_sizes(whole, where);
  const TensorEntry& main = *rec.main[0];
  const uint64_t e0 = c0 * want.main_row / K,
                 en = n * want.main_row / K;  // whole bytes: checked by the units
  out.main.resize(R * en);
  for (uint64_t r = 0; r < R; ++r) src.read(main, r * want.main_row + e0, en, out.main.data() + r * en);

  if (rec.scale_encoding == ScaleEncoding::NvFp4Csf) {
    const uint64_t C = K / 16;
    const std::vector<uint8_t> fixed = src.read_all(*rec.csf_fixed);
    const Where cw = Where{where.file, where.tensor, rec.csf_exceptions->name};
    const std::vector<uint32_t> exc = csf::load_exceptions(src.read_all(*rec.csf_exceptions), cw);
    const csf::Streams s = csf::slice(fixed, exc, R, C, 0, R, c0 / 16, c1 / 16, cw);
    out.block_scale.resize(R * (n / 16));
    csf::decode(s.fixed, s.exceptions, R, n / 16, out.block_scale.data(), cw);
  } else if (want.block_scale) {
    // Scale columns: the format's block, the record's tile (FP8 block), or one per row (FP8 channel).
    const int fk = format_info(rec.format).block_k;
    const uint64_t bk = fk > 0 ? uint64_t(fk) : rec.block_k > 0 ? uint64_t(rec.block_k) : K;
    const uint64_t elem = want.block_scale_row / ceil_div(K, bk);
    const uint64_t s0 = c0 / bk, sn = ceil_div(c1, bk) - s0;
    out.block_scale.resize(want.block_scale_rows * sn * elem);
    for (uint64_t g = 0; g < want.block_scale_rows; ++g)
      src.read(*rec.block_scale, g * want.block_scale_row + s0 * elem, sn * elem,
               out.block_scale.data() + g * sn * elem);
  }
  out.bytes.rows = R;
  out.bytes.cols = n;
  point_spans(out);
  return out;
}

}  // namespace

CutUnits cut_units(const WeightRecord& rec) {
  const FormatInfo& f = format_info(rec.format);
  CutUnits u;
  u.row = f.tp_row_unit > 0 ? uint64_t(f.tp_row_unit) : uint64_t(std::max(rec.block_n, 1));
  u.col = f.tp_col_unit > 0 ? uint64_t(f.tp_col_unit) : uint64_t(std::max(rec.block_k, 1));
  const std::string name(f.name);
  u.row_why = f.tp_row_unit > 0 ? name + " rows" : fmt::format("{} tiles of {} rows", name, u.row);
  u.col_why = f.tp_col_unit > 0 ? fmt::format("{} scale blocks of {} columns", name, u.col)
                                : fmt::format("{} tiles of {} columns", name, u.col);
  if (f.tp_col_unit == 1) u.col_why = name + " columns";
  if (rec.scale_encoding == ScaleEncoding::NvFp4Csf) {  // formats.md §8.5: whole slabs, scale pairs
    u.row = csf::kSlabRows;
    u.col = 32;
    u.row_why = "CSF scale slabs of 16 rows";
    u.col_why = "CSF scale pairs of 32 columns";
  }
  return u;
}

void check_cut(const WeightRecord& rec, const TensorCut& cut) {
  if (cut.whole()) return;
  const bool rows = cut.axis == TensorCut::Axis::Rows;
  const Where where{"", rec.name, rows ? "rows" : "columns"};
  const uint64_t extent = rows ? rec.rows() : rec.cols();
  const CutUnits u = cut_units(rec);
  const uint64_t unit = rows ? u.row : u.col;
  if (cut.ranges.empty() || (!rows && cut.ranges.size() != 1))
    raise("E_TP_CUT", where, rows ? "at least one row range" : "one column range", ranges_str(cut));
  if (!rows && rec.main.size() > 1)
    raise("E_TP_CUT", where, "a column cut of a single stored tensor",
          fmt::format("a table split over {} shards", rec.main.size()));
  uint64_t prev = 0;
  for (const auto& [b, e] : cut.ranges) {
    if (b >= e || e > extent || b < prev)
      raise("E_TP_CUT", where, fmt::format("ascending ranges inside [0, {})", extent), ranges_str(cut));
    if (b % unit != 0 || (e % unit != 0 && e != extent))
      raise("E_TP_CUT", where,
            fmt::format("cuts on multiples of {} ({})", unit, rows ? u.row_why : u.col_why), ranges_str(cut));
    prev = e;
  }
}

LoadedWeight load_weight_slice(const TensorSource& src, const WeightRecord& rec, const TensorCut& cut,
                               Warnings& warnings) {
  if (cut.whole()) return load_weight_rows(src, rec, 0, rec.rows(), warnings);
  check_cut(rec, cut);
  const Where where{src.display_path(rec.main[0]->file_index), rec.name, {}};
  LoadedWeight out = cut.axis == TensorCut::Axis::Rows
                         ? slice_rows(src, rec, cut, warnings)
                         : slice_cols(src, rec, cut.ranges[0].first, cut.ranges[0].second, warnings, where);
  validate_weight_bytes(out.bytes, where, warnings);
  return out;
}

std::vector<float> decode_weight_slice(const TensorSource& src, const WeightRecord& rec, const TensorCut& cut,
                                       Warnings& warnings) {
  const LoadedWeight lw = load_weight_slice(src, rec, cut, warnings);
  std::vector<float> out(lw.bytes.rows * lw.bytes.cols);
  decode_rows(lw.bytes, lw.first_row, lw.bytes.rows, out.data());
  return out;
}

}  // namespace bloomery
