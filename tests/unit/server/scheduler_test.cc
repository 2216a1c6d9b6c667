// The scheduler over a scripted engine: the "model" predicts (last token + 1) mod V, so every token the
// scheduler hands out can be checked; the engine records what each pass contained.
#include "runtime/scheduler.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "server/sampling.h"

using namespace bloomery;

namespace {

constexpr int64_t kVocab = 50;

struct ScriptState : SequenceState {};

struct PassRecord {
  int decode_items = 0;  // items with exactly one id after the prompt
  int prompt_items = 0;
  std::vector<int64_t> prompt_chunk_sizes;
};

class ScriptEngine : public StepEngine {
 public:
  int64_t vocab_size() const override { return kVocab; }
  std::unique_ptr<SequenceState> new_state(int64_t capacity) override {
    auto s = std::make_unique<ScriptState>();
    s->capacity = capacity;
    return s;
  }
  void forward(std::span<StepItem> items) override {
    PassRecord rec;
    for (auto& it : items) {
      bool decode = it.state->pos > 0 && it.ids.size() == 1 && it.want_logits && decoding_.count(it.state);
      if (decode)
        rec.decode_items++;
      else {
        rec.prompt_items++;
        rec.prompt_chunk_sizes.push_back(static_cast<int64_t>(it.ids.size()));
      }
      for (int32_t id : it.ids) it.state->history.push_back(id);
      it.state->pos += static_cast<int64_t>(it.ids.size());
      if (it.want_logits) {
        decoding_.insert(it.state);
        it.logits.assign(kVocab, 0.0f);
        it.logits[(it.ids.back() + 1) % kVocab] = 10.0f;
      }
    }
    std::lock_guard lk(mu);
    passes.push_back(rec);
    if (delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  }
  std::mutex mu;
  std::vector<PassRecord> passes;
  int delay_ms = 0;

 private:
  std::set<SequenceState*> decoding_;
};

SamplingParams greedy() {
  SamplingParams p;
  p.temperature = 0.0;
  return p;
}

struct Result {
  std::vector<int32_t> tokens;
  FinishInfo finish;
};

// Submits and returns a future of the whole result.
std::future<Result> run(Scheduler& s, std::vector<int32_t> prompt, int64_t n_predict,
                        std::function<bool(int32_t)> keep_going = nullptr, std::vector<int32_t> eos = {},
                        std::shared_ptr<Ticket>* ticket = nullptr) {
  auto res = std::make_shared<Result>();
  auto prom = std::make_shared<std::promise<Result>>();
  GenRequest r;
  r.prompt = std::move(prompt);
  r.n_predict = n_predict;
  r.sampling = greedy();
  r.eos_ids = std::move(eos);
  r.on_token = [res, keep_going](const SampledToken& t) {
    res->tokens.push_back(t.id);
    return keep_going ? keep_going(t.id) : true;
  };
  r.on_finish = [res, prom](const FinishInfo& f) {
    res->finish = f;
    prom->set_value(*res);
  };
  auto t = s.submit(std::move(r));
  if (ticket) *ticket = t;
  return prom->get_future();
}

}  // namespace

TEST(Scheduler, GeneratesUntilLimit) {
  ScriptEngine e;
  Scheduler s(e, {1, 64, 16, 8}, server::sample_token);
  Result r = run(s, {3, 4, 5}, 4).get();
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{6, 7, 8, 9}));
  EXPECT_EQ(r.finish.reason, StopReason::Limit);
  EXPECT_EQ(r.finish.n_prompt, 3);
  EXPECT_EQ(r.finish.n_predicted, 4);
}

TEST(Scheduler, EosAndStopWordAndContextEnd) {
  ScriptEngine e;
  Scheduler s(e, {1, 8, 16, 8}, server::sample_token);
  Result a = run(s, {1}, -1, nullptr, {4}).get();
  EXPECT_EQ(a.tokens, (std::vector<int32_t>{2, 3}));  // EOS (4) ends it and is not delivered
  EXPECT_EQ(a.finish.reason, StopReason::Eos);
  Result b = run(s, {10}, -1, [](int32_t id) { return id != 12; }).get();
  EXPECT_EQ(b.tokens, (std::vector<int32_t>{11, 12}));
  EXPECT_EQ(b.finish.reason, StopReason::Word);
  // Context 8, prompt 3: positions 3..7 take 5 generated tokens fed back; the 6th is sampled at the end.
  Result c = run(s, {20, 21, 22}, -1).get();
  EXPECT_EQ(c.finish.reason, StopReason::ContextFull);
  EXPECT_EQ(c.tokens.size(), 6u);
  // A prompt that cannot fit is refused at once.
  Result d = run(s, std::vector<int32_t>(8, 1), 1).get();
  EXPECT_EQ(d.finish.reason, StopReason::Error);
}

TEST(Scheduler, MoreRequestsThanSlotsQueueAndAllFinish) {
  ScriptEngine e;
  e.delay_ms = 2;
  Scheduler s(e, {2, 64, 64, 16}, server::sample_token);
  std::vector<std::future<Result>> fs;
  for (int i = 0; i < 6; ++i) fs.push_back(run(s, {i}, 5));
  bool saw_deferred = s.stats().requests_deferred > 0;
  for (int i = 0; i < 6; ++i) {
    Result r = fs[i].get();
    EXPECT_EQ(r.finish.reason, StopReason::Limit);
    EXPECT_EQ(r.tokens, (std::vector<int32_t>{i + 1, i + 2, i + 3, i + 4, i + 5}));
  }
  EXPECT_TRUE(saw_deferred);
  SchedulerStats st = s.stats();
  EXPECT_EQ(st.tokens_predicted_total, 30u);
  EXPECT_EQ(st.prompt_tokens_total, 6u);
  EXPECT_EQ(st.requests_deferred, 0);
  EXPECT_EQ(st.requests_finished, 6u);
  // Two slots: at some pass both decoded together.
  std::lock_guard lk(e.mu);
  int max_decode = 0;
  for (auto& p : e.passes) max_decode = std::max(max_decode, p.decode_items);
  EXPECT_EQ(max_decode, 2);
}

TEST(Scheduler, LongPromptIsChunkedAndDoesNotFreezeDecoding) {
  ScriptEngine e;
  e.delay_ms = 1;
  Scheduler s(e, {2, 512, 64, 8}, server::sample_token);
  auto first = run(s, {1}, 200);
  // Let the short request reach its decode phase, then send a 100-token prompt.
  while (s.stats().tokens_predicted_total < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto second = run(s, std::vector<int32_t>(100, 7), 1);
  EXPECT_EQ(second.get().finish.reason, StopReason::Limit);
  EXPECT_EQ(first.get().finish.reason, StopReason::Limit);
  std::lock_guard lk(e.mu);
  int mixed = 0;
  for (auto& p : e.passes) {
    for (int64_t c : p.prompt_chunk_sizes) EXPECT_LE(c, 8);
    if (p.decode_items == 1 && p.prompt_items == 1) mixed++;
  }
  // 100 tokens in chunks of 8 = 13 passes, each also carrying the other stream's decode token.
  EXPECT_GE(mixed, 12);
}

TEST(Scheduler, CancelFreesTheSlotWithinOneStep) {
  ScriptEngine e;
  e.delay_ms = 2;
  Scheduler s(e, {1, 4096, 64, 16}, server::sample_token);
  std::shared_ptr<Ticket> t;
  std::atomic<int> seen{0};
  auto f = run(
      s, {1}, -1, [&](int32_t) { return ++seen < 1000000; }, {}, &t);
  while (seen < 5) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  size_t passes_at_cancel;
  {
    std::lock_guard lk(e.mu);
    passes_at_cancel = e.passes.size();
  }
  t->cancel();
  Result r = f.get();
  EXPECT_EQ(r.finish.reason, StopReason::Cancelled);
  {
    std::lock_guard lk(e.mu);
    EXPECT_LE(e.passes.size(), passes_at_cancel + 1);
  }
  // The slot is free: the next request runs.
  Result next = run(s, {5}, 2).get();
  EXPECT_EQ(next.tokens, (std::vector<int32_t>{6, 7}));
  EXPECT_EQ(s.stats().requests_cancelled, 1u);
}

TEST(Scheduler, QueuedRequestCancelledBeforeItStarts) {
  ScriptEngine e;
  e.delay_ms = 2;
  Scheduler s(e, {1, 4096, 64, 16}, server::sample_token);
  auto busy = run(s, {1}, 50);
  std::shared_ptr<Ticket> t;
  auto queued = run(s, {2}, 5, nullptr, {}, &t);
  t->cancel();
  Result r = queued.get();
  EXPECT_EQ(r.finish.reason, StopReason::Cancelled);
  EXPECT_TRUE(r.tokens.empty());
  EXPECT_EQ(busy.get().finish.reason, StopReason::Limit);
}

// A request's prepare_constraint runs on a helper thread while the step's forward runs (the forward waits for
// it to start, it waits for the forward to start: sequential calls in either order would time out), once per
// step that samples, and before that step's constrain.
TEST(Scheduler, PreparesTheConstraintWhileTheForwardRuns) {
  struct OverlapEngine : ScriptEngine {
    std::atomic<bool> forwarding{false}, preparing{false}, looked{false};
    std::atomic<int> overlaps{0};
    void forward(std::span<StepItem> items) override {
      forwarding = true;
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      while (!preparing && std::chrono::steady_clock::now() < until) std::this_thread::yield();
      ScriptEngine::forward(items);
      // The helper may not have been scheduled since it raised `preparing` (two busy cores): the forward
      // ends only once the helper has looked, so a real overlap is never missed for a slow thread.
      while (preparing && !looked && std::chrono::steady_clock::now() < until) std::this_thread::yield();
      looked = false;
      preparing = false;
      forwarding = false;
    }
  } e;
  Scheduler s(e, {1, 64, 16, 8}, server::sample_token);
  auto res = std::make_shared<Result>();
  auto prom = std::make_shared<std::promise<Result>>();
  std::vector<std::string> order;  // scheduler thread and helper, never at once (the forward separates them)
  GenRequest r;
  r.prompt = {3, 4, 5};
  r.n_predict = 4;
  r.sampling = greedy();
  r.prepare_constraint = [&] {
    e.preparing = true;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (!e.forwarding && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    if (e.forwarding) e.overlaps++;
    e.looked = true;
    order.push_back("prepare");
  };
  r.constrain = [&](std::vector<float>& logits) {
    order.push_back("constrain");
    logits[9] = -INFINITY;  // the script's 4th token is banned: the sampler takes another
  };
  r.on_token = [res](const SampledToken& t) {
    res->tokens.push_back(t.id);
    return true;
  };
  r.on_finish = [res, prom](const FinishInfo& f) {
    res->finish = f;
    prom->set_value(*res);
  };
  s.submit(std::move(r));
  Result out = prom->get_future().get();
  ASSERT_EQ(out.tokens.size(), 4u);
  EXPECT_EQ(out.tokens[0], 6);
  EXPECT_NE(out.tokens[3], 9) << "constrain's mask applies to the sampled row";
  EXPECT_EQ(e.overlaps.load(), 4) << "every sampling step prepared its constraint during its forward";
  ASSERT_EQ(order.size(), 8u);
  for (size_t i = 0; i < order.size(); i += 2) {
    EXPECT_EQ(order[i], "prepare") << i;
    EXPECT_EQ(order[i + 1], "constrain") << i;
  }
}

// What makes the sampler need a decode's row itself: a penalty, a bias, reported probabilities.
std::vector<std::function<void(SamplingParams&)>> needs_the_row() {
  return {[](SamplingParams& p) { p.repeat_penalty = 1.1; },
          [](SamplingParams& p) { p.presence_penalty = 0.5; },
          [](SamplingParams& p) { p.frequency_penalty = 0.5; },
          [](SamplingParams& p) {
            p.logit_bias = {{3, 1.0f}};
          },
          [](SamplingParams& p) { p.n_probs = 2; },
          [](SamplingParams& p) { p.logprob = true; }};
}

// A sampled decode with nothing that needs its row (engine_draw_suffices) is drawn by an engine that draws
// rows (on the card only the id comes back): its cuts, the request's seed and the step's index go with it,
// and the engine's id is the token. Penalties, a bias, reported probabilities, a grammar or greedy keep the
// host's way; an engine that does not draw gets rows as before.
TEST(Scheduler, SampledDecodesAreDrawnByAnEngineThatDrawsRows) {
  struct DrawEngine : ScriptEngine {
    bool draws = true;
    std::mutex m;
    std::vector<Backend::RowDraw> got;
    bool draws_rows() const override { return draws; }
    void forward(std::span<StepItem> items) override {
      ScriptEngine::forward(items);
      for (auto& it : items) {
        if (!it.draw) continue;
        EXPECT_TRUE(it.engine_picks());
        EXPECT_FALSE(it.argmax_only);
        {
          std::lock_guard lk(m);
          got.push_back(*it.draw);
        }
        it.argmax = static_cast<int32_t>(40 + it.draw->step);  // not what the host would draw
        it.logits.clear();
      }
    }
  };
  SamplingParams p;
  p.temperature = 0.7;
  p.top_k = 20;
  p.top_p = 0.9;
  p.min_p = 0.1;
  p.seed = 1234;
  EXPECT_TRUE(engine_draw_suffices(p));
  EXPECT_FALSE(engine_draw_suffices(greedy()));
  auto changes = needs_the_row();
  changes.push_back([](SamplingParams& q) { q.top_k = 1; });  // greedy
  for (const auto& change : changes) {
    SamplingParams q = p;
    change(q);
    EXPECT_FALSE(engine_draw_suffices(q));
  }
  auto submit = [](Scheduler& s, const SamplingParams& sp,
                   std::function<void(std::vector<float>&)> constrain) {
    auto prom = std::make_shared<std::promise<std::vector<int32_t>>>();
    auto toks = std::make_shared<std::vector<int32_t>>();
    GenRequest r;
    r.prompt = {3, 4, 5};
    r.n_predict = 4;
    r.sampling = sp;
    r.constrain = std::move(constrain);
    r.on_token = [toks](const SampledToken& t) {
      toks->push_back(t.id);
      return true;
    };
    r.on_finish = [prom, toks](const FinishInfo&) { prom->set_value(*toks); };
    s.submit(std::move(r));
    return prom->get_future().get();
  };
  {
    DrawEngine e;
    Scheduler s(e, {1, 64, 16, 8}, server::sample_token);
    // The first token comes from the prompt's row (the host's draw of a one-hot row: 6), the 3 decodes are
    // the engine's draws at steps 1, 2, 3.
    EXPECT_EQ(submit(s, p, nullptr), (std::vector<int32_t>{6, 41, 42, 43}));
    ASSERT_EQ(e.got.size(), 3u);
    for (size_t i = 0; i < e.got.size(); ++i) {
      const Backend::RowDraw& d = e.got[i];
      EXPECT_EQ(d.step, i + 1);
      EXPECT_EQ(d.seed, 1234u);
      EXPECT_FLOAT_EQ(d.temperature, 0.7f);
      EXPECT_EQ(d.top_k, 20);
      EXPECT_FLOAT_EQ(d.top_p, 0.9f);
      EXPECT_FLOAT_EQ(d.min_p, 0.1f);
    }
    // A penalty or a grammar: rows come back and the host samples them (the one-hot rows give 6, 7, 8, 9).
    SamplingParams pen = p;
    pen.repeat_penalty = 1.1;
    EXPECT_EQ(submit(s, pen, nullptr), (std::vector<int32_t>{6, 7, 8, 9}));
    EXPECT_EQ(submit(s, p, [](std::vector<float>&) {}), (std::vector<int32_t>{6, 7, 8, 9}));
    EXPECT_EQ(e.got.size(), 3u);
  }
  DrawEngine off;
  off.draws = false;
  Scheduler s(off, {1, 64, 16, 8}, server::sample_token);
  EXPECT_EQ(submit(s, p, nullptr), (std::vector<int32_t>{6, 7, 8, 9}));
  EXPECT_TRUE(off.got.empty());
  // A scheduler that drafts takes the engine's draws too, in rounds without drafts (here the engine proposes
  // none) at the same steps: a token's draw is keyed by its index, whether or not it was drafted.
  struct DraftingDrawEngine : DrawEngine {
    bool drafting() const override { return true; }
  };
  DraftingDrawEngine drafting;
  SchedulerConfig cfg{1, 64, 16, 8};
  cfg.spec.n_max = 3;
  Scheduler sd(drafting, cfg, server::sample_token);
  EXPECT_EQ(submit(sd, p, nullptr), (std::vector<int32_t>{6, 41, 42, 43}));
  ASSERT_EQ(drafting.got.size(), 3u);
  for (size_t i = 0; i < drafting.got.size(); ++i) EXPECT_EQ(drafting.got[i].step, i + 1);
}

// A greedy decode with nothing that needs its row (argmax_suffices) asks the engine for the argmax alone; the
// engine's id is taken as the token. Penalties, a bias, reported probabilities or sampling keep the row.
TEST(Scheduler, GreedyDecodesTakeTheEnginesArgmax) {
  struct ArgmaxEngine : ScriptEngine {
    std::atomic<int> flagged{0};
    void forward(std::span<StepItem> items) override {
      ScriptEngine::forward(items);
      for (auto& it : items) {
        if (!it.argmax_only) continue;
        flagged++;
        it.argmax =
            static_cast<int32_t>(std::max_element(it.logits.begin(), it.logits.end()) - it.logits.begin());
        it.logits.clear();
      }
    }
  };
  SamplingParams g = greedy();
  EXPECT_TRUE(argmax_suffices(g));
  auto changes = needs_the_row();
  changes.push_back([](SamplingParams& p) { p.temperature = 0.8; });  // sampled
  for (const auto& change : changes) {
    SamplingParams p = greedy();
    change(p);
    EXPECT_FALSE(argmax_suffices(p));
  }
  ArgmaxEngine e;
  Scheduler s(e, {1, 64, 16, 8}, server::sample_token);
  Result r = run(s, {3, 4, 5}, 5).get();
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{6, 7, 8, 9, 10}));
  EXPECT_EQ(e.flagged.load(), 4)
      << "the first token comes from the prompt's row; the 4 decodes take the argmax";
}
