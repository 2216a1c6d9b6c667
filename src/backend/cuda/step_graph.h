// CUDA graphs for decode steps (on by default since measured faster on an H200, docs/performance.md;
// BLOOMERY_CUDA_GRAPHS=0 turns them off).
//
// A step is the ops between Backend::begin_step(key) and end_step(), key = the step's shape (tokens per
// sequence). Per key: the first step runs eagerly as a warm-up (it sizes the scratch buffers and the pinned
// arena, and any op that cannot be recorded names itself through not_capturable(), which keeps that key
// eager); every later step is captured from the backend's stream (relaxed mode), applied to the key's
// executable graph with cudaGraphExecUpdate (re-instantiated when the topology changed, e.g. an attention
// split count that follows the context length), launched, and waited for. Capturing every step keeps every
// per-step value (positions, context lengths, pointers) exactly what the eager ops would use; the replay
// removes the per-kernel launch gaps on the card. This is llama.cpp's scheme, not vLLM's static replay.
//
// A step is recorded in segments of a few model layers (Backend::step_layer_done marks the layer ends):
// each segment is launched as soon as it is recorded, so the card runs it while the host records the next
// one. Measured on an H200 (docs/performance.md), recording a whole step before launching it left the card
// idle for the recording (7.7 ms of a 24.6 ms step at C=1) and lost to eager launches.
//
// What the ops do differently inside a step (cuda_backend.cc, qwen4_ops.cc, host_table.cc):
//   * host arrays go up through PinnedArena (a copy from pageable memory cannot be captured, and every copy
//     node reads its source when the graph runs, after all of the step's host code);
//   * buffers that grow free their old memory only after the step ran (deferred), since captured nodes
//     still point at it;
//   * the QSA indexer's tie count accumulates on the card instead of being read back per call;
//   * host-table staging slots used by the step are not reused within it (no events recorded in capture).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

namespace bloomery::cuda {

// Pinned host memory for the host → device copies of one step; reused only after the step ran.
class PinnedArena {
 public:
  PinnedArena() = default;
  PinnedArena(const PinnedArena&) = delete;
  PinnedArena& operator=(const PinnedArena&) = delete;
  ~PinnedArena();
  // Copies `bytes` of `src` into the arena and returns their pinned address.
  const void* put(const void* src, size_t bytes);
  // Starts over (the step's copies have run). Several chunks are merged into one for the next step.
  void reset();

 private:
  struct Chunk {
    uint8_t* p = nullptr;
    size_t size = 0;
  };
  static Chunk allocate(size_t size);  // cudaHostAlloc, checked
  std::vector<Chunk> chunks_;
  size_t chunk_ = 0, used_ = 0;
};

// Counters for the bench and the tests.
struct StepGraphStats {
  uint64_t steps = 0;         // end_step calls in graph mode
  uint64_t captured = 0;      // steps recorded and replayed
  uint64_t instantiated = 0;  // executable graphs built (first capture of a key, or a topology change)
  uint64_t updated = 0;       // captures applied to an existing executable graph
  uint64_t eager_keys = 0;    // keys kept eager because an op could not be recorded
  uint64_t segments = 0;      // graphs launched (a step is recorded in segments of layers)
  uint64_t nodes = 0;         // kernels and copies in the last captured step
  // Host time of graph steps (seconds, summed): recording the ops, cudaGraphExecUpdate, cudaGraphInstantiate
  // (all three overlap the card running earlier segments), and the wait from the last segment's launch
  // until the card finished the step.
  double capture_s = 0, update_s = 0, instantiate_s = 0, wait_s = 0;
  uint64_t update_failures = 0;  // updates refused (a topology change), each followed by an instantiation
};

class StepGraphs {
 public:
  // `segment_layers`: model layers recorded per launched graph (0: the whole step as one graph).
  StepGraphs(bool enabled, int segment_layers) : enabled_(enabled), segment_layers_(segment_layers) {}
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;
  ~StepGraphs();

  bool enabled() const { return enabled_; }
  int segment_layers() const { return segment_layers_; }
  // Switches graph mode between steps (the backend must own a capturable stream: CudaBackend checks).
  void set_enabled(bool on);
  bool in_step() const { return in_step_; }
  bool capturing() const { return capturing_; }
  // The current step's number: host-table slots it copies from carry it and stay busy until the step ends
  // (end_step and abort_step wait for the card, so every earlier step has run).
  uint64_t epoch() const { return epoch_; }
  bool running(uint64_t epoch) const { return in_step_ && epoch == epoch_; }

  void begin(cudaStream_t s, uint64_t key);
  // A model layer of the step ended: every segment_layers of them, the recording so far is launched.
  void layer_done(cudaStream_t s);
  void end(cudaStream_t s);
  void abort(cudaStream_t s) noexcept;

  // An op that reads device data on the host (or otherwise cannot be recorded) calls this inside a step:
  // while warming a key up it marks the key eager; while capturing it throws E_CUDA_GRAPH naming `op`.
  void not_capturable(const char* op);
  // Runs `free_fn` once the current step has run (at once outside a step).
  void defer(std::function<void()> free_fn);
  // defer() on `graphs`, or `free_fn` at once where a buffer has no step graphs (graphs may be null).
  static void free_after_step(StepGraphs* graphs, std::function<void()> free_fn) {
    if (graphs)
      graphs->defer(std::move(free_fn));
    else
      free_fn();
  }
  PinnedArena& arena() { return arena_; }
  const StepGraphStats& stats() const { return stats_; }

 private:
  enum class Mode : uint8_t { WarmUp, Capture, Eager };
  // A segment's executable graphs, one per topology seen (node count): a QSA layer pools a block of keys
  // only on every compress-th token, so its segment alternates between two topologies that an update
  // cannot turn into each other; each keeps its own executable and is updated in place.
  struct Variant {
    size_t nodes = 0;
    cudaGraphExec_t exec = nullptr;
  };
  static constexpr size_t kMaxVariants = 4;  // per segment; the oldest is dropped beyond
  struct Entry {
    Mode mode = Mode::WarmUp;
    std::vector<std::vector<Variant>> segments;
  };
  void finish(cudaStream_t s);  // waits for the step, runs the deferred frees, leaves the step
  // Ends the current segment's capture and launches it (updating or instantiating its executable graph).
  void launch_segment(cudaStream_t s);
  void start_capture(cudaStream_t s);        // begins capturing the next segment on s
  void keep_eager();                         // the current key's steps run eagerly from now on
  cudaGraphExec_t apply(cudaGraph_t graph);  // the segment's executable graph, updated from `graph`

  bool enabled_ = false;
  int segment_layers_ = 0, layers_ = 0;
  size_t segment_ = 0;
  bool in_step_ = false, capturing_ = false;
  const char* unsafe_op_ = nullptr;
  uint64_t epoch_ = 0;
  Entry* current_ = nullptr;
  double capture_start_ = 0;  // seconds on a steady clock
  std::unordered_map<uint64_t, Entry> graphs_;
  std::vector<std::function<void()>> deferred_;
  PinnedArena arena_;
  StepGraphStats stats_;
};

// Graph mode: BLOOMERY_CUDA_GRAPHS = 1/on/true or 0/off/false (anything else is refused), unset: default.
inline constexpr bool kStepGraphsByDefault = true;
bool step_graphs_requested();
// Model layers per recorded segment: BLOOMERY_CUDA_GRAPH_LAYERS (0: whole steps). One layer per segment
// measured fastest on an H200 (docs/performance.md: 1, 4 and 12 tried).
inline constexpr int kSegmentLayers = 1;
int step_graph_segment_layers();

}  // namespace bloomery::cuda
