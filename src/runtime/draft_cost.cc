// DraftCost: per batch size, the least of the last plain decode steps' times and a moving average of the
// time a drafted row adds.
#include "runtime/draft_cost.h"

#include <algorithm>

namespace bloomery {

namespace {
constexpr double kAlpha = 0.2;  // weight of a new sample in the row time's moving average
}  // namespace

DraftCost::Size& DraftCost::at(int slots) {
  if (static_cast<size_t>(slots) >= sizes_.size()) sizes_.resize(static_cast<size_t>(slots) + 1);
  return sizes_[static_cast<size_t>(slots)];
}

const DraftCost::Size* DraftCost::find(int slots) const {
  return slots >= 0 && static_cast<size_t>(slots) < sizes_.size() ? &sizes_[static_cast<size_t>(slots)]
                                                                  : nullptr;
}

double DraftCost::Size::plain_time() const {
  return *std::min_element(plain, plain + plain_samples);
}

void DraftCost::record(int slots, int64_t drafted, double seconds) {
  if (slots <= 0 || seconds < 0.0) return;
  Size& s = at(slots);
  if (drafted == 0) {
    s.plain[s.plain_next] = seconds;
    s.plain_next = (s.plain_next + 1) % kPlainKept;
    s.plain_samples = std::min(s.plain_samples + 1, kPlainKept);
    s.since_plain = 0;
    return;
  }
  ++s.since_plain;
  if (s.plain_samples < kPlainSamples) return;  // nothing to measure the rows against yet
  const double added = std::max(0.0, seconds - s.plain_time()) / static_cast<double>(drafted);
  s.row = s.row_samples == 0 ? added : (1.0 - kAlpha) * s.row + kAlpha * added;
  s.row_samples = std::min(s.row_samples + 1, kRowSamples);
}

bool DraftCost::wants_plain(int slots) const {
  const Size* s = find(slots);
  return !s || s->plain_samples < kPlainSamples || s->since_plain >= kRefresh;
}

double DraftCost::row_cost(int slots) const {
  const Size* s = find(slots);
  if (!s || s->plain_samples < kPlainSamples || s->row_samples < kRowSamples) return prior_;
  const double plain = s->plain_time();
  return plain > 0.0 ? static_cast<double>(slots) * s->row / plain : prior_;
}

}  // namespace bloomery
