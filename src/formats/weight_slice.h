// Tensor-parallel slices of a stored weight (design next-capabilities §2.3): a rank's rows or columns of a
// WeightRecord, read as the format stores them and nothing more (rows: their byte ranges; columns: each row's
// column range of the elements and of the block scales). CSF-coded scales are sliced on the compressed
// streams (formats.md §8.5) and decoded to E4M3 bytes. The result decodes, through the format table's own
// decoder, to exactly the slice of the decoded whole weight (tests/unit/formats/slice_test.cc, every format).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "formats/tensor_source.h"
#include "formats/weight_decode.h"
#include "formats/weight_record.h"

namespace bloomery {

// Which part of a weight a rank keeps. Rows: ranges of dim 0 concatenated in order (e.g. GDN in_proj_qkv's
// q, k and v rows of the rank's heads). Cols: one range of the flattened columns (a row-parallel
// projection's input dimension).
struct TensorCut {
  enum class Axis : uint8_t { None, Rows, Cols };
  Axis axis = Axis::None;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [begin, end), ascending, not overlapping

  bool whole() const { return axis == Axis::None; }
  uint64_t count() const {
    uint64_t n = 0;
    for (const auto& r : ranges) n += r.second - r.first;
    return n;
  }
  static TensorCut rows(std::vector<std::pair<uint64_t, uint64_t>> r) { return {Axis::Rows, std::move(r)}; }
  static TensorCut cols(uint64_t begin, uint64_t end) { return {Axis::Cols, {{begin, end}}}; }
};

// The smallest row and column steps a cut of this record may take: the format table's tp units, the
// record's tile for FP8 blocks, CSF's slab rows (16) and scale pairs (32 columns).
struct CutUnits {
  uint64_t row = 1, col = 1;
  std::string row_why, col_why;  // for messages: "NVFP4 scale blocks of 16 columns"
};
CutUnits cut_units(const WeightRecord& rec);

// Refuses with E_TP_CUT (naming the tensor, the cut and the unit) unless every range lies inside the weight
// and starts and ends on a unit (or ends at the weight's last row / column).
void check_cut(const WeightRecord& rec, const TensorCut& cut);

// Reads and validates only the cut's bytes. rows × cols of the result are the slice's; first_row is 0.
LoadedWeight load_weight_slice(const TensorSource& src, const WeightRecord& rec, const TensorCut& cut,
                               Warnings& warnings);
// The slice decoded to f32 [slice rows, slice cols], row-major.
std::vector<float> decode_weight_slice(const TensorSource& src, const WeightRecord& rec, const TensorCut& cut,
                                       Warnings& warnings);

}  // namespace bloomery
