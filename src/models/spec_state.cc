// Sequence state v2: commit / truncate / checkpoint / restore over the parts a family declares.
#include "models/spec_state.h"

#include <string>

#include "core/error.h"

namespace bloomery {

void spec_begin(SequenceState& st, int64_t p0, int64_t T) {
  st.spec = SpecPending{};
  st.spec.active = true;
  st.spec.p0 = p0;
  st.spec.T = T;
}

Tensor spec_fork(Backend& be, SequenceState& st, Tensor& slot) {
  if (!st.spec.active) return slot;
  Tensor copy = be.alloc(slot.shape(), slot.type());
  be.copy(copy, slot);
  st.spec.swaps.emplace_back(&slot, copy);
  st.spec.bytes += slot.nbytes();
  return copy;
}

void spec_on_partial(SequenceState& st, std::function<void(Backend&, int64_t)> replay) {
  if (st.spec.active) st.spec.replays.push_back(std::move(replay));
}

void Model::commit(Backend& be, SequenceState& st, int64_t n) {
  if (!st.spec.active)
    raise("E_STATE_ROLLBACK", Where{"", "", "commit"}, "a pending speculative forward", "none");
  if (n < 1 || n > st.spec.T)
    raise("E_STATE_ROLLBACK", Where{"", "", "commit"}, "1 … " + std::to_string(st.spec.T) + " rows",
          std::to_string(n));
  SpecPending p = std::move(st.spec);
  st.spec = SpecPending{};
  if (n == p.T) {
    for (auto& [slot, copy] : p.swaps) *slot = copy;
  } else {
    for (auto& r : p.replays) r(be, n);
  }
  st.pos = p.p0 + n;
  st.history.resize(static_cast<size_t>(st.pos));
}

void Model::truncate(Backend& be, SequenceState& st, int64_t pos) {
  if (st.spec.active && pos > st.spec.p0 && pos <= st.spec.p0 + st.spec.T)
    return commit(be, st, pos - st.spec.p0);
  if (!st.spec.active && pos == st.pos) return;
  raise("E_STATE_ROLLBACK", Where{"", "", "truncate"},
        st.spec.active ? "a position in (" + std::to_string(st.spec.p0) + ", " +
                             std::to_string(st.spec.p0 + st.spec.T) + "]"
                       : "position " + std::to_string(st.pos) + " (older positions need a checkpoint)",
        std::to_string(pos));
}

StateCheckpoint Model::checkpoint(Backend& be, SequenceState& st) const {
  if (st.spec.active)
    raise("E_STATE_PENDING", Where{"", "", "checkpoint"}, "a committed state",
          "a pending speculative forward");
  StateCheckpoint cp;
  cp.pos = st.pos;
  cp.draft_pos = st.draft_pos;
  cp.history = st.history;
  cp.draft_rows = st.draft_rows;
  cp.draft_next = st.draft_next;
  cp.verify_hidden = st.verify_hidden;  // a forward replaces it, never writes into it: the handle is enough
  cp.verify_ids = st.verify_ids;
  for (StatePart& p : state_parts(st)) {
    if (p.host) {
      cp.hosts.push_back(*p.host);
    } else if (p.rows < 0) {
      Tensor c = be.alloc(p.tensor->shape(), p.tensor->type());
      be.copy(c, *p.tensor);
      cp.tensors.push_back(c);
    }
  }
  return cp;
}

void Model::restore(Backend& be, SequenceState& st, const StateCheckpoint& cp) const {
  st.spec = SpecPending{};
  size_t ti = 0, hi = 0;
  for (StatePart& p : state_parts(st)) {
    if (p.host) {
      *p.host = cp.hosts.at(hi++);
    } else if (p.rows < 0) {
      be.copy(*p.tensor, cp.tensors.at(ti++));
    }
  }
  st.pos = cp.pos;
  st.draft_pos = cp.draft_pos;
  st.history = cp.history;
  st.draft_rows = cp.draft_rows;
  st.draft_next = cp.draft_next;
  st.verify_hidden = cp.verify_hidden;
  st.verify_ids = cp.verify_ids;
}

void Model::copy_state(Backend& be, SequenceState& from, SequenceState& to) const {
  if (from.spec.active)
    raise("E_STATE_PENDING", Where{"", "", "copy_state"}, "a committed state",
          "a pending speculative forward");
  if (from.pos > to.capacity)
    raise("E_CONTEXT_FULL", Where{"", "", "copy_state"},
          "a target of at least " + std::to_string(from.pos) + " positions", std::to_string(to.capacity));
  std::vector<StatePart> src = state_parts(from), dst = state_parts(to);
  if (src.size() != dst.size())
    raise("E_STATE_COPY", Where{"", "", "copy_state"}, std::to_string(src.size()) + " state parts",
          std::to_string(dst.size()));
  auto deep = [&](const Tensor& t) {
    if (!t.defined()) return Tensor();
    Tensor c = be.alloc(t.shape(), t.type());
    be.copy(c, t);
    return c;
  };
  for (size_t i = 0; i < src.size(); ++i) {
    const StatePart& a = src[i];
    StatePart& b = dst[i];
    if (a.host) {
      *b.host = *a.host;
    } else if (a.rows < 0) {
      be.copy(*b.tensor, *a.tensor);
    } else if (a.rows > 0) {
      Tensor d = b.tensor->slice(0, a.rows);  // rows past pos are never read before being written
      be.copy(d, a.tensor->slice(0, a.rows));
    }
  }
  to.pos = from.pos;
  to.draft_pos = from.draft_pos;
  to.history = from.history;
  to.draft_rows.clear();
  for (const Tensor& t : from.draft_rows) to.draft_rows.push_back(deep(t));
  to.draft_next = from.draft_next;
  to.verify_hidden = deep(from.verify_hidden);
  to.verify_ids = from.verify_ids;
  to.spec = SpecPending{};
}

}  // namespace bloomery

namespace bloomery {

void spec_conv_replay(SequenceState* st, Tensor* slot, const Tensor& x, const Weight* w, int dilation,
                      Act act) {
  if (!st || !st->spec.active) return;
  spec_on_partial(*st, [=](Backend& be, int64_t n) {
    Tensor out = be.alloc({n, x.cols()});
    be.causal_conv1d(out, x.slice(0, n), *w, *slot, dilation, act);
  });
}

void spec_gdn_replay(SequenceState* st, Tensor* slot, const Tensor& q, const Tensor& k, const Tensor& v,
                     const Tensor& g, const Tensor& beta, bool l2norm_qk) {
  if (!st || !st->spec.active) return;
  spec_on_partial(*st, [=](Backend& be, int64_t n) {
    std::vector<int64_t> shape = v.shape();
    shape[0] = n;
    Tensor out = be.alloc(shape);
    be.gated_delta_rule(out, q.slice(0, n), k.slice(0, n), v.slice(0, n), g.slice(0, n), beta.slice(0, n),
                        *slot, l2norm_qk, false);
  });
}

void spec_kda_replay(SequenceState* st, Tensor* slot, const Tensor& q, const Tensor& k, const Tensor& v,
                     const Tensor& g, const Tensor& beta) {
  if (!st || !st->spec.active) return;
  spec_on_partial(*st, [=](Backend& be, int64_t n) {
    std::vector<int64_t> shape = v.shape();
    shape[0] = n;
    Tensor out = be.alloc(shape);
    be.kda_rule(out, q.slice(0, n), k.slice(0, n), v.slice(0, n), g.slice(0, n), beta.slice(0, n), *slot,
                false);
  });
}

}  // namespace bloomery
