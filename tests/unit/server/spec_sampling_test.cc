// Sampled requests with drafting, over a scripted engine whose "model" is a fixed bigram table on a small
// vocabulary and whose drafter proposes (last + 1) mod V: the transition counts of a long sampled run with
// drafts (k = 3) match the table's softmax in a chi-square test, a seeded run equals the same run without
// drafts token for token, and both paths (accepted and rejected drafts) really run.
#include <cmath>
#include <cstdio>
#include <functional>
#include <future>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "runtime/scheduler.h"
#include "server/sampling.h"

using namespace bloomery;

namespace {

constexpr int64_t kV = 4;
// logits[prev][next]
constexpr float kLogits[kV][kV] = {{0.1f, 1.2f, -0.4f, 0.3f},
                                   {-0.2f, 0.0f, 1.0f, 0.4f},
                                   {0.5f, -1.0f, 0.2f, 0.9f},
                                   {1.1f, 0.3f, -0.3f, 0.0f}};

double prob(int prev, int next) {
  double z = 0.0;
  for (int j = 0; j < kV; ++j) z += std::exp(static_cast<double>(kLogits[prev][j]));
  return std::exp(static_cast<double>(kLogits[prev][next])) / z;
}

struct BigramEngine : StepEngine {
  struct St : SequenceState {
    int64_t spec_p0 = -1;
  };
  bool drafts;
  int drafted = 0, rounds = 0;
  explicit BigramEngine(bool d) : drafts(d) {}
  int64_t vocab_size() const override { return kV; }
  std::unique_ptr<SequenceState> new_state(int64_t capacity) override {
    auto s = std::make_unique<St>();
    s->capacity = capacity;
    return s;
  }
  void forward(std::span<StepItem> items) override {
    for (auto& it : items) {
      auto& st = static_cast<St&>(*it.state);
      if (it.speculative) st.spec_p0 = st.pos;
      it.logits.clear();
      const size_t first = it.speculative ? 0 : it.ids.size() - 1;
      for (size_t j = first; j < it.ids.size(); ++j)
        it.logits.insert(it.logits.end(), kLogits[it.ids[j]], kLogits[it.ids[j]] + kV);
      st.history.insert(st.history.end(), it.ids.begin(), it.ids.end());
      st.pos += static_cast<int64_t>(it.ids.size());
    }
  }
  bool drafting() const override { return drafts; }
  std::vector<int32_t> draft(SequenceState&, int32_t pending, int k) override {
    std::vector<int32_t> d;
    for (int j = 0; j < k; ++j) d.push_back(static_cast<int32_t>((pending + 1 + j) % kV));
    drafted += k;
    rounds++;
    return d;
  }
  void commit(SequenceState& s, int64_t n) override {
    auto& st = static_cast<St&>(s);
    ASSERT_GE(st.spec_p0, 0);
    st.pos = st.spec_p0 + n;
    st.history.resize(static_cast<size_t>(st.pos));
    st.spec_p0 = -1;
  }
};

struct Out {
  std::vector<int32_t> tokens;
  FinishInfo fin;
};

// measured: the adaptive width prices drafts by their measured cost (SpecConfig::measured_cost) instead of
// the prior's; off by default, since most of these runs take microseconds a step and their timing is noise.
Out generate(StepEngine& e, int k, int64_t n, uint64_t seed, bool adaptive = false, double temperature = 1.0,
             bool measured = false, const std::function<void(GenRequest&)>& edit = {}) {
  SchedulerConfig cfg{1, n + 16, 64, 64};
  cfg.spec.n_max = k;
  cfg.spec.adaptive = adaptive;
  cfg.spec.measured_cost = measured;
  Scheduler s(e, cfg, server::sample_token);
  auto out = std::make_shared<Out>();
  std::promise<void> done;
  GenRequest r;
  r.prompt = {0};
  r.n_predict = n;
  r.sampling.temperature = temperature;
  r.sampling.top_k = 0;
  r.sampling.top_p = 1.0;
  r.sampling.min_p = 0.0;
  r.sampling.seed = seed;
  r.on_token = [out](const SampledToken& t) {
    out->tokens.push_back(t.id);
    return true;
  };
  r.on_finish = [out, &done](const FinishInfo& f) {
    out->fin = f;
    done.set_value();
  };
  if (edit) edit(r);
  s.submit(std::move(r));
  done.get_future().wait();
  return *out;
}

}  // namespace

TEST(SpecSampling, TransitionsFollowTheTargetDistribution) {
  BigramEngine e(true);
  const int64_t n = 120000;
  Out o = generate(e, 3, n, 12345);
  ASSERT_EQ(static_cast<int64_t>(o.tokens.size()), n);
  EXPECT_GT(o.fin.draft_n_accepted, 10000);                  // accepted drafts…
  EXPECT_GT(o.fin.draft_n - o.fin.draft_n_accepted, 10000);  // …and rejected ones
  double counts[kV][kV] = {};
  int prev = 0;
  for (int32_t t : o.tokens) {
    counts[prev][t] += 1.0;
    prev = t;
  }
  // Chi-square over the 4 × 4 transitions, 12 degrees of freedom; 32.91 is the 0.1 % critical value. With
  // ~30,000 draws per row a 2 % absolute skew of one transition adds about 50 to the statistic.
  double chi2 = 0.0;
  for (int a = 0; a < kV; ++a) {
    double row = 0.0;
    for (int b = 0; b < kV; ++b) row += counts[a][b];
    for (int b = 0; b < kV; ++b) {
      const double expect = row * prob(a, b);
      chi2 += (counts[a][b] - expect) * (counts[a][b] - expect) / expect;
    }
  }
  std::printf("    chi-square %.2f (12 dof, 0.1 %% critical 32.91); drafted %lld accepted %lld\n", chi2,
              static_cast<long long>(o.fin.draft_n), static_cast<long long>(o.fin.draft_n_accepted));
  EXPECT_LT(chi2, 32.91);
}

TEST(SpecSampling, SeededRunEqualsTheRunWithoutDrafts) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    BigramEngine off(false), on(true);
    Out a = generate(off, 0, 500, seed), b = generate(on, 3, 500, seed);
    EXPECT_EQ(a.tokens, b.tokens) << "seed " << seed;
    EXPECT_GT(b.fin.draft_n_accepted, 0);
  }
}

// The acceptance rule itself: a drafter that always proposes one fixed token sees it accepted at the rate
// p(token | prev) (here from state 0 after the prompt token 0: p(1 | 0)).
TEST(SpecSampling, FirstDraftAcceptedAtItsTargetProbability) {
  struct Fixed : BigramEngine {
    Fixed() : BigramEngine(true) {}
    std::vector<int32_t> draft(SequenceState&, int32_t, int k) override { return {1}; }
  };
  int accepted = 0, trials = 4000;
  for (int i = 0; i < trials; ++i) {
    Fixed e;
    Out o = generate(e, 1, 3, 1000 + i);
    accepted += static_cast<int>(o.fin.draft_n_accepted);
    (void)o;
  }
  // The first verify's pending token is drawn from p(· | 0); its draft 1 is accepted with p(1 | pending).
  double expect = 0.0;
  for (int x = 0; x < kV; ++x) expect += prob(0, x) * prob(x, 1);
  const double rate = static_cast<double>(accepted) / trials, sd = std::sqrt(expect * (1 - expect) / trials);
  std::printf("    acceptance %.4f, expected %.4f (sd %.4f)\n", rate, expect, sd);
  EXPECT_LT(std::fabs(rate - expect), 4 * sd);
}

// Adaptive width: drafts that are always rejected bring a slot down to width 0 (a one-draft probe now and
// then); drafts that are always accepted keep it at n_max. Greedy, so the argmax chain is known.
// llama-server's per-request `speculative.n_max` / `.n_min` (GenRequest::spec_n_max / spec_n_min) lower the
// server's drafting for that request only: 0 drafts none, 1 at most one a round, and a minimum above what the
// drafter proposes verifies none; the sampled tokens stay those of the run without drafts.
TEST(SpecSampling, PerRequestDraftLimitsLowerTheServers) {
  BigramEngine none_e(true), one_e(true), min_e(true), plain_e(false);
  const Out plain = generate(plain_e, 0, 200, 7);
  const Out none = generate(none_e, 3, 200, 7, false, 1.0, false, [](GenRequest& r) { r.spec_n_max = 0; });
  EXPECT_EQ(none.fin.draft_n, 0);
  EXPECT_EQ(none_e.rounds, 0) << "the engine was asked for drafts";
  const Out one = generate(one_e, 3, 200, 7, false, 1.0, false, [](GenRequest& r) { r.spec_n_max = 1; });
  EXPECT_GT(one_e.rounds, 0);
  EXPECT_EQ(one_e.drafted, one_e.rounds) << "a round drafted more than the request's n_max";
  // The engine proposes k = 3 (the server's n_max), fewer than the request's n_min of 4: nothing is verified.
  const Out min = generate(min_e, 3, 200, 7, false, 1.0, false, [](GenRequest& r) { r.spec_n_min = 4; });
  EXPECT_EQ(min.fin.draft_n, 0);
  for (const Out* o : {&none, &one, &min}) EXPECT_EQ(o->tokens, plain.tokens);
}

TEST(SpecSampling, AdaptiveWidthFollowsAcceptance) {
  auto argmax_next = [](int32_t x) {
    int best = 0;
    for (int j = 1; j < kV; ++j)
      if (kLogits[x][j] > kLogits[x][best]) best = j;
    return static_cast<int32_t>(best);
  };
  struct Drafter : BigramEngine {
    std::function<int32_t(int32_t)> next;
    bool right;
    Drafter(std::function<int32_t(int32_t)> f, bool r) : BigramEngine(true), next(std::move(f)), right(r) {}
    std::vector<int32_t> draft(SequenceState&, int32_t pending, int k) override {
      std::vector<int32_t> d;
      int32_t x = pending;
      for (int j = 0; j < k; ++j) {
        const int32_t want = next(x);
        x = right ? want : static_cast<int32_t>((want + 1) % kV);
        d.push_back(x);
        if (!right) x = want;
      }
      drafted += k;
      rounds++;
      return d;
    }
  };
  Drafter bad(argmax_next, false), good(argmax_next, true);
  Out b = generate(bad, 4, 400, 1, true, 0.0), g = generate(good, 4, 400, 1, true, 0.0);
  // Rejected: after a few rounds only probes (one draft every 16 steps) remain.
  EXPECT_LT(bad.rounds, 60) << "verifies with drafts: " << bad.rounds;
  EXPECT_LT(b.fin.draft_n, 80);
  EXPECT_EQ(b.fin.draft_n_accepted, 0);
  // Accepted: every round drafts 4 (but the last ones, capped by the tokens left).
  EXPECT_GE(g.fin.draft_n_accepted, 300);
  EXPECT_LE(good.rounds, 400 / 5 + 2);
  EXPECT_EQ(b.tokens, g.tokens);  // greedy either way
}

// A new request's adaptive width starts from the acceptance the server measured over its recent drafts, not
// from an optimistic 1: after one request whose drafts are all rejected, the next one verifies only probes
// (one draft every probe_every steps) instead of relearning over its first rounds.
TEST(SpecSampling, ANewRequestStartsFromTheServersMeasuredAcceptance) {
  struct Wrong : BigramEngine {
    Wrong() : BigramEngine(true) {}
    std::vector<int32_t> draft(SequenceState&, int32_t pending, int k) override {
      rounds++;
      drafted += k;
      // Greedy picks follow kLogits' argmax; a draft of the next row's argmax + 1 is always rejected.
      std::vector<int32_t> d;
      int32_t x = pending;
      for (int j = 0; j < k; ++j) {
        int best = 0;
        for (int v = 1; v < kV; ++v)
          if (kLogits[x][v] > kLogits[x][best]) best = v;
        d.push_back(static_cast<int32_t>((best + 1) % kV));
        x = static_cast<int32_t>(best);
      }
      return d;
    }
  } e;
  SchedulerConfig cfg{1, 256, 64, 64};
  cfg.spec.n_max = 3;
  Scheduler s(e, cfg, server::sample_token);
  std::vector<int> rounds;
  for (int r = 0; r < 2; ++r) {
    const int before = e.rounds;
    std::promise<void> done;
    GenRequest q;
    q.prompt = {0};
    q.n_predict = 48;
    q.sampling.temperature = 0.0;
    q.on_finish = [&](const FinishInfo&) { done.set_value(); };
    s.submit(std::move(q));
    done.get_future().wait();
    rounds.push_back(e.rounds - before);
  }
  EXPECT_GE(rounds[0], 10) << "the first request did not start optimistic";
  EXPECT_LE(rounds[1], 48 / cfg.spec.probe_every + 1) << "the second request relearned from an optimistic start";
}

// The measured draft cost (runtime/draft_cost.h) over an engine whose step takes 3 ms plus `row_ms` for each
// drafted row it verifies, with drafts that are always right: where a row costs little the slot drafts nearly
// every step at full width; where a row costs twice a plain step even perfect drafts lose, and after the
// first steps (three plain ones timed, two drafting ones at the prior's cost) only the probes draft. The
// margins are wide (a step's time would have to be off by a factor of several) so a loaded machine passes.
TEST(SpecSampling, MeasuredDraftCostTurnsDraftingOffWhereItLoses) {
  auto argmax_next = [](int32_t x) {
    int best = 0;
    for (int j = 1; j < kV; ++j)
      if (kLogits[x][j] > kLogits[x][best]) best = j;
    return static_cast<int32_t>(best);
  };
  struct Timed : BigramEngine {
    double row_ms;
    std::function<int32_t(int32_t)> next;
    Timed(double r, std::function<int32_t(int32_t)> f) : BigramEngine(true), row_ms(r), next(std::move(f)) {}
    void forward(std::span<StepItem> items) override {
      double ms = 3.0;
      for (const auto& it : items)
        if (it.speculative) ms += row_ms * static_cast<double>(it.ids.size() - 1);
      std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(ms * 1000)));
      BigramEngine::forward(items);
    }
    std::vector<int32_t> draft(SequenceState&, int32_t pending, int k) override {
      std::vector<int32_t> d;
      for (int32_t x = pending; static_cast<int>(d.size()) < k;) d.push_back(x = next(x));
      drafted += k;
      rounds++;
      return d;
    }
  };
  const int64_t n = 120;
  Timed cheap(0.1, argmax_next), dear(6.0, argmax_next);
  const Out c = generate(cheap, 3, n, 1, true, 0.0, true), d = generate(dear, 3, n, 1, true, 0.0, true);
  std::printf("    cheap rows: %lld drafted, %lld accepted; dear rows: %lld drafted, %lld accepted\n",
              static_cast<long long>(c.fin.draft_n), static_cast<long long>(c.fin.draft_n_accepted),
              static_cast<long long>(d.fin.draft_n), static_cast<long long>(d.fin.draft_n_accepted));
  EXPECT_EQ(c.tokens, d.tokens);  // greedy either way
  // Cheap rows: three plain steps, then rounds of 3 accepted drafts (4 tokens a step).
  EXPECT_GE(c.fin.draft_n_accepted, 75)
      << "drafted " << c.fin.draft_n;  // 87 when every step after them drafts
  // Dear rows: a few drafts at the prior's cost, then one-draft probes every 16 plain steps.
  EXPECT_LE(d.fin.draft_n, 30) << "accepted " << d.fin.draft_n_accepted;
  EXPECT_GT(d.fin.draft_n, 0) << "the probes still draft";
}
