// The measuring part of `bloomery bench` (see bench_core.h).
#include "tools/bench_core.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"
#include "models/forward_step.h"
#include "runtime/spec_draft.h"
#include "tools/bench_spec.h"

namespace bloomery::tools {

namespace {

using Clock = std::chrono::steady_clock;

// Rows a verify may have: the pending token and up to the server's most drafts (--spec-draft-n-max ≤ 8).
constexpr int64_t kSpecMaxRows = 9;
// Room a pool sequence keeps past its decode tokens: the widest verify.
constexpr int64_t kRoomSlack = 16;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

class Runner {
 public:
  Runner(Backend& be, Model& m, const BenchHooks& h, const BenchParams& p, StepEngine* steps)
      : be_(be),
        m_(m),
        steps_(steps),
        h_(h),
        p_(p),
        rng_(p.seed),
        spec_rng_(p.seed + 1),
        dist_(0, static_cast<int32_t>(std::max<int64_t>(1, m.info().vocab_size) - 1)),
        queue_drafts_(!p.spec_rows.empty() && m.info().has_draft) {}

  std::vector<int32_t> tokens(int64_t n, std::mt19937* rng = nullptr) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = dist_(rng ? *rng : rng_);
    return t;
  }

  // Consumes ids in ubatch chunks; returns the last chunk's logits (last row). draft: the draft layer
  // catches up after each chunk, as the server's prompt does when drafting (runtime/spec_draft.h).
  Tensor prefill(SequenceState& st, std::span<const int32_t> ids, bool draft = false) {
    const int64_t ub = p_.ubatch > 0 ? p_.ubatch : static_cast<int64_t>(ids.size());
    Tensor logits;
    for (size_t i = 0; i < ids.size(); i += static_cast<size_t>(ub)) {
      const size_t n = std::min(ids.size() - i, static_cast<size_t>(ub));
      if (steps_) {
        const Model::BatchEntry e{&st, ids.subspan(i, n), false};
        std::vector<Tensor> r = via_steps(std::span(&e, 1), i + n == ids.size());
        if (!r.empty()) logits = r[0];
      } else {
        ForwardResult r = m_.forward(be_, st, ids.subspan(i, n), false);
        if (draft) draft_feed(m_, be_, st, r.hidden, ids.subspan(i, n), true);
        logits = r.logits;
      }
    }
    return logits;
  }

  // A forward through the step engine (the ranks' path): every entry's last-row logits, uploaded again so
  // that the greedy hook and the finiteness check read them as they read the model's.
  std::vector<Tensor> via_steps(std::span<const Model::BatchEntry> entries, bool want_logits) {
    std::vector<StepItem> items(entries.size());
    for (size_t i = 0; i < items.size(); ++i) {
      items[i].state = entries[i].state;
      items[i].ids = entries[i].ids;
      items[i].want_logits = want_logits;
    }
    steps_->forward(items);
    std::vector<Tensor> out;
    for (StepItem& it : items) {
      if (!it.error.empty()) raise("E_BENCH_STEP", Where{"", "", "--tp"}, "a step every rank ran", it.error);
      if (want_logits) out.push_back(be_.upload(it.logits, {1, static_cast<int64_t>(it.logits.size())}));
    }
    return out;
  }

  void release(std::vector<std::unique_ptr<SequenceState>>& states) {
    if (steps_)
      for (auto& s : states) steps_->release(std::move(s));
    states.clear();
  }

  std::unique_ptr<SequenceState> fresh(int64_t depth, int64_t room, bool draft = false) {
    auto st =
        steps_ ? steps_->new_state(depth + room + kRoomSlack) : m_.new_state(be_, depth + room + kRoomSlack);
    if (depth > 0) prefill(*st, tokens(depth), draft);
    return st;
  }

  // One pp repeat: C sequences at `depth` (untimed), then the C prompts timed up to the first sampled ids.
  void pp(BenchRow& row) {
    std::vector<std::unique_ptr<SequenceState>> seqs;
    for (int64_t i = 0; i < row.conc; ++i) seqs.push_back(fresh(row.depth, row.tokens));
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t i = 0; i < row.conc; ++i) prompts.push_back(tokens(row.tokens));
    h_.sync();
    const auto t0 = Clock::now();
    std::vector<Tensor> logits;
    if (row.conc == 1) {
      logits.push_back(prefill(*seqs[0], prompts[0]));
    } else {
      // The C prompts share each forward_batch call, chunk by chunk.
      const int64_t ub = p_.ubatch > 0 ? p_.ubatch : row.tokens;
      for (int64_t c0 = 0; c0 < row.tokens; c0 += ub) {
        const int64_t n = std::min(ub, row.tokens - c0);
        std::vector<Model::BatchEntry> entries;
        for (int64_t i = 0; i < row.conc; ++i)
          entries.push_back({seqs[i].get(), std::span<const int32_t>(prompts[i]).subspan(c0, n), false});
        logits.clear();
        if (steps_) {
          logits = via_steps(entries, c0 + n == row.tokens);
          continue;
        }
        for (ForwardResult& r : m_.forward_batch(be_, entries)) logits.push_back(r.logits);
      }
    }
    (void)h_.greedy(logits);
    h_.sync();
    const double s = since(t0);
    row.ms.push_back(s * 1e3);
    row.tps.push_back(static_cast<double>(row.conc * row.tokens) / s);
    row.finite = row.finite && last_row_finite(be_, logits.back());
    release(seqs);
  }

  // The depth pool holds at least `c` sequences at depth d (each prefilled untimed, one after another).
  void grow_pool(int64_t c, int64_t depth, int64_t room) {
    while (static_cast<int64_t>(pool_.size()) < c) pool_.push_back(fresh(depth, room, queue_drafts_));
  }
  void drop_pool() { release(pool_); }
  ~Runner() { release(pool_); }

  // One tg repeat on the first C sequences of the pool: n batched decode steps, greedy on the device.
  void tg(BenchRow& row) {
    std::vector<int32_t> ids = tokens(row.conc);
    h_.sync();
    const auto t0 = Clock::now();
    std::vector<Tensor> logits;
    for (int64_t j = 0; j < row.tokens; ++j) {
      const auto t1 = Clock::now();
      std::vector<Model::BatchEntry> entries;
      for (int64_t i = 0; i < row.conc; ++i)
        entries.push_back({pool_[i].get(), std::span<const int32_t>(&ids[i], 1), false});
      std::vector<ForwardResult> res;
      logits.clear();
      if (steps_) {
        logits = via_steps(entries, true);
      } else {
        res = forward_step(m_, be_, entries);
        for (ForwardResult& r : res) logits.push_back(r.logits);
      }
      const int32_t fed = ids[0];
      ids = h_.greedy(logits);  // the ids come back to the host: the step is complete on the device
      h_.sync();
      row.ms.push_back(since(t1) * 1e3);
      if (h_.on_tg_step) h_.on_tg_step(logits);
      // The draft rows start from the queue a drafting server keeps (bookkeeping here, no compute).
      if (queue_drafts_ && row.conc == 1)
        draft_feed(m_, be_, *pool_[0], res[0].hidden, std::span(&fed, 1), false);
    }
    row.tps.push_back(static_cast<double>(row.conc * row.tokens) / since(t0));
    row.finite = row.finite && last_row_finite(be_, logits.back());
    row.depth_end = pool_[0]->pos;
  }

  // After a C = 1 tg repeat: `samples` verifies of each width and draft steps on the pool's first sequence,
  // at the depth the tg reached; every verify is rolled back to it (bench_spec.h).
  void spec(std::vector<BenchRow>& rows, int64_t samples) {
    SequenceState& st = *pool_[0];
    if (queue_drafts_) draft_ready(be_, m_, st);
    for (BenchRow& r : rows) {
      if (r.skipped) continue;
      if (r.ms.empty()) r.depth = st.pos;
      for (int64_t i = 0; i < samples; ++i) {
        const VerifyTiming t = r.test.rfind("draft", 0) == 0
                                   ? time_draft(be_, m_, h_, st, tokens(1, &spec_rng_)[0])
                                   : time_verify(be_, m_, h_, st, tokens(r.tokens, &spec_rng_));
        r.ms.push_back(t.ms);
        r.rollback_ms.push_back(t.rollback_ms);
        r.replayed += t.replayed ? 1 : 0;
        r.finite = r.finite && t.finite;
      }
      r.depth_end = st.pos;
    }
  }

 private:
  Backend& be_;
  Model& m_;
  StepEngine* steps_;
  const BenchHooks& h_;
  const BenchParams& p_;
  std::mt19937 rng_;
  std::mt19937 spec_rng_;  // the spec rows' ids: the tg rows feed the same ids with or without them
  std::uniform_int_distribution<int32_t> dist_;
  const bool queue_drafts_;  // spec rows on a model with a draft layer
  std::vector<std::unique_ptr<SequenceState>> pool_;
};

}  // namespace

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, i == 0 ? 0 : i - 1)];
}

bool last_row_finite(Backend& backend, const Tensor& logits) {
  if (!logits.defined()) return false;
  const Tensor last = logits.view({logits.rows(), logits.cols()}).slice(logits.rows() - 1, 1);
  for (float x : backend.download(last))
    if (!std::isfinite(x)) return false;
  return true;
}

BenchHooks host_hooks(Backend& backend) {
  BenchHooks h;
  h.sync = [] {};
  h.greedy = [&backend](std::span<const Tensor> logits) { return backend.argmax_last_rows(logits); };
  return h;
}

void check_params(const BenchParams& p) {
  for (const auto* v : {&p.ps, &p.ns, &p.ds, &p.pp_ds})
    for (int64_t x : *v)
      if (x < 0) raise("E_BENCH_ARGS", Where{"", "", "-p/-n/-d"}, "non-negative values", std::to_string(x));
  for (int64_t c : p.cs)
    if (c < 1) raise("E_BENCH_ARGS", Where{"", "", "-c"}, "at least 1 sequence", std::to_string(c));
  for (int64_t c : p.pp_cs)
    if (c < 1) raise("E_BENCH_ARGS", Where{"", "", "-c"}, "at least 1 sequence", std::to_string(c));
  if (p.repeats < 1)
    raise("E_BENCH_ARGS", Where{"", "", "-r"}, "at least 1 repetition", std::to_string(p.repeats));
  for (int64_t k : p.spec_rows)
    if (k < 2 || k > kSpecMaxRows)
      raise("E_BENCH_ARGS", Where{"", "", "--spec-rows"},
            "verify rows 2 … " + std::to_string(kSpecMaxRows) + " (the pending token + 1 … 8 drafts)",
            std::to_string(k));
  if (p.spec_rows.empty()) return;
  if (std::find(p.cs.begin(), p.cs.end(), 1) == p.cs.end())
    raise("E_BENCH_ARGS", Where{"", "", "--spec-rows"}, "-c including 1 (the rows run with the C = 1 tg row)",
          "no 1 in -c");
  if (p.profile_tg)  // the profiler's range (and the per-op times) would take the spec rows' ops as tg steps'
    raise("E_BENCH_ARGS", Where{"", "", "--spec-rows"}, "no --profile-tg / BLOOMERY_CUDA_OP_TIMES", "both");
}

std::vector<BenchRow> run_bench_grid(Backend& backend, Model& model, const BenchHooks& hooks,
                                     const BenchParams& p, const std::function<void(const BenchRow&)>& on_row,
                                     StepEngine* steps) {
  check_params(p);
  // The spec rows are measured on one rank (not over a TP step engine yet).
  if (steps && !p.spec_rows.empty())
    raise("E_BENCH_ARGS", Where{"", "", "--spec-rows"}, "one rank (no --tp / --nodes)", "tensor parallel");
  // The spec rows that run with a C = 1 tg row: skipped with it, the draft row also without a draft layer.
  auto spec_rows_of = [&](const BenchRow& tg) {
    std::vector<BenchRow> out;
    if (tg.conc != 1 || p.spec_rows.empty()) return out;
    for (int64_t k : p.spec_rows) {
      BenchRow s = tg;
      s.test = "verify" + std::to_string(k);
      s.tokens = k;
      out.push_back(s);
    }
    BenchRow s = tg;
    s.test = "draft";
    s.tokens = 1;
    if (!model.info().has_draft && !s.skipped) {
      s.skipped = true;
      s.skip_reason = "no MTP/NextN draft layer";
    }
    out.push_back(s);
    for (BenchRow& r : out) r.ref = tg.test;
    return out;
  };

  Runner run(backend, model, hooks, p, steps);
  if (p.warmup) {
    BenchRow w;
    w.tokens = 8;
    run.pp(w);
    w.tokens = 4;
    run.grow_pool(1, 0, 8);
    run.tg(w);
    // Three of each spec row: a CUDA graph key's first step is its eager warm-up, the second instantiates.
    std::vector<BenchRow> ws = spec_rows_of(w);
    run.spec(ws, 3);
    run.drop_pool();
  }
  std::vector<int64_t> cs = p.cs;
  std::sort(cs.begin(), cs.end());
  int64_t tg_total = 0;  // decode tokens one pool sequence may take: every tg row, every repeat
  for (int64_t n : p.ns) tg_total += n * p.repeats * static_cast<int64_t>(cs.size());

  std::vector<BenchRow> rows;
  const auto t_start = Clock::now();
  auto out_of_time = [&] { return p.max_seconds > 0 && since(t_start) > p.max_seconds; };
  auto finish = [&](BenchRow& r, Clock::time_point t0) {
    r.seconds = since(t0);
    rows.push_back(r);
    if (on_row) on_row(rows.back());
  };
  // A row about to run; skipped when the time budget is spent.
  auto start_row = [&](const char* kind, int64_t tokens, int64_t d, int64_t c) {
    BenchRow r;
    r.test = kind + std::to_string(tokens);
    r.tokens = tokens, r.depth = d, r.conc = c;
    r.skipped = out_of_time();
    if (r.skipped) r.skip_reason = "--max-seconds";
    return r;
  };
  for (int64_t d : p.pp_ds.empty() ? p.ds : p.pp_ds)
    for (int64_t c : p.pp_cs.empty() ? p.cs : p.pp_cs)
      for (int64_t pn : p.ps) {
        if (pn == 0) continue;
        const auto t0 = Clock::now();
        BenchRow r = start_row("pp", pn, d, c);
        const bool ab = !p.ab.empty() && hooks.set_ab;  // prompts are never graph steps: --ab only
        BenchRow g = r;
        g.test += "+" + p.ab;
        auto ab_round = [&](BenchRow& main_row, BenchRow& candidate_row) {
          hooks.set_ab(false);
          run.pp(main_row);
          hooks.set_ab(true);
          run.pp(candidate_row);
          hooks.set_ab(false);
        };
        // One untimed round first: one-time costs (a library's handle and lazily loaded kernels, heuristics
        // per shape) stay out of the timed rounds.
        if (ab && !r.skipped) {
          BenchRow scratch = r;
          ab_round(scratch, scratch);
        }
        const bool profiled = p.profile_pp && hooks.profile_range && !r.skipped;
        if (profiled) hooks.profile_range(true);
        for (int i = 0; i < p.repeats && !r.skipped; ++i) {
          if (ab)
            ab_round(r, g);
          else
            run.pp(r);
        }
        if (profiled) hooks.profile_range(false);
        finish(r, t0);
        if (ab) finish(g, t0);
      }
  for (int64_t d : p.ds) {
    for (int64_t c : cs)
      for (int64_t n : p.ns) {
        if (n == 0) continue;
        const auto t0 = Clock::now();
        BenchRow r = start_row("tg", n, d, c);
        const std::function<void(bool)>& toggle = p.graphs_ab ? hooks.set_step_graphs : hooks.set_ab;
        const bool ab = (p.graphs_ab || !p.ab.empty()) && toggle;
        const std::string candidate = p.graphs_ab ? std::string("+graphs") : "+" + p.ab;  // B rows' suffix
        BenchRow g = r;
        g.test += candidate;
        std::vector<BenchRow> spec = spec_rows_of(r);
        // With --ab the spec rows run in both settings too, each against its own tg row.
        std::vector<BenchRow> spec_g = ab ? spec_rows_of(g) : std::vector<BenchRow>{};
        for (BenchRow& s : spec_g) s.test += candidate;
        if (!r.skipped) {
          run.grow_pool(c, d, tg_total * (ab ? 2 : 1));
          const bool profiled = p.profile_tg && hooks.profile_range;
          if (profiled) hooks.profile_range(true);
          for (int i = 0; i < p.repeats; ++i) {
            if (ab) toggle(false);
            run.tg(r);
            if (ab) {
              toggle(true);
              run.tg(g);
              toggle(false);
            }
            if (!spec.empty()) run.spec(spec, n);  // n of each, at the depth this repeat reached
            if (!spec_g.empty()) {
              toggle(true);
              run.spec(spec_g, n);
              toggle(false);
            }
          }
          if (profiled) hooks.profile_range(false);
        }
        finish(r, t0);
        if (ab) finish(g, t0);  // A and B repeats interleave on the same sequences, over the same depths
        spec.insert(spec.end(), spec_g.begin(), spec_g.end());
        for (BenchRow& s : spec) {
          const double tg_ms = percentile((s.ref == g.test ? g : r).ms, 0.5);
          s.ratio = tg_ms > 0 ? percentile(s.ms, 0.5) / tg_ms : 0.0;
          const int64_t N = static_cast<int64_t>(s.ms.size());
          s.step = s.replayed == 0   ? "eager"
                   : s.replayed == N ? "graph"
                                     : "graph " + std::to_string(s.replayed) + "/" + std::to_string(N);
          finish(s, t0);
        }
      }
    run.drop_pool();
  }
  return rows;
}

}  // namespace bloomery::tools
