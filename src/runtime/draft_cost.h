// What a drafted row costs a decode step, measured (SpecConfig::measured_cost): per batch size (the decoding
// slots of a step), the wall time of a plain decode step (the least of the last few) and the time each
// drafted row adds to one (a moving average: its share of the draft passes, its verify row, the commit). The
// adaptive width weighs a slot's expected extra tokens against that cost, so drafting turns itself off where
// it is measured to lose (a compute-bound batch, a launch-bound tiny model) and stays on where verify rows
// are nearly free (a memory-bound step at few slots).
#pragma once

#include <cstdint>
#include <vector>

namespace bloomery {

class DraftCost {
 public:
  // prior: the cost of one drafted row relative to a plain step of one slot, used until it is measured.
  explicit DraftCost(double prior) : prior_(prior) {}

  // A step of `slots` decoding sequences (and no prompt rows) that verified `drafted` rows in all and took
  // `seconds` from its first draft pass to its last token.
  void record(int slots, int64_t drafted, double seconds);
  // Whether the next step of `slots` should draft nowhere, to measure (again) what a plain step costs: until
  // kPlainSamples plain steps of that size were timed, and every kRefresh steps of that size since the last.
  bool wants_plain(int slots) const;
  // One drafted row's cost relative to a plain step, for a step of `slots` sequences that all draft alike:
  // slots × (time a row adds) / (plain step time), so that a width k costs a step 1 + cost · k of its plain
  // time. The prior until both are measured at that size.
  double row_cost(int slots) const;

  static constexpr int kPlainSamples = 3;  // plain steps timed before their time is trusted
  static constexpr int kPlainKept = 5;     // the plain time is the least of the last kPlainKept
  static constexpr int kRowSamples = 2;    // drafting steps timed before the row cost is trusted
  static constexpr int64_t kRefresh = 32;  // steps of one size between two plain measurements

 private:
  struct Size {
    // Plain step times, the last kPlainKept: their least is the plain time (the first steps of a request and
    // a busy machine's hiccups only make steps slower, and a plain time too high would price drafts too low).
    double plain[kPlainKept] = {};
    int plain_samples = 0;  // in plain[], up to kPlainKept
    int plain_next = 0;     // where the next one goes
    double row = 0.0;       // seconds a drafted row adds: a moving average
    int row_samples = 0;
    int64_t since_plain = 0;  // steps of this size since the last plain one
    double plain_time() const;
  };
  Size& at(int slots);
  const Size* find(int slots) const;

  double prior_;
  std::vector<Size> sizes_;  // by slots
};

}  // namespace bloomery
