// CudaBackend's streamed row table (the PLE n-gram table): kept off the card, only the rows a step needs are
// gathered and copied up.
#include <algorithm>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "formats/tensor_source.h"
#include "formats/weight_decode.h"
#include "formats/weight_record.h"

namespace bloomery::cuda {

namespace {
// Row reader of a streamed table (as on the CPU): rows are decoded on the host and uploaded per gather.
struct StreamedTable {
  const TensorSource* source = nullptr;
  WeightRecord record;
  mutable Warnings warnings;
};

}  // namespace

Weight CudaBackend::stream_weight(const TensorSource& source, const WeightRecord& record,
                                  Warnings& warnings) {
  auto st = std::make_shared<StreamedTable>();
  st->source = &source;
  st->record = record;
  if (record.rows() > 0) (void)load_weight_rows(source, record, 0, 1, warnings);  // refuse a bad table now
  std::vector<int64_t> shape(record.shape.begin(), record.shape.end());
  return make_weight(record.name, std::move(shape), Tensor(), true, st);
}

void CudaBackend::gather_streamed(Tensor& out, const Weight& table, std::span<const int64_t> ids) {
  const int64_t D = table.cols();
  const auto* st = static_cast<const StreamedTable*>(table.impl().get());
  std::vector<float> rows(ids.size() * D);
  for (size_t i = 0; i < ids.size(); ++i)
    decode_weight_rows(*st->source, st->record, ids[i], 1, rows.data() + i * D, st->warnings);
  BLOOMERY_CUDA_CHECK(cudaMemcpy(out.f32(), rows.data(), rows.size() * 4, cudaMemcpyHostToDevice),
                      "gather_rows (streamed) " + table.name());
}

}  // namespace bloomery::cuda
