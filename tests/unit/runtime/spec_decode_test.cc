// Speculative decoding with the checkpoints' own draft layers, on every fixture folder:
//  * rollback: after verify rounds with partial acceptance (Model::commit), a state equals, part by part
//    (recurrent, conv, PLE context exactly; KV / latent / indexer / draft caches over their live rows), the
//    state of a run that fed only the accepted tokens one at a time; checkpoint/restore and truncate too;
//  * lossless greedy: the scheduler's output with drafting at k = 1, 3, 8 equals drafting off, token for
//    token, with a hook that forces both accepted and rejected drafts (random fixtures mostly reject);
//  * an EOS inside an accepted run ends the request where drafting off ends it.
// BLOOMERY_SPEC_BACKEND=cuda runs the same tests on the card (scripts/gpu/mtp.sh): its multi-row kernels
// order sums by row count, so state parts agree within device_state_tolerance of their largest value instead
// of bit for bit, and runs with and without drafts agree up to the first token whose pick the rounding could
// move (a greedy top-2 margin, or a sampled draw's distance to its interval's edge, below what the measured
// logit noise allows: SpecDecode::device_noise). BLOOMERY_SPEC_TOKENS sets the greedy length (default 256).
#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "../../common/fixture_folders.h"
#include "../../common/spec_backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/select/backend_choice.h"
#include "models/model_loader.h"
#include "runtime/sampler.h"
#include "runtime/scheduler.h"
#include "runtime/spec_draft.h"

namespace bloomery {
namespace {

// One forward of `ids` on `st` with logits (every row's when `spec`, an MTP verify); returns them.
std::vector<float> feed_one(ModelStepEngine& e, SequenceState& st, std::vector<int32_t> ids, bool spec) {
  StepItem it;
  it.state = &st;
  it.ids = std::move(ids);
  it.want_logits = true;
  it.speculative = spec;
  std::vector<StepItem> items{it};
  e.forward(items);
  EXPECT_EQ(items[0].error, "");
  return items[0].logits;
}

namespace fs = std::filesystem;

std::string backend_name() {
  return spec_backend_name();
}

// A device backend's state tolerance, relative to a part's largest value. f32 caches: the row-count-dependent
// sum orders of the multi-row kernels (1e-4). BF16 caches: such a difference can move a cache element's
// rounding by one BF16 step (at most 2^-8 of the part's largest value), and every later layer and the state
// it writes carry that step, so 2^-6. The same for a backend whose prompt-sized products round their
// activations to BF16 (Backend::rounds_prompt_activations): a pass's product rows, not the tokens, decide the
// rounding (the draft layer's fc_h runs on 4 rows a token), so states fed in different passes differ by such
// steps. A row rolled back wrongly differs by the values themselves.
float device_state_tolerance(bool bf16_rounding) {
  return bf16_rounding ? 1.0f / 64 : 1e-4f;
}

int greedy_tokens() {
  const char* e = std::getenv("BLOOMERY_SPEC_TOKENS");
  return e && *e ? std::atoi(e) : 256;
}

std::vector<int32_t> tokens(int64_t vocab, int n, uint32_t seed) {
  std::vector<int32_t> r;
  for (int i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    r.push_back(static_cast<int32_t>((seed >> 8) % static_cast<uint32_t>(vocab)));
  }
  return r;
}

uint32_t mix(uint64_t a, uint64_t b) {
  uint64_t h = (a * 0x9E3779B97F4A7C15ull) ^ (b + 0x632BE59BD9B4E019ull);
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  return static_cast<uint32_t>(h >> 32);
}

class SpecDecode : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "none") GTEST_SKIP() << "no fixture folders";
    // "<folder>@bf16kv": the same folder with its K/V caches in BF16 (-ctk bf16), whose rows roll back
    // by position like the f32 ones.
    const std::string param = GetParam();
    const size_t at = param.find('@');
    const fs::path dir = testing_fixtures::models_root() / param.substr(0, at);
    LoadOptions load;
    bf16_caches_ = at != std::string::npos;
    dir_ = dir;
    if (bf16_caches_) load.kv_type = ElemType::BF16;
    if (backend_name() != "cpu") {
      const auto missing = missing_family_ops(backend_name(), folder_model_type(dir));
      if (!missing.empty())
        GTEST_SKIP() << backend_name() << " lacks " << missing[0] << " for " << GetParam();
    }
    be_ = backend_name() == "cpu" ? make_cpu_backend(2) : make_backend(backend_name(), 0);
    lm_ = load_model(dir, *be_, load);
    if (!model().info().has_draft) GTEST_SKIP() << GetParam() << " has no draft layer";
  }
  Model& model() { return *lm_->model; }
  Backend& be() { return *be_; }
  float state_tolerance() const {
    return backend_name() == "cpu" ? 0.0f
                                   : device_state_tolerance(bf16_caches_ || be_->rounds_prompt_activations());
  }

  // Logit rows of `ids` teacher-forced on `m`: ids[0, from) as one prompt chunk (or in chunks of
  // `prefix_chunk` tokens), then each later position's row, fed one token at a time (chunk 1) or as verify
  // rows of `chunk` tokens committed whole.
  std::vector<std::vector<float>> forced_rows(Model& m, const std::vector<int32_t>& ids, size_t from,
                                              size_t chunk, size_t prefix_chunk = 0) {
    ModelStepEngine e(m, be());
    auto st = e.new_state(static_cast<int64_t>(ids.size()) + 16);
    const size_t piece = prefix_chunk ? prefix_chunk : from;
    for (size_t at = 0; at < from; at += piece)
      feed_one(e, *st,
               {ids.begin() + static_cast<int64_t>(at),
                ids.begin() + static_cast<int64_t>(std::min(from, at + piece))},
               false);
    const size_t V = static_cast<size_t>(m.info().vocab_size);
    std::vector<std::vector<float>> rows;
    for (size_t at = from; at < ids.size(); at += chunk) {
      const size_t n = std::min(chunk, ids.size() - at);
      const auto l = feed_one(
          e, *st, {ids.begin() + static_cast<int64_t>(at), ids.begin() + static_cast<int64_t>(at + n)},
          chunk > 1);
      if (chunk > 1) e.commit(*st, static_cast<int64_t>(n));
      for (size_t r = 0; r < l.size() / V; ++r) rows.emplace_back(l.begin() + r * V, l.begin() + (r + 1) * V);
    }
    return rows;
  }

  // How far this device's logits move between the two paths a drafted run mixes, measured on `ids` (a prompt
  // of `from` tokens and its continuation), teacher-forced: the largest |dlogit| between rows fed one at a
  // time and the same rows as 4-row verifies, and with BF16 caches also between this model and one with f32
  // caches (a one-step rounding difference upstream can flip a cache element's BF16 rounding, a perturbation
  // of the size the cache's rounding itself makes). A token whose pick is closer than twice that to changing
  // may part.
  // with_prompt_paths: also between the prompt fed whole and fed in 4-token chunks (a resumed prompt cache
  // has its prefix from other steps than a fresh prefill of the same tokens).
  float device_noise(const std::vector<int32_t>& ids, size_t from, bool with_prompt_paths = false) {
    const auto one = forced_rows(model(), ids, from, 1), verify = forced_rows(model(), ids, from, 4);
    const auto worst = [](const std::vector<std::vector<float>>& a,
                          const std::vector<std::vector<float>>& b) {
      float w = 0.0f;
      for (size_t r = 0; r < std::min(a.size(), b.size()); ++r)
        for (size_t v = 0; v < a[r].size(); ++v) w = std::max(w, std::fabs(a[r][v] - b[r][v]));
      return w;
    };
    float noise = worst(one, verify);
    std::printf("    %s: |dlogit| one-row vs verify rows %.3g", GetParam().c_str(), noise);
    if (with_prompt_paths) {
      // A prompt of more rows than the decode-class products take runs the prompt GEMM's own activation
      // rounding (plain BF16 by default on CUDA), which the same positions fed a few rows at a time do not.
      const float prompt = worst(one, forced_rows(model(), ids, from, 1, 4));
      std::printf(", whole prompt vs 4-token chunks %.3g", prompt);
      noise = std::max(noise, prompt);
    }
    if (bf16_caches_) {
      auto f32 = load_model(dir_, be(), LoadOptions{});
      const float cache = worst(one, forced_rows(*f32->model, ids, from, 1));
      std::printf(", BF16 vs f32 caches %.3g", cache);
      noise = std::max(noise, cache);
    }
    std::printf("\n");
    return noise;
  }

  // Greedy generation through the scheduler; k = 0: drafting off.
  struct Run {
    std::vector<int32_t> out;
    std::vector<float> margins;  // each greedy token's lead over the runner-up
    FinishInfo fin;
    DraftCounts counts;
  };
  // An engine whose sampled decodes come back to the host sampler (the CUDA backend would draw them on the
  // card, from its own generator).
  struct HostSampledEngine : ModelStepEngine {
    using ModelStepEngine::ModelStepEngine;
    bool draws_rows() const override { return false; }
  };

  Run generate(const std::vector<int32_t>& prompt, int n_predict, int k,
               std::function<int32_t(int64_t, int, int32_t)> hook, std::vector<int32_t> eos = {},
               float temperature = 0.0f, uint64_t seed = 0, bool ngram = false) {
    HostSampledEngine engine(model(), be());
    if (k > 0) {
      DraftOptions o;
      o.n_max = k;
      if (ngram) o.source = DraftOptions::Source::Ngram;
      o.hook = std::move(hook);
      engine.enable_drafting(o);
    }
    Scheduler sched(engine, config(static_cast<int64_t>(prompt.size()) + n_predict + 8, k),
                    sampler(temperature));
    Run run = submit_wait(sched, prompt, n_predict, std::move(eos), temperature, seed);
    run.counts = sched.stats().drafts;
    return run;
  }

  static SchedulerConfig config(int64_t n_ctx_slot, int k) {
    SchedulerConfig cfg;
    cfg.n_ctx_slot = n_ctx_slot;
    cfg.n_ubatch = 16;  // a few prompt chunks, so the draft layer catches up over chunk borders
    cfg.spec.n_max = k;
    cfg.spec.adaptive = false;  // every round drafts k (the width is what these tests vary)
    return cfg;
  }

  // Greedy, recording each token's lead over the runner-up; or a draw at the temperature (no cuts) from the
  // slot's seeded generator by the inverse of the distribution's CDF in id order, recording how far the
  // uniform fell from its interval's edges, in probability (a pick that rounding cannot move has a lead).
  SampleFn sampler(float temperature) {
    return [this, temperature](std::span<const float> logits, const SamplingParams&, std::span<const int32_t>,
                               std::mt19937_64& rng) {
      SampledToken t;
      if (temperature > 0.0f) {
        const float top = *std::max_element(logits.begin(), logits.end());
        std::vector<double> p(logits.size());
        double sum = 0.0;
        for (size_t v = 0; v < logits.size(); ++v) sum += p[v] = std::exp((logits[v] - top) / temperature);
        const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
        double lo = 0.0;
        size_t v = 0;
        while (v + 1 < p.size() && lo + p[v] / sum <= u) lo += p[v++] / sum;
        t.id = static_cast<int32_t>(v);
        last_margin_ = static_cast<float>(std::min(u - lo, lo + p[v] / sum - u));
        return t;
      }
      t.id = argmax(logits);
      float second = -INFINITY;
      for (size_t v = 0; v < logits.size(); ++v)
        if (static_cast<int32_t>(v) != t.id) second = std::max(second, logits[v]);
      last_margin_ = logits[static_cast<size_t>(t.id)] - second;
      return t;
    };
  }

  // One request through `sched`, waited for.
  Run submit_wait(Scheduler& sched, const std::vector<int32_t>& prompt, int n_predict,
                  std::vector<int32_t> eos, float temperature = 0.0f, uint64_t seed = 0) {
    Run run;
    std::promise<void> done;
    GenRequest req;
    req.prompt = prompt;
    req.n_predict = n_predict;
    req.sampling.temperature = temperature;
    req.sampling.seed = seed;
    req.eos_ids = std::move(eos);
    req.on_token = [&](const SampledToken& t) {
      run.out.push_back(t.id);
      run.margins.push_back(last_margin_);
      return true;
    };
    req.on_finish = [&](const FinishInfo& f) {
      run.fin = f;
      done.set_value();
    };
    sched.submit(std::move(req));
    done.get_future().wait();
    return run;
  }

  // Greedy runs of one prompt by two paths agree token for token up to the first near-tie (where the paths'
  // rounding may pick the other of two almost equal logits).
  void expect_same_up_to_a_near_tie(const Run& got, const Run& fresh, const std::string& what,
                                    float delta = 1e-3f) {
    ASSERT_EQ(got.out.size(), fresh.out.size()) << what;
    size_t same = 0;
    while (same < fresh.out.size() && got.out[same] == fresh.out[same]) ++same;
    if (same < fresh.out.size()) {
      const float margin = std::min(fresh.margins[same], got.margins[same]);
      EXPECT_LT(margin, delta) << what << ": first difference at token " << same << " is not a near-tie";
      std::printf("    %s: first difference at token %zu, margin %.4g (near-tie below %.3g)\n",
                  GetParam().c_str(), same, margin, delta);
    }
    std::printf("    %s: %zu of %zu tokens equal %s at %lld\n", GetParam().c_str(), same, fresh.out.size(),
                what.c_str(), static_cast<long long>(got.fin.n_cached));
  }

  float last_margin_ = 0.0f;  // the scheduler thread's last draw (read by on_token right after it)
  bool bf16_caches_ = false;  // "<folder>@bf16kv"
  fs::path dir_;

  std::unique_ptr<Backend> be_;
  std::unique_ptr<LoadedModel> lm_;
};

// Two states part by part: recurrent and host parts whole, positional ones over the rows both hold. Exact:
// the verify rows and their replays take the step form, as feeding one token at a time does.
// with_draft: the draft caches too (both sides have just drafted from the same state, so their draft_pos
// agree; after a commit the verifying side's draft rows past its queue are its own speculative ones).
// tolerance: relative to a part's largest value, 0 for bit for bit (the CPU).
void expect_same_state(Model& m, Backend& be, SequenceState& a, SequenceState& b, const std::string& what,
                       bool with_draft, float tolerance) {
  ASSERT_EQ(a.pos, b.pos) << what;
  ASSERT_EQ(a.history, b.history) << what;
  if (with_draft) ASSERT_EQ(a.draft_pos, b.draft_pos) << what;
  auto pa = m.state_parts(a), pb = m.state_parts(b);
  ASSERT_EQ(pa.size(), pb.size());
  ASSERT_FALSE(pa.empty()) << "the family names no state parts";
  for (size_t i = 0; i < pa.size(); ++i) {
    const StatePart &x = pa[i], &y = pb[i];
    ASSERT_EQ(x.name, y.name);
    if (!with_draft && (x.name.rfind("mtp", 0) == 0 || x.name.rfind("nextn", 0) == 0)) continue;
    if (x.host) {
      EXPECT_EQ(*x.host, *y.host) << what << ": " << x.name;
      continue;
    }
    std::vector<float> va = be.download(*x.tensor), vb = be.download(*y.tensor);
    ASSERT_EQ(va.size(), vb.size()) << x.name;
    size_t n = va.size();
    if (x.rows >= 0)
      n = static_cast<size_t>(std::min(x.rows, y.rows)) * (va.size() / static_cast<size_t>(x.tensor->dim(0)));
    float tol = 0.0f;
    for (size_t j = 0; j < n; ++j) tol = std::max(tol, tolerance * std::fabs(vb[j]));
    size_t bad = 0;
    float worst = 0.0f;
    for (size_t j = 0; j < n; ++j)
      if (tol > 0.0f ? !(std::fabs(va[j] - vb[j]) <= tol) : std::memcmp(&va[j], &vb[j], sizeof(float)) != 0) {
        ++bad;
        worst = std::max(worst, std::fabs(va[j] - vb[j]));
      }
    EXPECT_EQ(bad, 0u) << what << ": " << x.name << " differs in " << bad << " of " << n
                       << " elements (max abs " << worst << ")";
  }
}

// A catch-up without logits (the default: a catch-up reads only the draft layer's caches) leaves those caches
// and the pass's hidden exactly as one that makes its logits, and makes none; one that asks for its last
// row's logits only (a proposal's) makes that one row, equal to the last of all rows'; so does the engine's
// catch-up after a prompt chunk (draft_feed), which then proposes the same drafts.
TEST_P(SpecDecode, CatchUpWithoutLogitsLeavesTheSameDraftState) {
  using Logits = Model::DraftEntry::Logits;
  const int64_t V = model().info().vocab_size;
  const auto prompt = tokens(V, 23, 7);
  ModelStepEngine plain(model(), be());  // no drafting: its forwards queue nothing
  auto a = plain.new_state(256), b = plain.new_state(256), c = plain.new_state(256);
  ForwardResult ra, rb, rc;
  for (auto [st, r, logits] : {std::tuple{a.get(), &ra, Logits::All}, std::tuple{b.get(), &rb, Logits::None},
                               std::tuple{c.get(), &rc, Logits::Last}}) {
    const ForwardResult f = model().forward(be(), *st, prompt, false);
    ASSERT_TRUE(f.hidden.defined());
    draft_feed(model(), be(), *st, f.hidden, prompt, false);
    *r = draft_catch_up(model(), be(), *st, logits);
  }
  ASSERT_TRUE(ra.logits.defined());
  EXPECT_EQ(ra.logits.rows(), static_cast<int64_t>(prompt.size()) - 1);
  EXPECT_FALSE(rb.logits.defined()) << "a catch-up made logits nobody asked for";
  ASSERT_TRUE(rc.logits.defined());
  EXPECT_EQ(rc.logits.rows(), 1) << "a proposal's catch-up made head rows it never reads";
  const auto near = [&](const Tensor& x, const Tensor& y, const char* what) {
    const std::vector<float> hx = be().download(x), hy = be().download(y);
    ASSERT_EQ(hx.size(), hy.size()) << what;
    float worst = 0.0f, top = 0.0f;
    for (size_t i = 0; i < hx.size(); ++i) {
      worst = std::max(worst, std::fabs(hx[i] - hy[i]));
      top = std::max(top, std::fabs(hx[i]));
    }
    EXPECT_LE(worst, state_tolerance() * top) << what;
  };
  ASSERT_TRUE(ra.hidden.defined() && rb.hidden.defined());
  near(ra.hidden, rb.hidden, "the catch-up's hidden");
  near(ra.logits.slice(ra.logits.rows() - 1, 1), rc.logits, "the last row's logits");
  expect_same_state(model(), be(), *a, *b, "caught up with and without logits", true, state_tolerance());
  expect_same_state(model(), be(), *a, *c, "caught up with all and the last logits", true, state_tolerance());
  // They propose the same drafts from there.
  ModelStepEngine drafting(model(), be());
  drafting.enable_drafting({});
  const std::vector<int32_t> da = drafting.draft(*a, prompt[0], 3);
  EXPECT_EQ(da, drafting.draft(*b, prompt[0], 3));
  EXPECT_EQ(da, drafting.draft(*c, prompt[0], 3));
}

TEST_P(SpecDecode, CommitEqualsFeedingOnlyTheAcceptedTokens) {
  const int64_t V = model().info().vocab_size;
  const auto prompt = tokens(V, 23, 7);
  ModelStepEngine ea(model(), be()), eb(model(), be());
  ea.enable_drafting({});
  eb.enable_drafting({});
  auto a = ea.new_state(256), b = eb.new_state(256);
  auto feed = [&](ModelStepEngine& e, SequenceState& st, std::vector<int32_t> ids, bool spec) {
    feed_one(e, st, std::move(ids), spec);
  };
  // The prompt in two chunks on both sides.
  for (auto* side : {&ea, &eb}) {
    SequenceState& st = side == &ea ? *a : *b;
    feed(*side, st, {prompt.begin(), prompt.begin() + 11}, false);
    feed(*side, st, {prompt.begin() + 11, prompt.end()}, false);
  }
  // Rounds: both sides draft from the same pending token (A verifies and commits `keep` rows; B feeds those
  // rows one at a time); the drafts and then the whole states must agree, draft caches included.
  int32_t pending = prompt[0];
  const int ks[] = {3, 1, 8, 2, 5, 4, 2};
  for (int round = 0; round < 7; ++round) {
    const int k = ks[round];
    auto drafts = ea.draft(*a, pending, k);
    ASSERT_EQ(drafts, eb.draft(*b, pending, k)) << "round " << round;
    ASSERT_EQ(static_cast<int>(drafts.size()), k);
    expect_same_state(model(), be(), *a, *b, "round " + std::to_string(round) + " drafted", true,
                      state_tolerance());
    if (round == 6) break;
    for (int j = 0; j < k; ++j) drafts[j] = static_cast<int32_t>(mix(round, j) % V);  // arbitrary rows
    std::vector<int32_t> rows{pending};
    rows.insert(rows.end(), drafts.begin(), drafts.end());
    feed(ea, *a, rows, true);
    const int64_t keep = round == 2 ? k + 1 : 1 + static_cast<int64_t>(mix(round, 99) % k);
    ea.commit(*a, keep);
    for (int64_t j = 0; j < keep; ++j) feed(eb, *b, {rows[j]}, false);
    pending = static_cast<int32_t>(mix(round, 7) % V);
    expect_same_state(model(), be(), *a, *b,
                      "round " + std::to_string(round) + " kept " + std::to_string(keep), false,
                      state_tolerance());
  }
  // A pending verify refuses another forward and a checkpoint.
  std::vector<int32_t> more = tokens(V, 4, 99);
  StepItem it;
  it.state = a.get();
  it.ids = more;
  it.speculative = it.want_logits = true;
  std::vector<StepItem> items{it};
  ea.forward(items);
  ASSERT_EQ(items[0].error, "");
  EXPECT_THROW(model().checkpoint(be(), *a), Error);
  items[0].error.clear();
  items[0].speculative = false;
  ea.forward(items);
  EXPECT_NE(items[0].error.find("E_STATE_PENDING"), std::string::npos) << items[0].error;
  model().truncate(be(), *a, a->pos - 1);  // inside the pending verify: a commit of 3 rows
  EXPECT_EQ(a->pos, b->pos + 3);
  EXPECT_THROW(model().truncate(be(), *a, a->pos - 1), Error);  // older positions need a checkpoint
  // Checkpoint, verify and keep everything, restore: the state the checkpoint saw.
  const StateCheckpoint cp = model().checkpoint(be(), *b);
  feed(eb, *b, more, true);
  eb.commit(*b, 4);
  model().restore(be(), *b, cp);
  auto parts = model().state_parts(*b);
  size_t ti = 0;
  for (const StatePart& p : parts)
    if (!p.host && p.rows < 0) EXPECT_EQ(be().download(*p.tensor), be().download(cp.tensors[ti++])) << p.name;
  EXPECT_EQ(b->pos, cp.pos);
  EXPECT_EQ(b->history, cp.history);
}

// n > 1 choices fork one prefill (Model::copy_state): the copy is the same state, draft cache and queue
// included, and goes on exactly like the original through drafts, verifies, commits and plain decodes; a
// pending verify refuses to be copied.
TEST_P(SpecDecode, CopiedStateGoesOnLikeTheOriginal) {
  const int64_t V = model().info().vocab_size;
  const auto prompt = tokens(V, 21, 11);
  ModelStepEngine e(model(), be());
  e.enable_drafting({});
  auto a = e.new_state(128);
  auto feed = [&](SequenceState& st, std::vector<int32_t> ids, bool spec) {
    return feed_one(e, st, std::move(ids), spec);
  };
  feed(*a, {prompt.begin(), prompt.begin() + 9}, false);
  feed(*a, {prompt.begin() + 9, prompt.end()}, false);
  auto c = e.new_state(128);
  ASSERT_TRUE(e.copy_state(*a, *c));
  expect_same_state(model(), be(), *a, *c, "copied", true, state_tolerance());
  int32_t pending = prompt.back();
  for (int round = 0; round < 4; ++round) {
    const auto da = e.draft(*a, pending, 3), dc = e.draft(*c, pending, 3);
    ASSERT_EQ(da, dc) << "round " << round;
    std::vector<int32_t> rows{pending};
    rows.insert(rows.end(), da.begin(), da.end());
    EXPECT_EQ(feed(*a, rows, true), feed(*c, rows, true)) << "round " << round;
    const int64_t keep = 1 + static_cast<int64_t>(mix(round, 5) % rows.size());
    e.commit(*a, keep);
    e.commit(*c, keep);
    pending = static_cast<int32_t>(mix(round, 8) % V);
    EXPECT_EQ(feed(*a, {pending}, false), feed(*c, {pending}, false)) << "round " << round;
    expect_same_state(model(), be(), *a, *c, "round " + std::to_string(round), true, state_tolerance());
  }
  std::vector<int32_t> more = tokens(V, 3, 5);
  feed(*a, more, true);
  auto d = e.new_state(128);
  EXPECT_THROW(model().copy_state(be(), *a, *d), Error);
}

// Drafts of several sequences in one batch (StepEngine::draft_batch: the catch-ups in one draft pass, then
// one pass a draft step): each sequence's drafts and its whole state (draft cache and queue included) are
// those of drafting it alone, round after round of verifies and commits with queues of different lengths.
TEST_P(SpecDecode, BatchedDraftsEqualEachSequenceAlone) {
  const int64_t V = model().info().vocab_size;
  ModelStepEngine e(model(), be());
  e.enable_drafting({});
  std::vector<std::unique_ptr<SequenceState>> batched, alone;
  std::vector<int32_t> pending;
  for (int i = 0; i < 3; ++i) {
    const auto prompt = tokens(V, 9 + 7 * i, 20 + i);
    for (auto* set : {&batched, &alone}) {
      set->push_back(e.new_state(128));
      feed_one(e, *set->back(), {prompt.begin(), prompt.end() - 1}, false);
    }
    pending.push_back(prompt.back());
  }
  for (int round = 0; round < 4; ++round) {
    std::vector<DraftJob> jobs;
    for (int i = 0; i < 3; ++i) jobs.push_back({batched[i].get(), pending[i], 1 + (i + round) % 3, {}});
    e.draft_batch(jobs);
    for (int i = 0; i < 3; ++i) {
      const std::string what = "round " + std::to_string(round) + ", sequence " + std::to_string(i);
      const std::vector<int32_t> want = e.draft(*alone[i], pending[i], jobs[i].k);
      ASSERT_EQ(jobs[i].drafts, want) << what;
      expect_same_state(model(), be(), *batched[i], *alone[i], what, true, state_tolerance());
      // Verify the drafts, keep a varying share of the rows, and feed the next pending token.
      std::vector<int32_t> rows{pending[i]};
      rows.insert(rows.end(), want.begin(), want.end());
      for (auto* set : {&batched, &alone}) {
        feed_one(e, *(*set)[i], rows, true);
        e.commit(*(*set)[i], 1 + static_cast<int64_t>(mix(round, i) % rows.size()));
      }
      pending[i] = static_cast<int32_t>(mix(round, 100 + i) % V);
    }
  }
}

// Slots decoding without drafts this round (paused or between rounds) share one forward; their draft layer
// catches up over the new rows in one pass for all of them (ModelStepEngine::catch_up_drafts), which must
// leave each one's draft state and next drafts as its own forward would, a verify in the mix included.
TEST_P(SpecDecode, PlainRowsOfSeveralSlotsCatchUpInOneDraftPass) {
  const int64_t V = model().info().vocab_size;
  ModelStepEngine e(model(), be());
  e.enable_drafting({.defer_rows = 0});  // every decode row caught up in its step's pass
  std::vector<std::unique_ptr<SequenceState>> batched, alone;
  for (int i = 0; i < 3; ++i) {
    const auto prompt = tokens(V, 8 + 5 * i, 40 + i);
    for (auto* set : {&batched, &alone}) {
      set->push_back(e.new_state(128));
      feed_one(e, *set->back(), prompt, false);
    }
  }
  for (int step = 0; step < 4; ++step) {
    // Slot 2 verifies two rows at step 1 (its catch-up waits for the commit); the others decode one token.
    std::vector<StepItem> items(3);
    std::vector<std::vector<int32_t>> ids(3);
    for (int i = 0; i < 3; ++i) {
      ids[i] = {static_cast<int32_t>(mix(step, i) % V)};
      if (step == 1 && i == 2) ids[i].push_back(static_cast<int32_t>(mix(step, 50) % V));
      items[i].state = batched[i].get();
      items[i].ids = ids[i];
      items[i].speculative = ids[i].size() > 1;
      items[i].want_logits = true;
    }
    e.forward(items);
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(items[i].error, "");
      feed_one(e, *alone[i], ids[i], items[i].speculative);
      if (items[i].speculative)
        for (auto* set : {&batched, &alone}) e.commit(*(*set)[i], 1);
      const std::string what = "step " + std::to_string(step) + ", sequence " + std::to_string(i);
      expect_same_state(model(), be(), *batched[i], *alone[i], what, true, state_tolerance());
    }
  }
  for (int i = 0; i < 3; ++i) {
    const int32_t pending = static_cast<int32_t>(mix(9, i) % V);
    EXPECT_EQ(e.draft(*batched[i], pending, 3), e.draft(*alone[i], pending, 3)) << "sequence " << i;
    expect_same_state(model(), be(), *batched[i], *alone[i], "drafted, sequence " + std::to_string(i), true,
                      state_tolerance());
  }
}

// A decode row of a slot that is not drafting waits in its queue (DraftOptions::defer_rows) instead of a
// draft pass every step: the queue is caught up when it holds defer_rows rows whose next token is known, and
// the proposal that ends the wait catches all of them up in its one pass, leaving the state and the drafts
// that a catch-up every step leaves.
TEST_P(SpecDecode, DeferredDecodeRowsCatchUpToTheSameDraftState) {
  const int64_t V = model().info().vocab_size;
  ModelStepEngine every(model(), be()), deferred(model(), be());
  every.enable_drafting({.defer_rows = 0});
  deferred.enable_drafting({.defer_rows = 3});
  const auto prompt = tokens(V, 11, 61);
  auto a = every.new_state(128), b = deferred.new_state(128);
  feed_one(every, *a, prompt, false);
  feed_one(deferred, *b, prompt, false);
  ASSERT_EQ(b->draft_pos, b->pos - 1) << "a prompt chunk catches up at once";
  int64_t most_waiting = 0;
  for (int step = 0; step < 9; ++step) {
    const int32_t id = static_cast<int32_t>(mix(step, 7) % V);
    feed_one(every, *a, {id}, false);
    feed_one(deferred, *b, {id}, false);
    ASSERT_EQ(a->draft_pos, a->pos - 1) << "step " << step;
    const int64_t waiting = b->pos - 1 - b->draft_pos;
    EXPECT_LT(waiting, 3) << "step " << step << ": the queue reached its bound without a catch-up";
    most_waiting = std::max(most_waiting, waiting);
  }
  EXPECT_EQ(most_waiting, 2) << "the decode rows did not wait";
  const int32_t pending = static_cast<int32_t>(mix(99, 7) % V);
  EXPECT_EQ(deferred.draft(*b, pending, 3), every.draft(*a, pending, 3));
  expect_same_state(model(), be(), *a, *b, "deferred against every step", true, state_tolerance());
}

TEST_P(SpecDecode, GreedyWithDraftsEqualsWithout) {
  const int64_t V = model().info().vocab_size;
  const auto prompt = tokens(V, 40, 3);
  const int n = greedy_tokens();
  const Run off = generate(prompt, n, 0, {});
  ASSERT_EQ(static_cast<int>(off.out.size()), n);
  const int64_t P = static_cast<int64_t>(prompt.size());
  float delta = 0.0f;  // a device's near-tie: twice its measured logit noise along this run
  if (backend_name() != "cpu") {
    std::vector<int32_t> ids = prompt;
    ids.insert(ids.end(), off.out.begin(), off.out.end());
    delta = std::max(1e-3f, 2.0f * device_noise(ids, prompt.size()));
  }
  for (int k : {1, 3, 8}) {
    // Force accepts (the true next token) and rejects (a wrong one); leave some drafts as the layer made
    // them.
    auto hook = [&, k](int64_t pos, int j, int32_t d) -> int32_t {
      const int64_t i = pos - P;
      if (i < 0 || i >= n) return d;
      switch (mix(pos, k) % 4) {
        case 0:
        case 1:
          return off.out[i];
        case 2:
          return static_cast<int32_t>((off.out[i] + 1) % V);
        default:
          return d;
      }
    };
    const Run on = generate(prompt, n, k, hook);
    size_t first = 0;
    while (first < on.out.size() && first < off.out.size() && on.out[first] == off.out[first]) ++first;
    // Bit for bit on the CPU; on a device the verify rows' kernels round differently from one-row steps.
    if (backend_name() == "cpu")
      EXPECT_EQ(on.out, off.out) << "k = " << k << ": first difference at generated token " << first;
    else
      expect_same_up_to_a_near_tie(on, off, "k = " + std::to_string(k), delta);
    EXPECT_EQ(on.fin.reason, StopReason::Limit);
    EXPECT_GT(on.counts.accepted_total(), 0u) << "k = " << k;
    EXPECT_GT(on.counts.drafted_total(), on.counts.accepted_total()) << "k = " << k;
    EXPECT_EQ(on.fin.draft_n, static_cast<int64_t>(on.counts.drafted_total()));
    EXPECT_EQ(on.fin.draft_n_accepted, static_cast<int64_t>(on.counts.accepted_total()));
    std::printf("    %s k=%d drafted %llu accepted %llu\n", GetParam().c_str(), k,
                static_cast<unsigned long long>(on.counts.drafted_total()),
                static_cast<unsigned long long>(on.counts.accepted_total()));
  }
}

// Sampled requests draft too: each emitted token is one draw from the slot's generator on a row equal to the
// decode's, so a seeded run gives the same tokens with drafts as without (the distribution test is
// tests/unit/server/spec_sampling_test.cc). Both runs sample on the host (generate's engine): a scheduler
// that drafts always does, and the card's draws of a run without drafts come from another generator.
TEST_P(SpecDecode, SeededSampledRunEqualsWithout) {
  const int64_t V = model().info().vocab_size;
  const auto prompt = tokens(V, 20, 11);
  const Run off = generate(prompt, 96, 0, {}, {}, 1.0f, 77);
  const int64_t P = static_cast<int64_t>(prompt.size());
  const Run on = generate(
      prompt, 96, 3,
      [&](int64_t pos, int, int32_t d) {
        const int64_t i = pos - P;
        return i >= 0 && i < 96 && mix(pos, 5) % 2 ? off.out[i] : d;
      },
      {}, 1.0f, 77);
  if (backend_name() == "cpu") {
    EXPECT_EQ(on.out, off.out);
  } else {
    // A draw parts only where the noise moves the distribution across the uniform: |dp| summed over the
    // vocabulary stays below twice the largest |dlogit|.
    std::vector<int32_t> ids = prompt;
    ids.insert(ids.end(), off.out.begin(), off.out.end());
    expect_same_up_to_a_near_tie(on, off, "sampled",
                                 std::max(1e-4f, 4.0f * device_noise(ids, prompt.size())));
  }
  EXPECT_GT(on.counts.accepted_total(), 0u);
}

TEST_P(SpecDecode, EosInsideAnAcceptedRunStopsThere) {
  const int64_t V = model().info().vocab_size;
  const auto prompt = tokens(V, 12, 5);
  const Run ref = generate(prompt, 48, 0, {});
  const int32_t eos = ref.out[29];
  const Run off = generate(prompt, 48, 0, {}, {eos});
  const int64_t P = static_cast<int64_t>(prompt.size());
  // Every draft is the true token: the EOS is always inside an accepted run.
  const Run on = generate(prompt, 48, 8,
                          [&](int64_t pos, int, int32_t d) {
                            const int64_t i = pos - P;
                            return i >= 0 && i < static_cast<int64_t>(ref.out.size()) ? ref.out[i] : d;
                          },
                          {eos});
  EXPECT_EQ(off.fin.reason, StopReason::Eos);
  EXPECT_EQ(on.fin.reason, StopReason::Eos);
  EXPECT_EQ(on.out, off.out);
  EXPECT_EQ(on.fin.n_predicted, off.fin.n_predicted);
}

// The prompt cache on a real state: a request that drafted to an EOS inside an accepted run (so its verify
// was committed at the stop) leaves its slot's state for the next turn, which reads only its new tokens and
// then answers as a fresh read of the whole prompt does, up to the first near-tie (a resumed state took the
// answer tokens one step at a time, a fresh read takes them in prompt chunks: the recurrent layers' chunked
// and step forms round differently).
TEST_P(SpecDecode, PromptCacheResumesAfterADraftedStop) {
  const int64_t V = model().info().vocab_size;
  const auto prompt = tokens(V, 20, 21);
  const Run ref = generate(prompt, 40, 0, {});
  const int32_t eos = ref.out[17];
  const int64_t P = static_cast<int64_t>(prompt.size());
  ModelStepEngine engine(model(), be());
  DraftOptions o;
  o.n_max = 3;
  o.hook = [&](int64_t pos, int, int32_t d) {  // every draft the true token: the EOS lands inside a run
    const int64_t i = pos - P;
    return i >= 0 && i < static_cast<int64_t>(ref.out.size()) ? ref.out[i] : d;
  };
  engine.enable_drafting(o);
  Scheduler sched(engine, config(160, 3), sampler(0.0f));
  const Run first = submit_wait(sched, prompt, 40, {eos});
  ASSERT_EQ(first.fin.reason, StopReason::Eos);
  ASSERT_GT(sched.stats().drafts.accepted_total(), 0u);
  std::vector<int32_t> p2 = prompt;
  p2.insert(p2.end(), first.out.begin(), first.out.end());
  const auto more = tokens(V, 6, 99);
  p2.insert(p2.end(), more.begin(), more.end());
  const Run second = submit_wait(sched, p2, 24, {});
  // Every answer token was fed (the EOS, which ends it, is neither fed nor in `out`).
  EXPECT_EQ(second.fin.n_cached, P + static_cast<int64_t>(first.out.size()));
  // On a device the resumed prefix came from other steps than a fresh prefill of p2 (smaller products,
  // another activation rounding): a part is a near-tie within twice their measured logit distance.
  const auto near_tie = [&](const std::vector<int32_t>& p, const Run& fresh) {
    if (backend_name() == "cpu") return 1e-3f;
    std::vector<int32_t> ids = p;
    ids.insert(ids.end(), fresh.out.begin(), fresh.out.end());
    return std::max(1e-3f, 2.0f * device_noise(ids, p.size(), true));
  };
  const Run fresh2 = generate(p2, 24, 0, {});
  expect_same_up_to_a_near_tie(second, fresh2, "after resuming", near_tie(p2, fresh2));
  // A prompt that extends the second prompt but not its answer resumes from the snapshot at that prompt's
  // end (restored over a state that has since taken the answer).
  std::vector<int32_t> p3 = p2;
  const auto other = tokens(V, 5, 123);
  p3.insert(p3.end(), other.begin(), other.end());
  const Run third = submit_wait(sched, p3, 16, {});
  EXPECT_EQ(third.fin.n_cached, static_cast<int64_t>(p2.size()));
  const Run fresh3 = generate(p3, 16, 0, {});
  expect_same_up_to_a_near_tie(third, fresh3, "after restoring", near_tie(p3, fresh3));
}

// ngram-simple: drafts looked up in the sequence's own tokens (the greedy random fixtures fall into loops, so
// lookups get accepted), no draft layer; lossless the same way.
TEST_P(SpecDecode, GreedyWithNgramDraftsEqualsWithout) {
  const int64_t V = model().info().vocab_size;
  auto prompt = tokens(V, 16, 21);
  prompt.insert(prompt.end(), prompt.begin(), prompt.end());  // a repeat to look up from the start
  const int n = std::min(greedy_tokens(), 192);
  const Run off = generate(prompt, n, 0, {});
  const Run on = generate(prompt, n, 4, {}, {}, 0.0f, 0, true);
  EXPECT_EQ(on.out, off.out);
  EXPECT_GT(on.counts.drafted_total(), 0u);
  std::printf("    %s ngram drafted %llu accepted %llu\n", GetParam().c_str(),
              static_cast<unsigned long long>(on.counts.drafted_total()),
              static_cast<unsigned long long>(on.counts.accepted_total()));
}

TEST(NgramPropose, LongestLatestMatchAndItsFollowers) {
  // ... 5 6 7 8 | 1 2 3 9 9 | 5 6 7 → the latest "5 6 7" is followed by 8 1 2.
  const std::vector<int32_t> ctx{5, 6, 7, 8, 1, 2, 3, 9, 9, 5, 6, 7};
  EXPECT_EQ(ngram_propose(ctx, 3, 4, 1), (std::vector<int32_t>{8, 1, 2}));
  EXPECT_EQ(ngram_propose(ctx, 8, 4, 1), (std::vector<int32_t>{8, 1, 2, 3, 9, 9, 5, 6}));
  // Only a 1-gram matches: 4 … 4 → what followed the earlier 4.
  EXPECT_EQ(ngram_propose(std::vector<int32_t>{4, 3, 1, 4}, 2, 4, 1), (std::vector<int32_t>{3, 1}));
  EXPECT_TRUE(ngram_propose(std::vector<int32_t>{4, 3, 1, 4}, 2, 4, 2).empty());  // no 2-gram repeats
  EXPECT_TRUE(ngram_propose(std::vector<int32_t>{1, 2, 3}, 2, 4, 1).empty());
  // The latest of two occurrences: 7 a … 7 b … 7 → b.
  EXPECT_EQ(ngram_propose(std::vector<int32_t>{7, 1, 7, 2, 7}, 1, 1, 1), (std::vector<int32_t>{2}));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SpecDecode, ::testing::ValuesIn(testing_fixtures::fixture_names()),
                         testing_fixtures::param_name);

// BF16 K/V caches (GLM: its MLA latent) on one folder of each family (the mission's FP4-Local layout for
// qwen4_exp).
std::vector<std::string> bf16_kv_folders() {
  std::vector<std::string> out;
  for (const std::string& n : testing_fixtures::fixture_names())
    if (n == "qwen3_next-bf16" || n == "qwen4_exp-fp4local-csf" || n == "glm5_next-bf16")
      out.push_back(n + "@bf16kv");
  if (out.empty()) out.push_back("none");
  return out;
}
INSTANTIATE_TEST_SUITE_P(Bf16Kv, SpecDecode, ::testing::ValuesIn(bf16_kv_folders()),
                         testing_fixtures::param_name);

}  // namespace
}  // namespace bloomery
