// The scheduler's readahead: a prompt's first chunk is named before its step, every later chunk at the end of
// the step before it (the state has then moved past the previous chunk, so the rows are exact), each once;
// decode steps give no hint.
#include <future>
#include <mutex>

#include <gtest/gtest.h>

#include "runtime/scheduler.h"
#include "server/sampling.h"

using namespace bloomery;

namespace {

struct PrefetchEngine : StepEngine {
  int64_t vocab_size() const override { return 16; }
  std::unique_ptr<SequenceState> new_state(int64_t capacity) override {
    auto s = std::make_unique<SequenceState>();
    s->capacity = capacity;
    return s;
  }
  void forward(std::span<StepItem> items) override {
    std::lock_guard lk(mu);
    for (auto& it : items) {
      events.push_back("forward " + std::to_string(it.state->pos) + "+" + std::to_string(it.ids.size()));
      it.state->pos += static_cast<int64_t>(it.ids.size());
      if (it.want_logits) it.logits.assign(16, 0.0f);
    }
  }
  void prefetch(SequenceState& state, std::span<const int32_t> ids) override {
    std::lock_guard lk(mu);
    std::string e = "prefetch " + std::to_string(state.pos) + ":";
    for (int32_t id : ids) e += " " + std::to_string(id);
    events.push_back(e);
  }
  std::mutex mu;
  std::vector<std::string> events;
};

}  // namespace

TEST(SchedulerPrefetch, NamesEveryPromptChunkOnceBeforeItsForward) {
  PrefetchEngine e;
  std::promise<void> done;
  {
    Scheduler s(e, {1, 64, 64, 4}, server::sample_token);  // ubatch 4
    GenRequest r;
    r.prompt = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    r.n_predict = 2;
    r.sampling.temperature = 0.0;
    r.on_finish = [&](const FinishInfo&) { done.set_value(); };
    s.submit(std::move(r));
    done.get_future().get();
  }
  const std::vector<std::string> want = {
      "prefetch 0: 0 1 2 3", "forward 0+4",     "prefetch 4: 4 5 6 7",
      "forward 4+4",         "prefetch 8: 8 9", "forward 8+2",
      "forward 10+1",  // decode: no hint
  };
  EXPECT_EQ(e.events, want);
}
