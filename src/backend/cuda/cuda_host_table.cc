// CudaBackend's streamed row table (the PLE n-gram table): kept in host memory in its stored format (mapped
// shard files, pinned memory, or caller memory through make_host_table); a gather packs only the requested
// rows' stored bytes into pinned staging, copies them up asynchronously and decodes them on the card
// (host_table/host_table.cc). prefetch_rows packs the next step's rows ahead on a worker thread.
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/host_table.h"
#include "backend/cuda/host_table/checkpoint_table.h"
#include "backend/cuda/host_table/host_table_impl.h"

namespace bloomery::cuda {

namespace {

// make_weight is protected in Backend; this derived name (never instantiated) makes it reachable from
// make_host_table, a free function so that b1's synthetic model can build tables without a file.
struct WeightMaker : Backend {
  using Backend::make_weight;
};

host::HostTable* host_table_of(const Weight& w, std::string_view op) {
  auto* t = static_cast<host::HostTable*>(w.impl().get());
  if (!w.streamed() || !t || t->magic != host::HostTable::kMagic)
    raise("E_BACKEND_UNSUPPORTED", Where{"", w.name(), std::string(op)}, "a host table of the cuda backend",
          w.streamed() ? "a streamed table of another backend" : "a weight that is not streamed");
  return t;
}

}  // namespace

Weight CudaBackend::stream_weight(const TensorSource& source, const WeightRecord& record,
                                  Warnings& warnings) {
  std::shared_ptr<host::HostTable> t = host::open_checkpoint_table(source, record, warnings);
  std::vector<int64_t> shape(record.shape.begin(), record.shape.end());
  return make_weight(record.name, std::move(shape), Tensor(), true, std::move(t));
}

void CudaBackend::gather_streamed(Tensor& out, const Weight& table, std::span<const int64_t> ids) {
  host_table_of(table, "gather_rows")->gather(out.out_f32(), ids, stream_, &graphs_);
}

void CudaBackend::prefetch_rows(const Weight& table, std::span<const int64_t> ids) {
  if (!table.streamed()) return;  // a table on the card needs no readahead
  host::HostTable* t = host_table_of(table, "prefetch_rows");
  for (int64_t id : ids)
    if (id < 0 || static_cast<uint64_t>(id) >= t->rows())
      raise("E_TOKEN_RANGE", Where{"", table.name(), "row"}, "a row below " + std::to_string(t->rows()),
            std::to_string(id));
  t->prefetch(ids, device_);
}

Weight make_host_table(CudaBackend& be, std::string name, std::vector<int64_t> shape, HostTableBytes bytes) {
  (void)be;  // the table is bound to no device until a gather; the parameter keeps the API backend-explicit
  const uint64_t rows = host::validate_bytes(bytes, shape, name);
  auto t = std::make_shared<host::HostTable>(name, rows, std::move(bytes), nullptr, false);
  return WeightMaker::make_weight(std::move(name), std::move(shape), Tensor(), true, std::move(t));
}

HostTableStats host_table_stats(const Weight& table) {
  return host_table_of(table, "host_table_stats")->stats();
}

}  // namespace bloomery::cuda
