// Prompt reads the scheduler saves, over an engine whose logits depend on the whole history (so a wrong fork
// or a wrong resume shows) and that counts the prompt tokens it reads:
//  * n > 1 choices of one prompt share its prefill (PrefillShare): n members cost one prompt read and n - 1
//    state copies, and each member's tokens are exactly what it gives alone with its seed (independent
//    samples; greedy members are identical). Fewer slots than members, an engine that cannot copy, and a
//    leader cancelled while reading still give every member its own full answer.
//  * the prompt cache: a finished request's slot keeps its state and a snapshot at its prompt's end; a prompt
//    that extends that state's whole history, or else that prompt, reads only the rest, with exactly the
//    tokens it gives alone; anything else reads it all.
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
    decoding_.erase(s.get());  // a freed state's address may come back: it starts in its prompt again
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
  std::unique_ptr<StateCheckpoint> snapshot(SequenceState& st) override {
    if (!can_snapshot) return nullptr;
    auto cp = std::make_unique<StateCheckpoint>();
    cp->pos = st.pos;
    cp->history = st.history;
    return cp;
  }
  bool restore(SequenceState& st, const StateCheckpoint& cp) override {
    st.pos = cp.pos;
    st.history = cp.history;
    restores++;
    return true;
  }
  std::atomic<int64_t> prompt_tokens{0};
  std::atomic<int> copies{0}, restores{0};
  bool can_snapshot = true;
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

// One request through `s`, waited for.
Out run_one(Scheduler& s, const std::vector<int32_t>& prompt, uint64_t seed, double temperature = 1.0,
            bool cache_prompt = true, int id_slot = -1) {
  auto out = std::make_shared<Out>();
  auto done = std::make_shared<std::promise<void>>();
  auto f = done->get_future();
  GenRequest r = request(prompt, seed, temperature, nullptr, out, done);
  r.cache_prompt = cache_prompt;
  r.id_slot = id_slot;
  s.submit(std::move(r));
  f.wait();
  return *out;
}

// The member alone: its own scheduler, no share.
std::vector<int32_t> alone(uint64_t seed, double temperature, const std::vector<int32_t>& prompt = kPrompt) {
  HistoryEngine e;
  Scheduler s(e, {1, 64, 16, 4}, server::sample_token);
  return run_one(s, prompt, seed, temperature).tokens;
}

// The next turn of a chat: the prompt, the answer, then new tokens.
std::vector<int32_t> next_turn(const std::vector<int32_t>& prompt, const std::vector<int32_t>& answer,
                               std::vector<int32_t> more) {
  std::vector<int32_t> p = prompt;
  p.insert(p.end(), answer.begin(), answer.end());
  p.insert(p.end(), more.begin(), more.end());
  return p;
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

TEST(PromptCache, TheNextTurnReadsOnlyWhatFollowsTheKeptHistory) {
  HistoryEngine e;
  Scheduler s(e, {1, 64, 16, 4}, server::sample_token);
  const Out first = run_one(s, kPrompt, 7);
  ASSERT_EQ(first.finish.reason, StopReason::Limit);
  EXPECT_EQ(first.finish.n_cached, 0);
  const int64_t read_before = e.prompt_tokens.load();
  // The state consumed the prompt and every answer token but the last (sampled, never fed).
  const auto p2 = next_turn(kPrompt, first.tokens, {4, 50, 6});
  const Out second = run_one(s, p2, 8);
  const int64_t kept = static_cast<int64_t>(kPrompt.size() + first.tokens.size()) - 1;
  EXPECT_EQ(second.finish.n_cached, kept);
  EXPECT_EQ(second.finish.n_prompt, static_cast<int64_t>(p2.size()));
  EXPECT_EQ(e.prompt_tokens.load() - read_before, static_cast<int64_t>(p2.size()) - kept);
  EXPECT_EQ(second.tokens, alone(8, 1.0, p2)) << "a resumed state must answer as a fresh read does";
  // A third turn resumes from the second's state the same way.
  const auto p3 = next_turn(p2, second.tokens, {9, 9});
  const Out third = run_one(s, p3, 9);
  EXPECT_EQ(third.finish.n_cached, static_cast<int64_t>(p2.size() + second.tokens.size()) - 1);
  EXPECT_EQ(third.tokens, alone(9, 1.0, p3));
}

TEST(PromptCache, APromptThatLeavesTheHistoryReadsItAll) {
  HistoryEngine e;
  Scheduler s(e, {1, 64, 16, 4}, server::sample_token);
  const Out first = run_one(s, kPrompt, 7);
  // Shares all but the last prompt token: recurrent state cannot be cut back, so nothing is reused.
  std::vector<int32_t> p2(kPrompt.begin(), kPrompt.end() - 1);
  p2.push_back(63);
  const int64_t before = e.prompt_tokens.load();
  const Out second = run_one(s, p2, 8);
  EXPECT_EQ(second.finish.n_cached, 0);
  EXPECT_EQ(e.prompt_tokens.load() - before, static_cast<int64_t>(p2.size()));
  EXPECT_EQ(second.tokens, alone(8, 1.0, p2));
  // A prompt exactly equal to the kept history leaves no token to read for the first logits: the live state
  // does not serve it, the snapshot at its prompt's end does.
  std::vector<int32_t> p3 = next_turn(p2, second.tokens, {});
  p3.pop_back();
  const Out again = run_one(s, p3, 8);
  EXPECT_EQ(again.finish.n_cached, static_cast<int64_t>(p2.size()));
  EXPECT_EQ(again.tokens, alone(8, 1.0, p3));
}

TEST(PromptCache, OffPerRequestOrForTheServerReadsEveryPrompt) {
  for (bool server_on : {true, false}) {
    HistoryEngine e;
    SchedulerConfig cfg{1, 64, 16, 4};
    cfg.cache_prompt = server_on;
    Scheduler s(e, cfg, server::sample_token);
    const Out first = run_one(s, kPrompt, 7);
    const auto p2 = next_turn(kPrompt, first.tokens, {4, 50});
    const int64_t before = e.prompt_tokens.load();
    const Out second = run_one(s, p2, 8, 1.0, /*cache_prompt=*/!server_on);  // off one way or the other
    EXPECT_EQ(second.finish.n_cached, 0) << server_on;
    EXPECT_EQ(e.prompt_tokens.load() - before, static_cast<int64_t>(p2.size())) << server_on;
    EXPECT_EQ(second.tokens, alone(8, 1.0, p2)) << server_on;
  }
}

TEST(PromptCache, TheSlotWhoseStateFitsIsChosenOverTheLeastRecentlyUsed) {
  HistoryEngine e;
  Scheduler s(e, {2, 64, 16, 4}, server::sample_token);
  const std::vector<int32_t> other = {1, 2, 3, 4, 5, 6, 7, 8};
  const Out a = run_one(s, kPrompt, 7);  // slot 0
  const Out b = run_one(s, other, 7);    // slot 1 (slot 0 is now the least recently used)
  EXPECT_NE(a.finish.slot, b.finish.slot);
  const Out next = run_one(s, next_turn(other, b.tokens, {30, 31}), 8);
  EXPECT_EQ(next.finish.slot, b.finish.slot);
  EXPECT_EQ(next.finish.n_cached, static_cast<int64_t>(other.size() + b.tokens.size()) - 1);
  // A request naming the other slot resumes there only if that slot's state fits: here it does not.
  const Out named = run_one(s, next_turn(other, b.tokens, {30, 31}), 8, 1.0, true, a.finish.slot);
  EXPECT_EQ(named.finish.slot, a.finish.slot);
  EXPECT_EQ(named.finish.n_cached, 0);
  EXPECT_EQ(named.tokens, next.tokens);
}

TEST(PromptCache, APromptThatExtendsTheLastPromptResumesFromItsSnapshot) {
  for (bool snapshots : {true, false}) {
    HistoryEngine e;
    e.can_snapshot = snapshots;
    Scheduler s(e, {1, 64, 16, 4}, server::sample_token);
    const Out first = run_one(s, kPrompt, 7);
    // The same conversation with another answer in its place (a template that drops reasoning, a retry).
    const auto p2 = next_turn(kPrompt, {40, 41, 42}, {43, 44, 45});  // 6 to read: chunks of 4 and 2
    const int64_t before = e.prompt_tokens.load();
    const Out second = run_one(s, p2, 8);
    const int64_t taken = snapshots ? static_cast<int64_t>(kPrompt.size()) : 0;
    EXPECT_EQ(second.finish.n_cached, taken) << snapshots;
    EXPECT_EQ(e.restores.load(), snapshots ? 1 : 0);
    EXPECT_EQ(e.prompt_tokens.load() - before, static_cast<int64_t>(p2.size()) - taken) << snapshots;
    EXPECT_EQ(second.tokens, alone(8, 1.0, p2)) << snapshots;
    // Its own next turn extends the live state again, and a prompt that extends the newest prompt (not the
    // first) resumes from the newest snapshot.
    const auto p3 = next_turn(p2, second.tokens, {5, 6});
    const Out third = run_one(s, p3, 9);
    EXPECT_EQ(third.finish.n_cached, static_cast<int64_t>(p2.size() + second.tokens.size()) - 1);
    const auto p4 = next_turn(p3, {1, 2}, {3, 4});
    const Out fourth = run_one(s, p4, 10);
    EXPECT_EQ(fourth.finish.n_cached, snapshots ? static_cast<int64_t>(p3.size()) : 0) << snapshots;
    EXPECT_EQ(fourth.tokens, alone(10, 1.0, p4)) << snapshots;
  }
}
