// The slot rows of `bloomery bench` (see bench_slots.h).
#include "tools/bench_slots.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <random>

#include "core/error.h"
#include "runtime/sampler.h"

namespace bloomery::tools {

namespace {

using Clock = std::chrono::steady_clock;

// Untimed: the first round of each kind after priming (a CUDA graph key's first steps run eagerly).
constexpr int64_t kWarmTokens = 8;

struct Round {
  double seconds = 0;
  int64_t tokens = 0;
  DraftCounts drafts;
};

class SlotRunner {
 public:
  SlotRunner(Backend& be, Model& m, const BenchParams& p, const SlotBenchParams& s, int64_t c, int64_t room)
      : engine_(m, be), rng_(p.seed + 2) {
    const DraftOptions d = s.spec.draft_options();
    if (d.source == DraftOptions::Source::Mtp && !m.info().has_draft)
      raise("E_SPEC_NO_DRAFT", Where{"", "", "--spec-type"}, "a model with its MTP/NextN draft layer",
            m.info().family + " without one", "bench with --spec-type ngram-simple or none");
    engine_.enable_drafting(d);
    SchedulerConfig cfg;
    cfg.n_slots = static_cast<int>(c);
    cfg.n_ctx_slot = room;
    if (p.ubatch > 0) cfg.n_ubatch = p.ubatch;
    cfg.spec = s.spec.config();
    // Greedy: the engine picks each token (on the card only ids come back); the host's argmax otherwise.
    sched_ = std::make_unique<Scheduler>(
        engine_, cfg,
        [](std::span<const float> logits, const SamplingParams&, std::span<const int32_t>, std::mt19937_64&) {
          return SampledToken{argmax(logits)};
        });
    history_.resize(static_cast<size_t>(c));
  }

  // d tokens of prompt per slot (at least one), read untimed with one generated token: a different stretch
  // of the text per slot (997 tokens apart, as the trained models' acceptance reference takes its prompts),
  // or random ids.
  void prime(int64_t depth, const SlotBenchParams& s, int64_t V) {
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(std::max<int64_t>(V, 1) - 1));
    for (size_t i = 0; i < history_.size(); ++i) {
      history_[i].clear();
      for (int64_t t = 0; t < std::max<int64_t>(depth, 1); ++t)
        history_[i].push_back(s.text.empty() ? id(rng_)
                                             : s.text[(i * 997 + static_cast<size_t>(t)) % s.text.size()]);
    }
    round(1, false);
  }

  // One round: every slot's request of n greedy tokens continuing its sequence, all at once; drafting or
  // not (speculative.n_max 0).
  Round round(int64_t n, bool drafting) {
    const size_t C = history_.size();
    std::vector<std::promise<FinishInfo>> done(C);
    std::vector<std::vector<int32_t>> out(C);
    std::vector<GenRequest> reqs;
    for (size_t i = 0; i < C; ++i) {
      GenRequest r;
      r.prompt = history_[i];
      r.n_predict = n;
      r.sampling.temperature = 0.0;
      r.ignore_eos = true;
      r.id_slot = static_cast<int>(i);
      if (!drafting) r.spec_n_max = 0;
      r.on_token = [&out, i](const SampledToken& t) {
        out[i].push_back(t.id);
        return true;
      };
      r.on_finish = [&done, i](const FinishInfo& f) { done[i].set_value(f); };
      reqs.push_back(std::move(r));
    }
    const DraftCounts before = sched_->stats().drafts;
    const auto t0 = Clock::now();
    sched_->submit_all(std::move(reqs));
    Round r;
    for (size_t i = 0; i < C; ++i) {
      const FinishInfo f = done[i].get_future().get();
      if (!f.error.empty())
        raise("E_BENCH_STEP", Where{"", "", "--spec-type"}, "a finished request", f.error);
      r.tokens += f.n_predicted;
    }
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    const DraftCounts after = sched_->stats().drafts;
    for (int k = 0; k < kMaxDrafts; ++k) {
      r.drafts.drafted[k] = after.drafted[k] - before.drafted[k];
      r.drafts.accepted[k] = after.accepted[k] - before.accepted[k];
    }
    r.drafts.rounds = after.rounds - before.rounds;
    for (size_t i = 0; i < C; ++i) history_[i].insert(history_[i].end(), out[i].begin(), out[i].end());
    return r;
  }

  int64_t depth() const { return static_cast<int64_t>(history_[0].size()); }

 private:
  ModelStepEngine engine_;
  std::unique_ptr<Scheduler> sched_;
  std::mt19937 rng_;
  std::vector<std::vector<int32_t>> history_;
};

}  // namespace

std::vector<BenchRow> run_slot_rows(Backend& backend, Model& model, const BenchParams& p,
                                    const SlotBenchParams& s,
                                    const std::function<void(const BenchRow&)>& on_row) {
  std::vector<BenchRow> rows;
  const std::string suffix = (s.spec.ngram() ? "+ngram" : "+mtp") + std::to_string(s.spec.n_max);
  std::vector<int64_t> cs = p.cs;
  std::sort(cs.begin(), cs.end());
  for (int64_t d : p.ds)
    for (int64_t c : cs)
      for (int64_t n : p.ns) {
        if (n == 0) continue;
        const auto t0 = Clock::now();
        // Room for the prompt, the warm-up rounds, every repeat of both kinds and a verify's widest overrun.
        const int64_t room = std::max<int64_t>(d, 1) + 2 + 2 * kWarmTokens + 2 * n * p.repeats + 16;
        SlotRunner run(backend, model, p, s, c, room);
        run.prime(d, s, model.info().vocab_size);
        run.round(kWarmTokens, false);
        run.round(kWarmTokens, true);
        BenchRow off;
        off.test = "tg" + std::to_string(n) + "@slots";
        off.tokens = n, off.depth = run.depth(), off.conc = c, off.slots = true;
        BenchRow on = off;
        on.test = "tg" + std::to_string(n) + suffix;
        on.ref = off.test;
        for (int i = 0; i < p.repeats; ++i)
          for (BenchRow* r : {&off, &on}) {
            const Round x = run.round(n, r == &on);
            r->tps.push_back(static_cast<double>(x.tokens) / x.seconds);
            r->ms.push_back(x.seconds * 1e3 * static_cast<double>(c) / static_cast<double>(x.tokens));
            r->drafts.add(x.drafts);
          }
        off.depth_end = on.depth_end = run.depth();
        const double base = percentile(off.tps, 0.5);
        on.ratio = base > 0 ? percentile(on.tps, 0.5) / base : 0.0;
        for (BenchRow* r : {&off, &on}) {
          r->seconds = std::chrono::duration<double>(Clock::now() - t0).count();
          rows.push_back(*r);
          if (on_row) on_row(rows.back());
        }
      }
  return rows;
}

}  // namespace bloomery::tools
