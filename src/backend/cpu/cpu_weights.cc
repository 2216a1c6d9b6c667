// CPU weights: a checkpoint weight is read once and decoded to f32 by the format layer
// (formats/weight_decode.h); the PLE table is instead kept as a reader that decodes the rows a gather asks
// for.
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/op_checks.h"
#include "formats/tensor_source.h"
#include "formats/weight_decode.h"
#include "formats/weight_record.h"

namespace bloomery::cpu {

Weight CpuBackend::load_weight(const TensorSource& source, const WeightRecord& record,
                               std::vector<int64_t> shape, Warnings& warnings) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const uint64_t stored_numel = record.rows() * record.cols();
  if (static_cast<uint64_t>(n) != stored_numel)
    raise("E_DENSE_SHAPE", Where{"", record.name, "shape"}, shape_string(shape),
          shape_string(std::vector<int64_t>(record.shape.begin(), record.shape.end())));
  // Validated and decoded by the format layer (every format, CSF scales included).
  std::vector<float> data = decode_weight(source, record, warnings);
  Tensor t = upload(data, shape);
  return make_weight(record.name, std::move(shape), std::move(t));
}

namespace {

// Row reader of a streamed table: the record and its source; rows are decoded when a gather asks for them.
struct StreamedTable {
  const TensorSource* source = nullptr;
  WeightRecord record;
  mutable Warnings warnings;  // decode warnings of streamed rows (validated at open; kept for completeness)
};

}  // namespace

Weight CpuBackend::stream_weight(const TensorSource& source, const WeightRecord& record, Warnings& warnings) {
  auto st = std::make_shared<StreamedTable>();
  st->source = &source;
  st->record = record;
  // Validate the first row's parts now, so a bad table is refused at load, not mid-generation.
  if (record.rows() > 0) (void)load_weight_rows(source, record, 0, 1, warnings);
  std::vector<int64_t> shape(record.shape.begin(), record.shape.end());
  return make_weight(record.name, std::move(shape), Tensor(), true, st);
}

void CpuBackend::gather_rows(Tensor& out, const Weight& table, std::span<const int64_t> ids) {
  check_gather_rows_args(out, table, ids);
  const int64_t D = table.cols();
  if (!table.streamed()) {
    const float* src = table.dense().f32();
    for (size_t i = 0; i < ids.size(); ++i)
      std::memcpy(out.f32() + i * D, src + ids[i] * D, D * sizeof(float));
    return;
  }
  const auto* st = static_cast<const StreamedTable*>(table.impl().get());
  for (size_t i = 0; i < ids.size(); ++i)
    decode_weight_rows(*st->source, st->record, ids[i], 1, out.f32() + i * D, st->warnings);
}

}  // namespace bloomery::cpu
