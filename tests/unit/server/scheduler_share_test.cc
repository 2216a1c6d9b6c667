// n > 1 choices of one prompt share its prefill (PrefillShare): over an engine whose logits depend on the
// whole history (so a wrong fork shows) and that counts the prompt tokens it reads, n members cost one prompt
// read and n - 1 state copies, and each member's tokens are exactly what it gives alone with its seed
// (independent samples; greedy members are identical). Fewer slots than members, an engine that cannot copy,
// and a leader cancelled while reading still give every member its own full answer.
#include <future>
#include <set>
#include <stdexcept>

#include <gtest/gtest.h>

#include "runtime/scheduler.h"
#include "server/sampling.h"

using namespace bloomery;

namespace {

constexpr int64_t kVocab = 64;

struct HistState : SequenceState {};

class HistoryEngine : public StepEngine {
 public:
  int64_t vocab_size() const override { return kVocab; }
  std::unique_ptr<SequenceState> new_state(int64_t capacity) override {
    auto s = std::make_unique<HistState>();
    s->capacity = capacity;
    return s;
  }
  void forward(std::span<StepItem> items) override {
    for (auto& it : items) {
      const bool prompt = it.ids.size() > 1 || !decoding_.count(it.state);
      if (prompt) prompt_tokens += static_cast<int64_t>(it.ids.size());
      for (int32_t id : it.ids) it.state->history.push_back(id);
      it.state->pos += static_cast<int64_t>(it.ids.size());
      if (!it.want_logits) continue;
      decoding_.insert(it.state);
      // Logits from a hash of the whole history: flat enough that seeds differ, exact enough that any
      // difference in the state shows in every later token.
      uint64_t h = 1469598103934665603ull;
      for (int32_t id : it.state->history) h = (h ^ static_cast<uint64_t>(id)) * 1099511628211ull;
      it.logits.resize(kVocab);
      for (int64_t v = 0; v < kVocab; ++v) {
        uint64_t x = (h + static_cast<uint64_t>(v) * 0x9E3779B97F4A7C15ull) >> 40;
        it.logits[static_cast<size_t>(v)] = static_cast<float>(x % 1000) / 400.0f;
      }
    }
    if (delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  }
  bool copy_state(SequenceState& from, SequenceState& to) override {
    if (!can_copy) return false;
    if (throw_on_copy) {
      to.history.push_back(999);  // half done: the scheduler must not use this state
      throw std::runtime_error("out of memory");
    }
    to.pos = from.pos;
    to.history = from.history;
    if (decoding_.count(&from)) decoding_.insert(&to);
    copies++;
    return true;
  }
  std::atomic<int64_t> prompt_tokens{0};
  std::atomic<int> copies{0};
  bool can_copy = true, throw_on_copy = false;
  int delay_ms = 0;

 private:
  std::set<SequenceState*> decoding_;
};

struct Out {
  std::vector<int32_t> tokens;
  FinishInfo finish;
};

GenRequest request(const std::vector<int32_t>& prompt, uint64_t seed, double temperature,
                   std::shared_ptr<PrefillShare> share, std::shared_ptr<Out> out,
                   std::shared_ptr<std::promise<void>> done) {
  GenRequest r;
  r.prompt = prompt;
  r.n_predict = 12;
  r.sampling.temperature = temperature;
  r.sampling.top_k = 0;
  r.sampling.top_p = 1.0;
  r.sampling.min_p = 0.0;
  r.sampling.seed = seed;
  r.share = std::move(share);
  r.on_token = [out](const SampledToken& t) {
    out->tokens.push_back(t.id);
    return true;
  };
  r.on_finish = [out, done](const FinishInfo& f) {
    out->finish = f;
    done->set_value();
  };
  return r;
}

const std::vector<int32_t> kPrompt = {5, 9, 2, 33, 7, 1, 60, 12, 8, 3, 44, 21, 19};

// The member alone: its own scheduler, no share.
std::vector<int32_t> alone(uint64_t seed, double temperature) {
  HistoryEngine e;
  Scheduler s(e, {1, 64, 16, 4}, server::sample_token);
  auto out = std::make_shared<Out>();
  auto done = std::make_shared<std::promise<void>>();
  auto f = done->get_future();
  s.submit(request(kPrompt, seed, temperature, nullptr, out, done));
  f.wait();
  return out->tokens;
}

struct Group {
  std::vector<std::shared_ptr<Out>> outs;
  std::vector<std::shared_ptr<Ticket>> tickets;
  std::vector<std::future<void>> done;
};

Group submit_group(Scheduler& s, int n, double temperature) {
  Group g;
  auto share = std::make_shared<PrefillShare>();
  std::vector<GenRequest> reqs;
  for (int c = 0; c < n; ++c) {
    g.outs.push_back(std::make_shared<Out>());
    auto p = std::make_shared<std::promise<void>>();
    g.done.push_back(p->get_future());
    reqs.push_back(request(kPrompt, 100 + static_cast<uint64_t>(c), temperature, share, g.outs.back(), p));
  }
  g.tickets = s.submit_all(std::move(reqs));
  return g;
}

}  // namespace

TEST(PrefillShare, ChoicesReadThePromptOnceAndSampleIndependently) {
  HistoryEngine e;
  // ubatch 4: the prompt takes four passes, so the members really wait for the leader.
  Scheduler s(e, {4, 64, 16, 4}, server::sample_token);
  Group g = submit_group(s, 4, 1.0);
  for (auto& d : g.done) d.wait();
  EXPECT_EQ(e.prompt_tokens.load(), static_cast<int64_t>(kPrompt.size()));  // one prefill, not four
  EXPECT_EQ(e.copies.load(), 3);
  int cached = 0;
  std::set<std::vector<int32_t>> distinct;
  for (int c = 0; c < 4; ++c) {
    const Out& o = *g.outs[c];
    EXPECT_EQ(o.finish.reason, StopReason::Limit);
    EXPECT_EQ(o.finish.n_prompt, static_cast<int64_t>(kPrompt.size()));
    if (o.finish.n_cached == static_cast<int64_t>(kPrompt.size())) cached++;
    // Exactly the member's own answer with its seed, as if it had read the prompt itself.
    EXPECT_EQ(o.tokens, alone(100 + static_cast<uint64_t>(c), 1.0)) << "choice " << c;
    distinct.insert(o.tokens);
  }
  EXPECT_EQ(cached, 3);  // the leader evaluated the prompt, the three others took it
  EXPECT_GT(distinct.size(), 1u) << "different seeds should give different samples";
  EXPECT_EQ(s.stats().prompt_tokens_total, kPrompt.size());
}

TEST(PrefillShare, GreedyChoicesAreIdentical) {
  HistoryEngine e;
  Scheduler s(e, {3, 64, 16, 4}, server::sample_token);
  Group g = submit_group(s, 3, 0.0);
  for (auto& d : g.done) d.wait();
  EXPECT_EQ(e.prompt_tokens.load(), static_cast<int64_t>(kPrompt.size()));
  EXPECT_EQ(g.outs[0]->tokens, alone(0, 0.0));
  EXPECT_EQ(g.outs[1]->tokens, g.outs[0]->tokens);
  EXPECT_EQ(g.outs[2]->tokens, g.outs[0]->tokens);
}

TEST(PrefillShare, FewerSlotsShareInWaves) {
  HistoryEngine e;
  Scheduler s(e, {2, 64, 16, 4}, server::sample_token);
  Group g = submit_group(s, 4, 1.0);
  for (auto& d : g.done) d.wait();
  // Two members per wave of two slots: two reads (a third or fourth would mean no sharing in a wave).
  EXPECT_EQ(e.prompt_tokens.load(), 2 * static_cast<int64_t>(kPrompt.size()));
  for (int c = 0; c < 4; ++c) EXPECT_EQ(g.outs[c]->tokens, alone(100 + static_cast<uint64_t>(c), 1.0));
}

TEST(PrefillShare, WithoutCopiesEveryMemberReadsItsOwn) {
  HistoryEngine e;
  e.can_copy = false;
  Scheduler s(e, {3, 64, 16, 4}, server::sample_token);
  Group g = submit_group(s, 3, 1.0);
  for (auto& d : g.done) d.wait();
  EXPECT_EQ(e.prompt_tokens.load(), 3 * static_cast<int64_t>(kPrompt.size()));
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(g.outs[c]->tokens, alone(100 + static_cast<uint64_t>(c), 1.0));
    EXPECT_EQ(g.outs[c]->finish.n_cached, 0);
  }
}

TEST(PrefillShare, AFailedCopyReadsThePromptItselfInAFreshState) {
  HistoryEngine e;
  e.throw_on_copy = true;
  Scheduler s(e, {3, 64, 16, 4}, server::sample_token);
  Group g = submit_group(s, 3, 1.0);
  for (auto& d : g.done) d.wait();
  EXPECT_EQ(e.prompt_tokens.load(), 3 * static_cast<int64_t>(kPrompt.size()));
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(g.outs[c]->finish.reason, StopReason::Limit);
    EXPECT_EQ(g.outs[c]->tokens, alone(100 + static_cast<uint64_t>(c), 1.0)) << c;
  }
}

TEST(PrefillShare, ALeaderCancelledWhileReadingHandsTheReadOn) {
  HistoryEngine e;
  e.delay_ms = 50;  // the prompt's four passes take ~200 ms: the cancel lands while it is being read
  Scheduler s(e, {3, 64, 16, 4}, server::sample_token);
  Group g = submit_group(s, 3, 1.0);
  g.tickets[0]->cancel();
  for (auto& d : g.done) d.wait();
  EXPECT_EQ(g.outs[0]->finish.reason, StopReason::Cancelled);
  for (int c = 1; c < 3; ++c) {
    EXPECT_EQ(g.outs[c]->finish.reason, StopReason::Limit);
    EXPECT_EQ(g.outs[c]->tokens, alone(100 + static_cast<uint64_t>(c), 1.0)) << c;
  }
  // The new leader read it once more; the last member still took it from there.
  EXPECT_EQ(e.copies.load(), 1);
}
