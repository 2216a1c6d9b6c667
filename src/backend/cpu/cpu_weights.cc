// CPU weights: a checkpoint weight is read once and decoded to f32 through the format table
// (formats/decode.h); the PLE table is instead kept as a reader that decodes the rows a gather asks for.
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "formats/decode.h"
#include "formats/tensor_source.h"
#include "formats/weight_record.h"

namespace bloomery::cpu {

namespace {

// The stored bytes of one record, read whole (the record's parts stay alive in `store`).
struct RecordBytes {
  std::vector<std::vector<uint8_t>> store;
  WeightBytes w;
};

std::span<const uint8_t> keep(RecordBytes& rb, std::vector<uint8_t> bytes) {
  rb.store.push_back(std::move(bytes));
  return {rb.store.back().data(), rb.store.back().size()};
}

RecordBytes read_record(const TensorSource& src, const WeightRecord& rec) {
  RecordBytes rb;
  rb.store.reserve(5);
  WeightBytes& w = rb.w;
  w.format = rec.format;
  w.rows = rec.rows();
  w.cols = rec.cols();
  w.block_n = rec.block_n;
  w.block_k = rec.block_k;
  if (rec.main.empty()) raise("E_MODEL_TENSOR_MISSING", Where{"", rec.name, "weight"}, "stored data", "none");
  w.main_dtype = rec.main[0]->dtype;
  if (rec.main.size() == 1) {
    w.main = keep(rb, src.read_all(*rec.main[0]));
  } else {  // a split table read whole (only when a model asks for a split table densely)
    std::vector<uint8_t> all;
    for (const TensorEntry* t : rec.main) {
      auto part = src.read_all(*t);
      all.insert(all.end(), part.begin(), part.end());
    }
    w.main = keep(rb, std::move(all));
  }
  if (rec.block_scale) {
    w.scale_dtype = rec.block_scale->dtype;
    w.block_scale = keep(rb, src.read_all(*rec.block_scale));
  }
  if (rec.global_scale) {
    w.global_dtype = rec.global_scale->dtype;
    w.global_scale = keep(rb, src.read_all(*rec.global_scale));
  }
  if (rec.input_scale) {
    w.input_dtype = rec.input_scale->dtype;
    w.input_scale = keep(rb, src.read_all(*rec.input_scale));
  }
  return rb;
}

}  // namespace

Weight CpuBackend::load_weight(const TensorSource& source, const WeightRecord& record,
                               std::vector<int64_t> shape, Warnings& warnings) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const uint64_t stored_numel = record.rows() * record.cols();
  if (static_cast<uint64_t>(n) != stored_numel)
    raise("E_DENSE_SHAPE", Where{"", record.name, "shape"}, shape_string(shape),
          shape_string(std::vector<int64_t>(record.shape.begin(), record.shape.end())));
  if (record.csf_fixed || record.csf_exceptions)
    raise("E_BACKEND_UNSUPPORTED", Where{"", record.name, "nvfp4_csf"}, "a format the CPU decoder reads",
          "CSF-coded NVFP4 scales");
  RecordBytes rb = read_record(source, record);
  Where where{"", record.name, ""};
  validate_weight_bytes(rb.w, where, warnings);
  Tensor t = alloc(shape);
  // Decode in row blocks over the pool (big expert stacks and embeddings dominate load time).
  const uint64_t rows = rb.w.rows;
  uint64_t step = 64;
  if (record.format == FormatId::FP8_BLOCK && record.block_n > 0) step = record.block_n;
  const int64_t blocks = static_cast<int64_t>((rows + step - 1) / step);
  float* out = t.f32();
  const uint64_t cols = rb.w.cols;
  if (record.format == FormatId::FP8_BLOCK) {
    decode_rows(rb.w, 0, rows, out);
  } else {
    owned_pool_->parallel_for(blocks, [&](int64_t b0, int64_t b1) {
      uint64_t r0 = b0 * step, r1 = std::min<uint64_t>(rows, b1 * step);
      decode_rows(rb.w, r0, r1 - r0, out + r0 * cols);
    });
  }
  return make_weight(record.name, std::move(shape), std::move(t));
}

namespace {

// Row reader of a streamed table: keeps the record and reads + decodes single rows on demand.
struct StreamedTable {
  const TensorSource* source = nullptr;
  WeightRecord record;
  std::vector<uint64_t> shard_first_row;  // first global row of each shard of record.main
  std::vector<uint8_t> global_scale;
};

}  // namespace

Weight CpuBackend::stream_weight(const TensorSource& source, const WeightRecord& record, Warnings& warnings) {
  if (record.block_scale || record.csf_fixed)
    raise("E_BACKEND_UNSUPPORTED", Where{"", record.name, "weight_scale"},
          "a dense or per-tensor-scaled streamed table on the CPU backend",
          std::string(format_name(record.format)));
  auto st = std::make_shared<StreamedTable>();
  st->source = &source;
  st->record = record;
  uint64_t row = 0;
  for (const TensorEntry* t : record.main) {
    st->shard_first_row.push_back(row);
    row += t->shape.empty() ? 1 : t->shape[0];
  }
  if (record.global_scale) st->global_scale = source.read_all(*record.global_scale);
  std::vector<int64_t> shape(record.shape.begin(), record.shape.end());
  return make_weight(record.name, std::move(shape), Tensor(), true, st);
}

void CpuBackend::gather_rows(Tensor& out, const Weight& table, std::span<const int64_t> ids) {
  const int64_t D = table.cols();
  need(out.rows() == static_cast<int64_t>(ids.size()) && out.cols() == D, "gather_rows",
       "[" + std::to_string(ids.size()) + ", " + std::to_string(D) + "]", out.shape_str());
  for (int64_t id : ids)
    if (id < 0 || id >= table.rows())
      raise("E_TOKEN_RANGE", Where{"", table.name(), "row"}, "a row below " + std::to_string(table.rows()),
            std::to_string(id));
  if (!table.streamed()) {
    const float* src = table.dense().f32();
    for (size_t i = 0; i < ids.size(); ++i)
      std::memcpy(out.f32() + i * D, src + ids[i] * D, D * sizeof(float));
    return;
  }
  const auto* st = static_cast<const StreamedTable*>(table.impl().get());
  const WeightRecord& rec = st->record;
  for (size_t i = 0; i < ids.size(); ++i) {
    size_t s = st->shard_first_row.size() - 1;
    while (st->shard_first_row[s] > static_cast<uint64_t>(ids[i])) --s;
    const TensorEntry& e = *rec.main[s];
    const uint64_t local = ids[i] - st->shard_first_row[s];
    const uint64_t row_bytes = e.nbytes / (e.shape.empty() ? 1 : e.shape[0]);
    std::vector<uint8_t> bytes(row_bytes);
    st->source->read(e, local * row_bytes, row_bytes, bytes.data());
    WeightBytes w;
    w.format = rec.format;
    w.main_dtype = e.dtype;
    w.rows = 1;
    w.cols = D;
    w.main = bytes;
    if (!st->global_scale.empty()) {
      w.global_dtype = rec.global_scale->dtype;
      w.global_scale = st->global_scale;
    }
    decode_rows(w, 0, 1, out.f32() + i * D);
  }
}

}  // namespace bloomery::cpu
