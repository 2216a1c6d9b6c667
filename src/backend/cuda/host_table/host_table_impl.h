// The object behind a host table Weight (host_table.h): the rows' stored bytes in host memory, a pool of
// pinned staging slots the CPU packs requested rows into, one device buffer the packed bytes are copied to,
// and the background packing that prefetch_rows starts. Used by cuda_host_table.cc only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/host_table.h"
#include "backend/cuda/step_graph.h"

namespace bloomery::cuda::host {

// Bytes one row takes in each packed part.
struct RowBytes {
  uint64_t elements = 0;  // stored elements
  uint64_t scales = 0;    // NVFP4 / MX block scales
  uint64_t grid = 0;      // f32 scales widened from the FP8 channel / block grid (count, not bytes)
};

// Rows [row0, row0 + n) decoded to f32 into dst (n · cols floats): the fallback for stored forms the packed
// path does not read (CSF-coded scales, dense tables of a foreign dtype). Called from the caller's thread.
using RowDecoder = std::function<void(uint64_t row0, uint64_t n, float* dst)>;

// One pinned staging buffer and what it holds.
struct Slot {
  uint8_t* host = nullptr;  // pinned (cudaHostAlloc), `capacity` bytes
  size_t capacity = 0;
  cudaEvent_t copied = nullptr;  // recorded after the last H2D copy that read `host`
  bool copy_pending = false;     // `copied` was recorded and may not have completed
  // A captured graph step copies from `host` when it runs (no event can be recorded in a capture): the slot
  // is busy while that step is still the running one.
  uint64_t busy_epoch = 0;
  // A prefetch's rows: `ids` is what was packed (or is being packed by `packing`); consumed by a gather.
  bool prefetched = false;
  uint64_t age = 0;  // prefetch order (the oldest unconsumed one is evicted first)
  std::vector<int64_t> ids;
  std::future<void> packing;
};

class HostTable {
 public:
  // Tells a host table from another backend's streamed weight behind the same shared_ptr<void>.
  static constexpr uint64_t kMagic = 0x6c62617448545342ull;
  const uint64_t magic = kMagic;

  // `bytes` must already be validated (validate_bytes); a decoder makes this the f32 fallback (rows decoded
  // on the host, bytes.format and shards ignored). pinned: only reported in stats.
  HostTable(std::string name, uint64_t rows, HostTableBytes bytes, RowDecoder decoder, bool pinned);
  ~HostTable();
  HostTable(const HostTable&) = delete;
  HostTable& operator=(const HostTable&) = delete;

  const std::string& name() const { return name_; }
  uint64_t rows() const { return rows_; }
  uint64_t cols() const { return bytes_.cols; }

  // out (device, ids.size() × cols f32) = decoded rows; ids already range-checked. Queued on `stream`.
  // graphs: the backend's step graphs (a gather inside a captured step marks its slot busy instead of
  // recording an event, and frees what it outgrows only after the step).
  void gather(float* out, std::span<const int64_t> ids, cudaStream_t stream, StepGraphs* graphs = nullptr);
  // Starts packing these rows on a worker thread (ids range-checked by the caller); device: the CUDA device
  // the backend runs on (the worker waits on its events).
  void prefetch(std::span<const int64_t> ids, int device);
  HostTableStats stats() const;

 private:
  // Packed layout of n rows in a slot / on the card: elements, then scales, then f32 grid, 256-aligned.
  struct Packed {
    size_t scales_at = 0, grid_at = 0, total = 0;
  };
  Packed packed_layout(size_t n) const;
  // Copies (or decodes) the rows into slot memory laid out as packed_layout(ids.size()). Thread-safe w.r.t.
  // other slots; waits for the slot's previous copy first.
  // background: called by a prefetch worker (file pages are then always advised ahead).
  void pack(Slot& slot, std::span<const int64_t> ids, bool background) const;
  void pack_range(uint8_t* dst, const Packed& lay, std::span<const int64_t> ids, size_t i0, size_t i1,
                  bool advise) const;
  // A slot with no unconsumed prefetch and room for `bytes` (evicts the oldest prefetch if all are taken).
  Slot& free_slot(size_t bytes);
  bool busy(const Slot& s) const { return graphs_ && graphs_->running(s.busy_epoch); }
  // cudaFree / cudaFreeHost now, or after the running graph step.
  void release(std::function<void()> free_fn);
  void ensure_capacity(Slot& s, size_t bytes);
  void ensure_device(size_t bytes);
  // Shard of a global row and the row inside it.
  size_t shard_of(uint64_t row) const;

  std::string name_;
  uint64_t rows_ = 0;
  HostTableBytes bytes_;
  RowDecoder decoder_;
  RowBytes row_;
  std::vector<uint64_t> first_row_;  // per shard: its first global row
  std::vector<std::unique_ptr<Slot>> slots_;
  uint64_t prefetch_age_ = 0;
  StepGraphs* graphs_ = nullptr;  // set by the first gather in graph mode
  void* dev_ = nullptr;           // packed rows on the card
  size_t dev_capacity_ = 0;
  HostTableStats stats_;
};

// Bytes per row of each part of a description; throws E_BACKEND_SHAPE / E_BACKEND_UNSUPPORTED.
RowBytes row_bytes(const HostTableBytes& b, const std::string& name);
// Checks a description against `shape` and returns the table's rows (see make_host_table).
uint64_t validate_bytes(const HostTableBytes& b, const std::vector<int64_t>& shape, const std::string& name);

}  // namespace bloomery::cuda::host
