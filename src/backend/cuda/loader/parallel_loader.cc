// The parallel checkpoint loader of the CUDA backend (see parallel_loader.h).
//
// Work unit: a window of whole rows of one weight, sized to fit one pinned staging slot (FP8 block windows
// start on a tile row so the window's scale grid lines up). A reader thread reads the window's stored parts
// (O_DIRECT through DirectReader, or through the format layer for CSF-coded scales and split tables),
// validates it with the format layer exactly as load_weight_rows does, widens FP8 scale grids to f32, and
// hands the slot to the main thread, which queues its copies on a copy stream into the weight's place in the
// arena and gives the slot back once the copy's event has passed. Reads of the next windows overlap the
// copies.
#include "backend/cuda/loader/parallel_loader.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/loader/direct_reader.h"
#include "backend/cuda/loader/weight_build.h"
#include "backend/cuda/loader/window_plan.h"
#include "formats/weight_decode.h"

namespace bloomery::cuda {
namespace {

constexpr uint64_t kMinSlot = uint64_t(1) << 20, kMaxSlot = uint64_t(16) << 20;

// Owns the pinned ring, the copy stream and the reader threads; its destructor stops the readers and waits
// for every queued copy, so an exception anywhere leaves nothing behind.
class Pipeline {
 public:
  Pipeline(const TensorSource& src, std::vector<Item>& items, std::vector<Window>& windows,
           BulkLoadContext& ctx, uint64_t slot_bytes, int slots, int threads)
      : src_(src),
        items_(items),
        windows_(windows),
        ctx_(ctx),
        reader_(src, [&ctx](const std::string& s) { ctx.progress.note(s); }),
        slot_bytes_(slot_bytes),
        slots_(slots),
        threads_wanted_(threads),
        filled_(slots) {}

  // Allocates the ring, the stream and the events and starts the readers. Separate from the constructor so
  // that a failure here still runs the destructor's cleanup.
  void start() {
    BLOOMERY_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking), "loader copy stream");
    void* p = nullptr;
    BLOOMERY_CUDA_CHECK(cudaHostAlloc(&p, slot_bytes_ * slots_, cudaHostAllocDefault),
                        fmt::format("loader pinned staging {} x {} bytes", slots_, slot_bytes_));
    pinned_ = static_cast<uint8_t*>(p);
    events_.assign(slots_, nullptr);
    for (auto& e : events_)
      BLOOMERY_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "loader event");
    for (int i = 0; i < slots_; ++i) free_.push_back(i);
    for (int t = 0; t < threads_wanted_; ++t) threads_.emplace_back([this] { reader_loop(); });
  }

  ~Pipeline() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      abort_ = true;
    }
    cv_free_.notify_all();
    for (auto& t : threads_) t.join();
    if (copy_) cudaStreamSynchronize(copy_);  // no copy may still read the pinned ring
    for (auto e : events_)
      if (e) cudaEventDestroy(e);
    if (copy_) cudaStreamDestroy(copy_);
    if (pinned_) cudaFreeHost(pinned_);
  }

  // Runs the main thread's side: copies every window into the arena. Rethrows a reader's error.
  void run(uint8_t* arena) {
    std::deque<int> inflight;
    size_t consumed = 0;
    while (consumed < windows_.size()) {
      int slot = -1;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_ready_.wait(lock, [&] { return error_ || !ready_.empty() || !inflight.empty(); });
        if (error_) std::rethrow_exception(error_);
        if (!ready_.empty()) {
          slot = ready_.front();
          ready_.pop_front();
        }
      }
      if (slot < 0) {  // nothing read yet: retire the oldest copy so its slot can take the next window
        BLOOMERY_CUDA_CHECK(cudaEventSynchronize(events_[inflight.front()]), "loader copy");
        release(inflight.front());
        inflight.pop_front();
        continue;
      }
      const Filled& f = filled_[slot];
      const std::string what = "load " + items_[windows_[f.window].item].rec->name;
      if (f.main_len)
        BLOOMERY_CUDA_CHECK(
            cudaMemcpyAsync(arena + f.main_dev, f.main, f.main_len, cudaMemcpyHostToDevice, copy_), what);
      if (f.scales_len)
        BLOOMERY_CUDA_CHECK(
            cudaMemcpyAsync(arena + f.scales_dev, f.scales, f.scales_len, cudaMemcpyHostToDevice, copy_),
            what);
      BLOOMERY_CUDA_CHECK(cudaEventRecord(events_[slot], copy_), what);
      inflight.push_back(slot);
      ++consumed;
      while (!inflight.empty()) {  // retire finished copies without waiting
        const cudaError_t q = cudaEventQuery(events_[inflight.front()]);
        if (q == cudaErrorNotReady) break;
        BLOOMERY_CUDA_CHECK(q, "loader copy");
        release(inflight.front());
        inflight.pop_front();
      }
    }
    BLOOMERY_CUDA_CHECK(cudaStreamSynchronize(copy_), "loader copies");
  }

  const DirectReader& reader() const { return reader_; }

 private:
  void release(int slot) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      free_.push_back(slot);
    }
    cv_free_.notify_one();
  }

  void reader_loop() {
    for (;;) {
      const size_t w = next_.fetch_add(1);
      if (w >= windows_.size()) return;
      int slot;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_free_.wait(lock, [&] { return abort_ || !free_.empty(); });
        if (abort_) return;
        slot = free_.front();
        free_.pop_front();
      }
      try {
        fill(w, slot);
      } catch (...) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (!error_) error_ = std::current_exception();
          abort_ = true;
        }
        cv_ready_.notify_all();
        cv_free_.notify_all();
        return;
      }
      ctx_.progress.add(windows_[w].progress);
      {
        std::lock_guard<std::mutex> lock(mu_);
        ready_.push_back(slot);
      }
      cv_ready_.notify_one();
    }
  }

  void fill(size_t w, int slot) {
    filled_[slot] = fill_window(src_, items_, windows_[w], reader_, pinned_ + uint64_t(slot) * slot_bytes_,
                                ctx_.warnings);
    filled_[slot].window = w;
  }

  const TensorSource& src_;
  std::vector<Item>& items_;
  std::vector<Window>& windows_;
  BulkLoadContext& ctx_;
  DirectReader reader_;
  uint64_t slot_bytes_;
  int slots_, threads_wanted_;
  std::vector<Filled> filled_;
  cudaStream_t copy_ = nullptr;
  uint8_t* pinned_ = nullptr;
  std::vector<cudaEvent_t> events_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_free_, cv_ready_;
  std::deque<int> free_, ready_;
  std::exception_ptr error_;
  bool abort_ = false;
  std::atomic<size_t> next_{0};
};

}  // namespace

std::vector<Weight> parallel_load(Backend& backend, BulkLoadContext& ctx) {
  auto* be = dynamic_cast<CudaBackend*>(&backend);
  if (!be)
    raise("E_INTERNAL_LOADER", Where{"", "", "backend"}, "the cuda backend", std::string(backend.name()));
  const TensorSource& src = ctx.source;
  if (ctx.jobs.empty()) return {};

  // 1. Plan every weight (header checks) and its arena place; nothing is allocated yet.
  std::vector<Item> items = plan_items(src, ctx.jobs);
  const uint64_t arena_bytes = assign_arena(items);
  uint64_t max_unit = 0, total_read = 0;
  for (const Item& it : items) {
    max_unit = std::max(max_unit, unit_bytes(it));
    total_read += it.job->read_bytes;
  }

  // 2. The ring: 2 slots per reader thread (one being read, one being copied), sized to the load.
  const int hw = static_cast<int>(std::max(2u, std::thread::hardware_concurrency()));
  const int threads = ctx.threads > 0 ? ctx.threads : std::clamp(hw / 2, 2, 8);
  const int slots = 2 * threads + 2;
  uint64_t slot = std::clamp(align_up(ceil_div(total_read, uint64_t(slots)), kMinSlot), kMinSlot, kMaxSlot);
  slot = align_up(std::max(slot, max_unit + kSlotSlack), kDirectAlign);
  const uint64_t usable = slot - kSlotSlack;

  // 3. Windows, in file order so each shard is read front to back.
  std::vector<Window> windows = make_windows(items, usable);
  for (const Item& it : items)
    if (it.rec->rows() == 0) ctx.progress.add(it.job->read_bytes);

  // 4. One arena for every weight, exactly the plan's bytes; freed with the last weight that uses it.
  std::shared_ptr<uint8_t> arena;
  if (arena_bytes) {
    void* p = nullptr;
    BLOOMERY_CUDA_CHECK(cudaMalloc(&p, arena_bytes),
                        "loader arena of " + std::to_string(arena_bytes) + " bytes");
    arena = std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { cudaFree(q); });
  }
  {
    Pipeline pipe(src, items, windows, ctx, slot, slots, threads);
    pipe.start();
    pipe.run(arena.get());
    ctx.stats.direct_bytes = pipe.reader().direct_bytes();
    ctx.stats.threads = threads;
    ctx.stats.path = "parallel O_DIRECT reads into pinned staging";
    if (pipe.reader().buffered_bytes())
      ctx.stats.path += ", " + format_bytes(pipe.reader().buffered_bytes()) + " buffered";
  }

  // 5. The weights: device views into the arena (the dense f32 copies are queued on the backend's stream).
  std::vector<Weight> out;
  out.reserve(items.size());
  for (Item& it : items) {
    auto cw = std::make_shared<CudaWeight>();
    cw->buffers.push_back(std::shared_ptr<void>(arena, arena.get() + it.main_off));
    const void* scales = nullptr;
    if (it.layout.scales) {
      cw->buffers.push_back(std::shared_ptr<void>(arena, arena.get() + it.scale_off));
      scales = cw->buffers.back().get();
    }
    WeightBytes view = it.header;
    if (it.layout.decode_f32) {
      const std::vector<int64_t>& s = it.job->shape;
      view = WeightBytes{};
      view.format = FormatId::F32;
      view.main_dtype = DType::F32;
      view.rows = s.empty() ? 1 : static_cast<uint64_t>(s[0]);
      view.cols = view.rows ? it.rec->rows() * it.rec->cols() / view.rows : 0;
    }
    set_device_view(cw->dw, view, cw->buffers.front().get(), scales);
    out.push_back(wrap_cuda_weight(*be, it.job->name, it.job->shape, std::move(cw)));
  }
  return out;
}

}  // namespace bloomery::cuda
