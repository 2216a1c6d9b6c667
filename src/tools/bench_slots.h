// `bloomery bench --spec-type …`: decode through the server's scheduler (runtime/scheduler.h) and its
// drafting, in one process, so that drafting on and off are measured on the same sequences:
//   * C slots, each holding one sequence. It is primed with a prompt of d tokens (random ids, or the tokens
//     of --spec-text from a different offset per slot), untimed, and a short untimed round of each kind.
//   * Every repeat runs two rounds on the same slots, each of C greedy requests of n tokens. Each request
//     continues its slot's sequence through the prompt cache, reading one new token:
//       - "tgN@slots": every request with llama-server's per-request `speculative.n_max` 0, no drafts;
//       - "tgN+mtpK" (or "+ngramK"): the server's drafting, adaptive width included.
//   * A round's rate is its generated tokens over its wall time, prompt-cache read included.
// The drafting row carries its drafted / accepted counts by position and its rate over the plain row's
// (BenchRow::ratio). "Off" here is drafting configured and not used: the engine still catches its draft
// layer up, one batched pass per DraftOptions::defer_rows tokens a slot.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "tools/bench_core.h"
#include "tools/spec_options.h"

namespace bloomery::tools {

struct SlotBenchParams {
  SpecFlags spec;             // type != "none"
  std::vector<int32_t> text;  // prompt tokens (--spec-text); empty: random ids
};

// The slot rows of every (d, C, n) of the grid (p.ds × p.cs × p.ns), p.repeats rounds of each kind,
// alternating; `on_row` after each row.
std::vector<BenchRow> run_slot_rows(Backend& backend, Model& model, const BenchParams& p,
                                    const SlotBenchParams& s,
                                    const std::function<void(const BenchRow&)>& on_row = {});

// True for the rows run_slot_rows makes.
inline bool is_slot_row(const BenchRow& r) {
  return r.slots;
}

}  // namespace bloomery::tools
