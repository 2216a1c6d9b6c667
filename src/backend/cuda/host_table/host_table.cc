// HostTable: packs the stored bytes of requested rows into pinned staging, one async H2D copy, one decode
// kernel (dequant.cu, the CPU decoders' arithmetic). prefetch() packs a later gather's rows on a worker
// thread.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "backend/backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/dequant.h"
#include "backend/cuda/host_table/host_table_impl.h"
#include "formats/decode.h"

namespace bloomery::cuda::host {
namespace {

constexpr size_t kAlign = 256;  // part boundaries in a packed buffer (f32 grid, cache lines)
// Staging buffers per table: one per pending prefetch + the gather's own; a captured graph step holds one per
// sequence until it has run (bench C=16 plus the next step's prefetches).
constexpr size_t kMaxSlots = 32;
constexpr size_t kParallelRows = 2048;  // packing splits over threads from this many rows on
constexpr unsigned kMaxThreads = 8;
constexpr size_t kAdviseRows = 256;  // the caller's own gathers advise file pages up to this many rows

size_t align_up(size_t x) {
  return (x + kAlign - 1) / kAlign * kAlign;
}

// True when the event has completed. A "not ready" answer is not an error; it is cleared from the thread's
// last-error slot so that a later launch check (cudaGetLastError) does not report it.
bool copy_done(cudaEvent_t e) {
  const cudaError_t r = cudaEventQuery(e);
  if (r == cudaErrorNotReady && cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
  return r == cudaSuccess;
}

Where where_of(const std::string& name, std::string field) {
  return Where{"", name, std::move(field)};
}

}  // namespace

RowBytes row_bytes(const HostTableBytes& b, const std::string& name) {
  const uint64_t c = b.cols;
  BLOOMERY_NEED(c > 0, "make_host_table", "a row width above 0", name + " with cols 0");
  auto need_multiple = [&](uint64_t m) {
    BLOOMERY_NEED(
        c % m == 0, "make_host_table",
        std::string(format_name(b.format)) + " rows of a multiple of " + std::to_string(m) + " elements",
        name + " with cols " + std::to_string(c));
  };
  RowBytes r;
  switch (b.format) {
    case FormatId::BF16:
    case FormatId::F16:
      r.elements = 2 * c;
      break;
    case FormatId::F32:
      r.elements = 4 * c;
      break;
    case FormatId::NVFP4:
    case FormatId::W4A16_NVFP4:
    case FormatId::NVFP4_CT:
      need_multiple(16);
      r.elements = c / 2, r.scales = c / 16;
      break;
    case FormatId::MXFP4:
      need_multiple(32);
      r.elements = c / 2, r.scales = c / 32;
      break;
    case FormatId::MXFP8:
      need_multiple(32);
      r.elements = c, r.scales = c / 32;
      break;
    case FormatId::FP8_TENSOR:
      r.elements = c;
      break;
    case FormatId::FP8_CHANNEL:
      r.elements = c, r.grid = 1;
      break;
    case FormatId::FP8_BLOCK:
      BLOOMERY_NEED(b.block_n > 0 && b.block_k > 0, "make_host_table", "FP8_BLOCK tile sizes above 0",
                    name + " with block " + std::to_string(b.block_n) + "x" + std::to_string(b.block_k));
      r.elements = c, r.grid = (c + b.block_k - 1) / b.block_k;
      break;
    default:
      raise("E_BACKEND_UNSUPPORTED", where_of(name, "format"), "a stored format a host table reads",
            std::string(format_name(b.format)));
  }
  return r;
}

uint64_t validate_bytes(const HostTableBytes& b, const std::vector<int64_t>& shape, const std::string& name) {
  const RowBytes r = row_bytes(b, name);
  uint64_t rows = 0;
  for (size_t i = 0; i < b.shards.size(); ++i) {
    const HostTableShard& s = b.shards[i];
    const std::string at = name + " shard " + std::to_string(i);
    rows += s.rows;
    if (s.rows == 0) continue;
    BLOOMERY_NEED(s.elements != nullptr, "make_host_table", "element bytes", at + " without them");
    BLOOMERY_NEED(s.element_pitch == 0 || s.element_pitch >= r.elements, "make_host_table",
                  "an element pitch of 0 or at least " + std::to_string(r.elements) + " bytes",
                  at + " pitch " + std::to_string(s.element_pitch));
    if (r.scales) {
      BLOOMERY_NEED(s.block_scales != nullptr, "make_host_table",
                    std::string(format_name(b.format)) + " block scales per shard", at + " without them");
      BLOOMERY_NEED(s.scale_pitch == 0 || s.scale_pitch >= r.scales, "make_host_table",
                    "a scale pitch of 0 or at least " + std::to_string(r.scales) + " bytes",
                    at + " pitch " + std::to_string(s.scale_pitch));
    }
  }
  if (r.grid) {
    BLOOMERY_NEED(b.scale_grid != nullptr, "make_host_table",
                  std::string(format_name(b.format)) + " scale grid", name + " without one");
    const DType g = b.grid_dtype;
    if (g != DType::F32 && g != DType::BF16 && g != DType::F16 && g != DType::U8 && g != DType::F8_E8M0)
      raise("E_BACKEND_UNSUPPORTED", where_of(name, "scale_grid"), "an F32, BF16, F16 or E8M0 scale grid",
            std::string(dtype_name(g)));
  }
  int64_t cols = 1;
  for (size_t i = 1; i < shape.size(); ++i) cols *= shape[i];
  BLOOMERY_NEED(
      shape.size() >= 2 && shape[0] == static_cast<int64_t>(rows) && cols == static_cast<int64_t>(b.cols),
      "make_host_table",
      "shape [" + std::to_string(rows) + ", " + std::to_string(b.cols) + "] (rows of the shards, cols)",
      name + " " + shape_string(shape));
  return rows;
}

HostTable::HostTable(std::string name, uint64_t rows, HostTableBytes bytes, RowDecoder decoder, bool pinned)
    : name_(std::move(name)), rows_(rows), bytes_(std::move(bytes)), decoder_(std::move(decoder)) {
  stats_.pinned = pinned;
  if (decoder_) {  // rows arrive decoded: f32, no shards
    bytes_.format = FormatId::F32;
    row_.elements = bytes_.cols * 4;
    return;
  }
  row_ = row_bytes(bytes_, name_);
  if (bytes_.format == FormatId::FP8_CHANNEL)
    bytes_.block_n = 1, bytes_.block_k = static_cast<int>(bytes_.cols);
  uint64_t first = 0;
  for (HostTableShard& s : bytes_.shards) {
    if (s.element_pitch == 0) s.element_pitch = row_.elements;
    if (s.scale_pitch == 0) s.scale_pitch = row_.scales;
    first_row_.push_back(first);
    first += s.rows;
  }
}

HostTable::~HostTable() {
  for (auto& s : slots_) {
    if (s->packing.valid()) s->packing.wait();  // the worker reads this object
    if (s->copy_pending) cudaEventSynchronize(s->copied);
    if (s->copied) cudaEventDestroy(s->copied);
    if (s->host) cudaFreeHost(s->host);
  }
  if (dev_) cudaFree(dev_);
}

HostTable::Packed HostTable::packed_layout(size_t n) const {
  Packed p;
  p.scales_at = align_up(n * row_.elements);
  p.grid_at = p.scales_at + align_up(n * row_.scales);
  p.total = p.grid_at + n * row_.grid * 4;
  return p;
}

size_t HostTable::shard_of(uint64_t row) const {
  return static_cast<size_t>(std::upper_bound(first_row_.begin(), first_row_.end(), row) -
                             first_row_.begin()) -
         1;
}

// Asks the kernel to start reading the pages of [p, p + len) of a file mapping (returns at once).
static void advise_willneed(const void* p, uint64_t len) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t a = reinterpret_cast<uintptr_t>(p) / page * page, b = reinterpret_cast<uintptr_t>(p) + len;
  madvise(reinterpret_cast<void*>(a), b - a, MADV_WILLNEED);  // a hint: failure only loses the overlap
}

void HostTable::pack_range(uint8_t* dst, const Packed& lay, std::span<const int64_t> ids, size_t i0,
                           size_t i1, bool advise) const {
  const uint64_t er = row_.elements, sr = row_.scales, gc = row_.grid;
  auto locate = [&](size_t i, const HostTableShard** s) {
    const uint64_t id = static_cast<uint64_t>(ids[i]);
    const size_t si = shard_of(id);
    *s = &bytes_.shards[si];
    return id - first_row_[si];
  };
  if (advise)  // every read queued before the first copy waits on one
    for (size_t i = i0; i < i1; ++i) {
      const HostTableShard* s;
      const uint64_t local = locate(i, &s);
      advise_willneed(static_cast<const uint8_t*>(s->elements) + local * s->element_pitch, er);
      if (sr) advise_willneed(static_cast<const uint8_t*>(s->block_scales) + local * s->scale_pitch, sr);
    }
  auto* grid = reinterpret_cast<float*>(dst + lay.grid_at);
  const auto* g = static_cast<const uint8_t*>(bytes_.scale_grid);
  for (size_t i = i0; i < i1; ++i) {
    const HostTableShard* s;
    const uint64_t local = locate(i, &s);
    std::memcpy(dst + i * er, static_cast<const uint8_t*>(s->elements) + local * s->element_pitch, er);
    if (sr)
      std::memcpy(dst + lay.scales_at + i * sr,
                  static_cast<const uint8_t*>(s->block_scales) + local * s->scale_pitch, sr);
    // Grid scales are widened here exactly as the CPU decoder widens them (scale_value).
    const uint64_t grow =
        static_cast<uint64_t>(ids[i]) / static_cast<uint64_t>(bytes_.block_n ? bytes_.block_n : 1);
    for (uint64_t c = 0; c < gc; ++c) grid[i * gc + c] = scale_value(bytes_.grid_dtype, g, grow * gc + c);
  }
}

void HostTable::pack(Slot& slot, std::span<const int64_t> ids, bool background) const {
  // The slot's previous H2D copy must have read its bytes before they are overwritten.
  if (slot.copy_pending)
    BLOOMERY_CUDA_CHECK(cudaEventSynchronize(slot.copied), "host table " + name_ + " staging");
  const size_t n = ids.size();
  const Packed lay = packed_layout(n);
  if (decoder_) {
    auto* out = reinterpret_cast<float*>(slot.host);
    for (size_t i = 0; i < n; ++i) decoder_(static_cast<uint64_t>(ids[i]), 1, out + i * bytes_.cols);
    return;
  }
  // On the caller's path a big gather skips the advice (a syscall per row) and relies on its threads' faults.
  const bool advise = bytes_.file_backed && (background || n <= kAdviseRows);
  unsigned threads = 1;
  if (n >= kParallelRows)
    threads = std::clamp<unsigned>(std::min<unsigned>(std::thread::hardware_concurrency(), kMaxThreads), 1u,
                                   static_cast<unsigned>(n / (kParallelRows / 2)));
  if (threads <= 1) return pack_range(slot.host, lay, ids, 0, n, advise);
  // Row copies from a mapped file fault pages in: several threads keep several reads in flight.
  std::vector<std::thread> pool;
  const size_t per = (n + threads - 1) / threads;
  for (unsigned t = 1; t < threads; ++t) {
    const size_t a = t * per, b = std::min(n, a + per);
    if (a < b) pool.emplace_back([&, a, b] { pack_range(slot.host, lay, ids, a, b, advise); });
  }
  pack_range(slot.host, lay, ids, 0, std::min(n, per), advise);
  for (auto& th : pool) th.join();
}

void HostTable::ensure_capacity(Slot& s, size_t bytes) {
  if (s.capacity >= bytes) return;
  if (s.copy_pending) BLOOMERY_CUDA_CHECK(cudaEventSynchronize(s.copied), "host table " + name_ + " staging");
  s.copy_pending = false;
  const size_t want = std::max(bytes, std::max<size_t>(s.capacity * 2, 64 * 1024));
  if (s.host)
    release([p = s.host, n = name_] {
      BLOOMERY_CUDA_CHECK(cudaFreeHost(p), "host table " + n + " staging free");
    });
  s.host = nullptr;
  s.capacity = 0;
  void* p = nullptr;
  BLOOMERY_CUDA_CHECK(cudaHostAlloc(&p, want, cudaHostAllocPortable),
                      "host table " + name_ + " staging " + std::to_string(want) + " bytes");
  s.host = static_cast<uint8_t*>(p);
  s.capacity = want;
}

void HostTable::ensure_device(size_t bytes) {
  if (dev_capacity_ >= bytes) return;
  if (dev_)  // cudaFree synchronises: nothing still reads it
    release([p = dev_, n = name_] {
      BLOOMERY_CUDA_CHECK(cudaFree(p), "host table " + n + " device buffer free");
    });
  dev_ = nullptr;
  const size_t want = std::max(bytes, dev_capacity_ * 2);
  BLOOMERY_CUDA_CHECK(cudaMalloc(&dev_, want),
                      "host table " + name_ + " device buffer " + std::to_string(want));
  dev_capacity_ = want;
}

void HostTable::release(std::function<void()> free_fn) {
  StepGraphs::free_after_step(graphs_, std::move(free_fn));
}

Slot& HostTable::free_slot(size_t bytes) {
  Slot* pick = nullptr;
  for (auto& s : slots_) {
    if (s->prefetched || busy(*s)) continue;
    // Prefer a slot whose last copy has finished: packing into it never waits for the card.
    if (s->copy_pending && copy_done(s->copied)) s->copy_pending = false;
    if (!s->copy_pending) {
      pick = s.get();
      break;
    }
    if (!pick) pick = s.get();
  }
  if ((!pick || pick->copy_pending) && slots_.size() < kMaxSlots) {
    auto s = std::make_unique<Slot>();
    BLOOMERY_CUDA_CHECK(cudaEventCreateWithFlags(&s->copied, cudaEventDisableTiming),
                        "host table " + name_ + " staging event");
    slots_.push_back(std::move(s));
    pick = slots_.back().get();
  }
  if (!pick) {  // every slot holds an unconsumed prefetch: drop the oldest
    for (auto& s : slots_)
      if (!busy(*s) && (!pick || s->age < pick->age)) pick = s.get();
    if (!pick)
      raise("E_CUDA_GRAPH", Where{"", name_, "gather"}, "a staging slot not in use by the running step",
            std::to_string(slots_.size()) + " slots all busy");
    try {
      pick->packing.get();
    } catch (...) {  // the rows will be packed again (and the error raised) by the gather that wants them
    }
    pick->prefetched = false;
  }
  ensure_capacity(*pick, bytes);
  return *pick;
}

void HostTable::prefetch(std::span<const int64_t> ids, int device) {
  if (ids.empty() || decoder_) return;  // the f32 fallback decodes through a reader that is not thread-safe
  ++stats_.prefetches;
  for (auto& s : slots_)
    if (s->prefetched && std::equal(s->ids.begin(), s->ids.end(), ids.begin(), ids.end())) return;
  Slot& s = free_slot(packed_layout(ids.size()).total);
  s.ids.assign(ids.begin(), ids.end());
  s.prefetched = true;
  s.age = ++prefetch_age_;
  Slot* sp = &s;
  s.packing = std::async(std::launch::async, [this, sp, device] {
    BLOOMERY_CUDA_CHECK(cudaSetDevice(device), "host table " + name_ + " prefetch worker");  // per thread
    pack(*sp, sp->ids, true);
  });
}

void HostTable::gather(float* out, std::span<const int64_t> ids, cudaStream_t stream, StepGraphs* graphs) {
  const size_t n = ids.size();
  if (n == 0) return;
  if (graphs && graphs->enabled()) graphs_ = graphs;
  const Packed lay = packed_layout(n);
  Slot* slot = nullptr;
  for (auto& s : slots_)
    if (s->prefetched && std::equal(s->ids.begin(), s->ids.end(), ids.begin(), ids.end())) {
      slot = s.get();
      break;
    }
  if (slot) {
    slot->prefetched = false;
    slot->packing.get();  // rethrows a worker's error
    ++stats_.prefetch_hits;
  } else {
    slot = &free_slot(lay.total);
    pack(*slot, ids, false);
  }
  ensure_device(lay.total);
  const std::string what = "host table " + name_ + " gather " + std::to_string(n) + " rows";
  BLOOMERY_CUDA_CHECK(cudaMemcpyAsync(dev_, slot->host, lay.total, cudaMemcpyHostToDevice, stream), what);
  if (graphs_ && graphs_->capturing()) {
    slot->busy_epoch = graphs_->epoch();  // the copy runs with the graph, after the step's host code
    slot->copy_pending = false;
  } else {
    BLOOMERY_CUDA_CHECK(cudaEventRecord(slot->copied, stream), what);
    slot->copy_pending = true;
  }

  DeviceWeight dw;
  dw.format = bytes_.format;
  dw.rows = n;
  dw.cols = bytes_.cols;
  auto* base = static_cast<uint8_t*>(dev_);
  dw.data = base;
  dw.block_scales = row_.scales ? base + lay.scales_at : nullptr;
  dw.scale_f32 = row_.grid ? reinterpret_cast<const float*>(base + lay.grid_at) : nullptr;
  dw.global = bytes_.global;
  if (bytes_.format == FormatId::FP8_BLOCK)
    dw.block_n = 1, dw.block_k = bytes_.block_k;  // one grid row per row
  dequantize(dw, out, stream);

  ++stats_.gathers;
  stats_.rows += n;
  stats_.bytes_copied += lay.total;
}

HostTableStats HostTable::stats() const {
  return stats_;
}

}  // namespace bloomery::cuda::host
