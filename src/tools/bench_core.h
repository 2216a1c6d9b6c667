// The measuring part of `bloomery bench`, free of any CLI or device code so a unit test can run it on the CPU
// backend: the statistics (median, p95), the pp/tg/depth/concurrency grid, and the timed loops over
// Model::forward / forward_batch with a greedy sampler supplied by the caller (on the card for CUDA).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "models/model.h"
#include "runtime/scheduler.h"

namespace bloomery::tools {

// Nearest-rank percentile (q in [0, 1]) of a copy of v; 0 for an empty v.
double percentile(std::vector<double> v, double q);

// What timing needs beyond the Backend interface.
struct BenchHooks {
  std::function<void()> sync;  // waits for every queued device operation (no-op on the CPU)
  // Greedy next token from each logits tensor (its last row), one per tensor, in order. On CUDA this runs
  // on the card (CudaBackend::sample) and only the ids come back, as a server's loop would do.
  std::function<std::vector<int32_t>(std::span<const Tensor>)> greedy;
  // Turns the backend's step graphs on or off between steps (CUDA graph mode); empty when it has none.
  std::function<void(bool)> set_step_graphs;
  // Switches a backend knob between its main setting (false) and a candidate (true) between steps, for
  // BenchParams::ab (e.g. the GEMV kernel); empty when no knob was asked for.
  std::function<void(bool)> set_ab;
  // Starts (true) or stops (false) a profiler's capture range (cudaProfilerStart/Stop); empty on the CPU.
  std::function<void(bool)> profile_range;
  // Decode steps captured and replayed as graphs so far (CUDA graph mode); empty without step graphs. The
  // verify rows say from it whether their steps were replayed or ran eagerly.
  std::function<uint64_t()> graph_replays;
  // Tests: every timed tg step's logits, in order (called after the step's time was taken); empty normally.
  std::function<void(std::span<const Tensor>)> on_tg_step;
};

// Host argmax over downloaded logits (lowest index on ties): the CPU backend's hooks.
BenchHooks host_hooks(Backend& backend);

struct BenchParams {
  std::vector<int64_t> ps{512}, ns{128}, ds{0}, cs{1};
  std::vector<int64_t> pp_ds, pp_cs;  // depths and concurrencies of the pp tests (empty: ds, cs)
  int repeats = 5;
  int64_t ubatch = 0;      // prompt chunk per forward call (0: the whole prompt in one call)
  double max_seconds = 0;  // > 0: tests that would start after this much time are skipped (reported)
  bool warmup = true;      // a short pp + tg before measuring (first launches, allocator growth)
  uint64_t seed = 1234;    // random prompt ids
  // tg rows twice, repeat by repeat alternately without and with step graphs (hooks.set_step_graphs): the
  // second row's test is "tgN+graphs". Graphs are left off afterwards.
  bool graphs_ab = false;
  // Non-empty: the same alternation with hooks.set_ab instead of graphs; the candidate's rows are "tgN+<ab>".
  std::string ab;
  // The tg repeats (not their set-up, which prefills the depth) run inside hooks.profile_range, so that
  // `nsys profile --capture-range=cudaProfilerApi` sees decode steps only.
  bool profile_tg = false;
  // The same range around the pp repeats instead (per-op prompt profiles, BLOOMERY_CUDA_OP_TIMES with -n 0).
  bool profile_pp = false;
  // Verify widths K (1 + K − 1 drafts; 2 … 9): after each repeat of every C = 1 tg row, row.tokens verifies
  // of each width ("verifyK") and as many draft steps ("draft") on its sequence, at the depth it reached
  // (bench_spec.h). Their rows follow the tg row's, with the ratio of medians to it.
  std::vector<int64_t> spec_rows;
};

// Refuses bad parameters (E_BENCH_ARGS naming the flag) before anything is built or run.
void check_params(const BenchParams& params);

struct BenchRow {
  std::string test;  // "pp512" / "tg128"
  int64_t tokens = 0, depth = 0, conc = 1;
  int64_t depth_end = 0;    // tg: the sequences' depth after the last repeat (decode continues in place)
  std::vector<double> tps;  // tokens/s per repeat (all sequences together)
  std::vector<double> ms;   // pp: time to first token per repeat (prompt + first sampled id); tg: per step
  bool finite = true;       // every checked logits row was finite
  bool skipped = false;     // not run: the time budget was spent, or skip_reason
  std::string skip_reason;  // why it was skipped ("--max-seconds", "no MTP/NextN draft layer")
  double seconds = 0;       // wall time of the whole test, untimed depth prefill included
  // Spec rows (BenchParams::spec_rows): depth … depth_end are the positions measured at.
  std::string ref;                  // the tg row they ran with ("tg16")
  double ratio = 0;                 // median ms / that tg row's median ms
  std::vector<double> rollback_ms;  // verifyK: the commit(1) part of each ms (included in it)
  int64_t replayed = 0;             // verifyK: samples the backend replayed as captured graphs
  std::string step;                 // verifyK and draft: "graph", "eager" or "graph R/N" (R of N replayed)
  // Slot rows (bench_slots.h): run through the scheduler; the drafting row's counts, and its rate over its
  // plain row's in `ratio` (`ref` naming that row).
  bool slots = false;
  DraftCounts drafts;
};

// True for the rows of BenchParams::spec_rows.
inline bool is_spec_row(const BenchRow& r) {
  return r.test.rfind("draft", 0) == 0 || r.test.rfind("verify", 0) == 0;
}

// Runs the grid: first the pp tests (each repeat on fresh sequences prefilled to d, untimed), then for each
// depth d the tg tests in ascending C on one pool of sequences prefilled to d once (repeats and larger C
// continue on the same sequences, so a tg row's depth grows by n per repeat: depth … depth_end). pp with
// C > 1 runs the C prompts through one forward_batch; tg steps always batch the C sequences.
// `on_row` is called after every row (e.g. to rewrite a JSON file so a killed run keeps its rows).
// `steps`: when given (tensor parallel), every state and forward goes through it instead of the model, so
// rank 0's steps run on every rank; logits then come back to the host.
std::vector<BenchRow> run_bench_grid(Backend& backend, Model& model, const BenchHooks& hooks,
                                     const BenchParams& params,
                                     const std::function<void(const BenchRow&)>& on_row = {},
                                     StepEngine* steps = nullptr);

// True when every element of the tensor's last row is finite (downloads one row).
bool last_row_finite(Backend& backend, const Tensor& logits);

}  // namespace bloomery::tools
