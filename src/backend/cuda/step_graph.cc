#include "backend/cuda/step_graph.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/env_switch.h"
#include "core/error.h"

namespace bloomery::cuda {

namespace {
constexpr size_t kArenaAlign = 256;
constexpr size_t kArenaChunk = 1 << 20;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

bool step_graphs_requested() {
  const char* v = std::getenv("BLOOMERY_CUDA_GRAPHS");
  if (!v || !*v) return kStepGraphsByDefault;
  const std::string_view s(v);
  if (s == "1" || s == "on" || s == "true") return true;
  if (s == "0" || s == "off" || s == "false") return false;
  raise("E_CUDA_GRAPH", Where{"", "", "BLOOMERY_CUDA_GRAPHS"}, "1, on, true, 0, off or false", v);
}

int step_graph_segment_layers() {
  return static_cast<int>(env_int("BLOOMERY_CUDA_GRAPH_LAYERS", kSegmentLayers, 0, 100000, "E_CUDA_GRAPH"));
}

// ---- PinnedArena -----------------------------------------------------------------------------------------

PinnedArena::Chunk PinnedArena::allocate(size_t size) {
  Chunk c;
  c.size = size;
  void* p = nullptr;
  BLOOMERY_CUDA_CHECK(cudaHostAlloc(&p, c.size, cudaHostAllocPortable),
                      "step graph pinned arena " + std::to_string(c.size) + " bytes");
  c.p = static_cast<uint8_t*>(p);
  return c;
}

PinnedArena::~PinnedArena() {
  for (Chunk& c : chunks_) cudaFreeHost(c.p);
}

const void* PinnedArena::put(const void* src, size_t bytes) {
  const size_t need = (bytes + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
  while (chunk_ < chunks_.size() && used_ + need > chunks_[chunk_].size) ++chunk_, used_ = 0;
  if (chunk_ == chunks_.size()) {
    // A new chunk (the old ones stay: captured copies of this step read them when the graph runs).
    chunks_.push_back(allocate(std::max(need, kArenaChunk)));
    used_ = 0;
  }
  uint8_t* dst = chunks_[chunk_].p + used_;
  if (bytes) std::memcpy(dst, src, bytes);
  used_ += need;
  return dst;
}

void PinnedArena::reset() {
  if (chunks_.size() > 1) {  // the step needed more than one chunk: next time one chunk holds it all
    size_t total = 0;
    for (Chunk& c : chunks_) {
      total += c.size;
      BLOOMERY_CUDA_CHECK(cudaFreeHost(c.p), "step graph pinned arena free");
    }
    chunks_.clear();
    chunks_.push_back(allocate(total));
  }
  chunk_ = 0;
  used_ = 0;
}

// ---- StepGraphs ------------------------------------------------------------------------------------------

StepGraphs::~StepGraphs() {
  for (auto& [key, e] : graphs_)
    for (auto& seg : e.segments)
      for (Variant& v : seg)
        if (v.exec) cudaGraphExecDestroy(v.exec);
  for (auto& f : deferred_) {
    try {
      f();
    } catch (...) {  // a failed free at exit has nobody to tell
    }
  }
}

void StepGraphs::set_enabled(bool on) {
  if (in_step_)
    raise("E_CUDA_GRAPH", Where{"", "", "set_step_graphs"}, "a switch between steps", "inside a step");
  enabled_ = on;
}

void StepGraphs::begin(cudaStream_t s, uint64_t key) {
  if (!enabled_ || in_step_) return;
  // The previous step and anything queued since have run: their pinned bytes and deferred frees are free.
  BLOOMERY_CUDA_CHECK(cudaStreamSynchronize(s), "step graph: wait before a step");
  for (auto& f : deferred_) f();
  deferred_.clear();
  arena_.reset();
  current_ = &graphs_[key];
  unsafe_op_ = nullptr;
  ++epoch_;
  in_step_ = true;
  segment_ = 0;
  layers_ = 0;
  if (current_->mode == Mode::Capture) start_capture(s);
}

void StepGraphs::start_capture(cudaStream_t s) {
  capture_start_ = now_s();
  BLOOMERY_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), "step graph: begin capture");
  capturing_ = true;
}

void StepGraphs::keep_eager() {
  current_->mode = Mode::Eager;
  ++stats_.eager_keys;
}

void StepGraphs::layer_done(cudaStream_t s) {
  if (!capturing_ || segment_layers_ <= 0 || ++layers_ < segment_layers_) return;
  layers_ = 0;
  launch_segment(s);
  start_capture(s);
}

void StepGraphs::end(cudaStream_t s) {
  if (!in_step_) return;
  ++stats_.steps;
  if (capturing_) {
    launch_segment(s);
    ++stats_.captured;
    const double launched = now_s();
    finish(s);
    stats_.wait_s += now_s() - launched;
    return;
  }
  if (current_->mode == Mode::WarmUp) {
    if (unsafe_op_)
      keep_eager();
    else
      current_->mode = Mode::Capture;
  }
  finish(s);
}

void StepGraphs::launch_segment(cudaStream_t s) {
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(s, &graph);
  if (ended != cudaSuccess) {
    if (graph) cudaGraphDestroy(graph);
    keep_eager();  // do not try this key again
    in_step_ = false;
    cuda_fail(ended, "cudaStreamEndCapture", "step graph: end capture", __FILE__, __LINE__);
  }
  stats_.capture_s += now_s() - capture_start_;
  const cudaGraphExec_t exec = apply(graph);
  BLOOMERY_CUDA_CHECK(cudaGraphLaunch(exec, s), "step graph: launch segment " + std::to_string(segment_));
  ++segment_;
  ++stats_.segments;
}

cudaGraphExec_t StepGraphs::apply(cudaGraph_t graph) {
  size_t nodes = 0;
  BLOOMERY_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nodes), "step graph: count nodes");
  stats_.nodes = segment_ ? stats_.nodes + nodes : nodes;
  if (current_->segments.size() <= segment_) current_->segments.resize(segment_ + 1);
  std::vector<Variant>& variants = current_->segments[segment_];
  Variant* v = nullptr;
  for (Variant& x : variants)
    if (x.nodes == nodes) v = &x;
  if (v && v->exec) {
    const double t0 = now_s();
    cudaGraphExecUpdateResultInfo info{};
    if (cudaGraphExecUpdate(v->exec, graph, &info) == cudaSuccess) {
      ++stats_.updated;
    } else {  // the same node count, another topology: build a new executable
      (void)cudaGetLastError();
      // A topology change: the refusal names no node, so there is no kernel to report.
      ++stats_.update_failures;
      cudaGraphExecDestroy(v->exec);
      v->exec = nullptr;
    }
    stats_.update_s += now_s() - t0;
  }
  if (!v) {
    if (variants.size() == kMaxVariants) {
      cudaGraphExecDestroy(variants.front().exec);
      variants.erase(variants.begin());
    }
    variants.push_back({nodes, nullptr});
    v = &variants.back();
  }
  if (!v->exec) {
    const double t0 = now_s();
    const cudaError_t built = cudaGraphInstantiate(&v->exec, graph, 0);
    cudaGraphDestroy(graph);
    if (built != cudaSuccess) {
      v->exec = nullptr;
      keep_eager();
      in_step_ = false;
      cuda_fail(built, "cudaGraphInstantiate", "step graph: instantiate", __FILE__, __LINE__);
    }
    ++stats_.instantiated;
    stats_.instantiate_s += now_s() - t0;
    return v->exec;
  }
  cudaGraphDestroy(graph);
  return v->exec;
}

void StepGraphs::abort(cudaStream_t s) noexcept {
  if (!in_step_) return;
  if (capturing_) {
    capturing_ = false;
    cudaGraph_t graph = nullptr;
    (void)cudaStreamEndCapture(s, &graph);  // invalidated or not, nothing of it runs
    if (graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
  }
  try {
    finish(s);
  } catch (...) {  // the step's own error is the one being reported
    in_step_ = false;
  }
}

void StepGraphs::finish(cudaStream_t s) {
  in_step_ = false;
  BLOOMERY_CUDA_CHECK(cudaStreamSynchronize(s), "step graph: wait for the step");
  for (auto& f : deferred_) f();
  deferred_.clear();
}

void StepGraphs::not_capturable(const char* op) {
  if (!in_step_) return;
  if (capturing_) {
    keep_eager();  // the next step of this shape runs eagerly
    raise("E_CUDA_GRAPH", Where{"", "", op}, "ops that can be recorded in a CUDA graph step",
          std::string(op) + " (it read device data on the host); run with BLOOMERY_CUDA_GRAPHS=0");
  }
  if (!unsafe_op_) unsafe_op_ = op;
}

void StepGraphs::defer(std::function<void()> free_fn) {
  if (in_step_) {
    deferred_.push_back(std::move(free_fn));
  } else {
    free_fn();
  }
}

}  // namespace bloomery::cuda
