// ModelStepEngine over a backend that draws rows where the logits live (as the card does): a sampled decode's
// token is the backend's draw, made in one call per step for every such row with each request's seed and step
// index, and a drawn row is never brought back to the host; a greedy request still takes argmax_last_rows.
#include <algorithm>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "forwarding_backend.h"
#include "models/model_loader.h"
#include "runtime/sampler.h"
#include "runtime/scheduler.h"

namespace bloomery {
namespace {

namespace fs = std::filesystem;

const fs::path kModel = fs::path(BLOOMERY_SOURCE_DIR) / "tests/fixtures/models/qwen3_next-bf16";

class Counting : public test::ForwardingBackend {
 public:
  Counting() : ForwardingBackend(make_cpu_backend(1)) {}
  void on_host_transfer(const char* what) override {
    if (std::string_view(what) == "download") ++downloads;
  }
  int downloads = 0;
};

// Greedy picks where the logits live too (the default argmax_last_rows downloads each row through the hook).
class Picking : public Counting {
 public:
  std::vector<int32_t> argmax_last_rows(std::span<const Tensor> logits) override {
    ++argmax_calls;
    return inner().argmax_last_rows(logits);
  }
  int argmax_calls = 0;
};

// Draws "the argmax moved on by the step" (a deterministic stand-in for the card's draw that differs from
// what the host would pick), and records every call.
class Drawing : public Picking {
 public:
  bool draws_rows() const override { return true; }
  std::vector<int32_t> draw_last_rows(std::span<const Tensor> logits,
                                      std::span<const RowDraw> draws) override {
    EXPECT_EQ(logits.size(), draws.size());
    ++calls;
    std::vector<int32_t> ids = inner().argmax_last_rows(logits);
    for (size_t i = 0; i < ids.size(); ++i) {
      ids[i] = static_cast<int32_t>((ids[i] + draws[i].step) % logits[i].cols());
      drawn[draws[i].seed].push_back(ids[i]);
      steps[draws[i].seed].push_back(draws[i].step);
    }
    return ids;
  }
  int calls = 0;
  std::map<uint64_t, std::vector<int32_t>> drawn;
  std::map<uint64_t, std::vector<uint64_t>> steps;
};

struct Generated {
  std::map<uint64_t, std::vector<int32_t>> tokens;  // by seed
  int downloads = 0;
};

// Two sampled requests (seeds 1 and 2) and a greedy one (seed 3) through one scheduler, side by side.
Generated generate(Counting& be) {
  auto lm = load_model(kModel, be);
  ModelStepEngine engine(*lm->model, be);
  SampleFn host = [](std::span<const float> logits, const SamplingParams&, std::span<const int32_t>,
                     std::mt19937_64&) {
    SampledToken t;
    t.id = argmax(logits);
    return t;
  };
  Scheduler sched(engine, SchedulerConfig{3, 64, 16, 8}, host);
  Generated out;
  std::vector<std::future<void>> done;
  be.downloads = 0;
  for (uint64_t seed : {1, 2, 3}) {
    auto prom = std::make_shared<std::promise<void>>();
    done.push_back(prom->get_future());
    GenRequest r;
    r.prompt = {3, 17, 42, static_cast<int32_t>(seed)};
    r.n_predict = 6;
    r.ignore_eos = true;
    r.sampling.temperature = seed == 3 ? 0.0 : 0.8;
    r.sampling.seed = seed;
    r.on_token = [&out, seed](const SampledToken& t) {
      out.tokens[seed].push_back(t.id);
      return true;
    };
    r.on_finish = [prom](const FinishInfo&) { prom->set_value(); };
    sched.submit(std::move(r));
  }
  for (auto& f : done) f.get();
  out.downloads = be.downloads;
  return out;
}

TEST(EngineDraw, SampledDecodesAreTheBackendsDrawsAndNoRowComesBack) {
  if (!fs::exists(kModel)) GTEST_SKIP() << "no fixture " << kModel;
  Picking plain;  // greedy picks stay on the backend in both runs
  const Generated host = generate(plain);
  Drawing card;
  const Generated drawn = generate(card);
  for (uint64_t seed : {1, 2}) {
    // The first token comes from the prompt's row (the host sampler); the other five are the draws, at steps
    // 1 … 5 of the request.
    ASSERT_EQ(drawn.tokens.at(seed).size(), 6u);
    EXPECT_EQ(std::vector<int32_t>(drawn.tokens.at(seed).begin() + 1, drawn.tokens.at(seed).end()),
              card.drawn[seed])
        << "seed " << seed;
    EXPECT_EQ(card.steps[seed], (std::vector<uint64_t>{1, 2, 3, 4, 5})) << "seed " << seed;
    EXPECT_NE(drawn.tokens.at(seed), host.tokens.at(seed)) << "the draws are the backend's, not the host's";
  }
  EXPECT_EQ(card.drawn.count(3), 0u) << "a greedy request takes the argmax";
  EXPECT_EQ(drawn.tokens.at(3), host.tokens.at(3));
  EXPECT_LE(card.calls, 10) << "one call per step for every drawn row";
  EXPECT_EQ(host.downloads - drawn.downloads, 10) << "each of the 10 drawn rows stayed where it was";
}

// One request of n_predict tokens after {3, 17, 42, 99, 7} through a scheduler over `be` (greedy at
// temperature 0, else seeded 7), drafting 3 a verify at every step when `draft` is given (its hook included);
// the host sampler takes the argmax of a row that comes back.
struct DraftRun {
  std::vector<int32_t> tokens;
  DraftCounts drafts;
};
const std::vector<int32_t> kDraftPrompt = {3, 17, 42, 99, 7};
DraftRun draft_run(Counting& be, const DraftOptions* draft, double temperature, int64_t n_predict) {
  auto lm = load_model(kModel, be);
  ModelStepEngine engine(*lm->model, be);
  SchedulerConfig cfg{1, 64, 16, 8};
  if (draft) {
    engine.enable_drafting(*draft);
    cfg.spec.n_max = draft->n_max;
    cfg.spec.adaptive = false;  // a verify every step
  }
  SampleFn host = [](std::span<const float> logits, const SamplingParams&, std::span<const int32_t>,
                     std::mt19937_64&) {
    SampledToken t;
    t.id = argmax(logits);
    return t;
  };
  Scheduler sched(engine, cfg, host);
  DraftRun out;
  std::promise<FinishInfo> done;
  GenRequest r;
  r.prompt = kDraftPrompt;
  r.n_predict = n_predict;
  r.ignore_eos = true;
  r.sampling.temperature = temperature;
  r.sampling.seed = 7;
  r.on_token = [&out](const SampledToken& t) {
    out.tokens.push_back(t.id);
    return true;
  };
  r.on_finish = [&done](const FinishInfo& f) { done.set_value(f); };
  be.downloads = 0;
  sched.submit(std::move(r));
  EXPECT_EQ(done.get_future().get().n_predicted, n_predict);
  out.drafts = sched.stats().drafts;
  return out;
}

// A greedy request with MTP drafting: the drafts and every verify row are picked by the backend's argmax, so
// no row of logits comes back but the prompt's last (the first token is the host sampler's); the tokens are
// those of the run without drafting.
TEST(EngineDraw, GreedyDraftsAndVerifyRowsArePickedWhereTheLogitsLive) {
  if (!fs::exists(kModel)) GTEST_SKIP() << "no fixture " << kModel;
  Picking plain, drafted;
  DraftOptions d;
  d.n_max = 3;
  const std::vector<int32_t> want = draft_run(plain, nullptr, 0.0, 24).tokens;
  EXPECT_EQ(draft_run(drafted, &d, 0.0, 24).tokens, want);
  EXPECT_EQ(drafted.downloads, 1) << "only the prompt's last row came back";
  EXPECT_GT(drafted.argmax_calls, 0);
}

// A sampled request with MTP drafting on a backend that draws where the logits live: every verify row is
// drawn there at the index of the token it would give (row j of a round at its first index + j), so the
// tokens are those of the run without drafting, drafts forced right are accepted and forced wrong rejected,
// and no row of logits comes back but the prompt's last.
TEST(EngineDraw, SampledDraftsAndVerifyRowsAreDrawnWhereTheLogitsLive) {
  if (!fs::exists(kModel)) GTEST_SKIP() << "no fixture " << kModel;
  const int64_t P = static_cast<int64_t>(kDraftPrompt.size()), n_predict = 24;
  Drawing plain, drafted;
  const DraftRun want = draft_run(plain, nullptr, 0.8, n_predict);
  ASSERT_EQ(static_cast<int64_t>(want.tokens.size()), n_predict);
  DraftOptions d;
  d.n_max = 3;
  d.hook = [&](int64_t pos, int j, int32_t draft) -> int32_t {
    const int64_t i = pos - P;
    if (i < 0 || i >= n_predict) return draft;
    if ((i + j) % 3 == 2) return want.tokens[i] == 0 ? 1 : want.tokens[i] - 1;  // forced reject
    return want.tokens[i];                                                      // forced accept
  };
  const DraftRun got = draft_run(drafted, &d, 0.8, n_predict);
  EXPECT_EQ(got.tokens, want.tokens);
  uint64_t accepted = 0;
  for (uint64_t a : got.drafts.accepted) accepted += a;
  EXPECT_GT(accepted, 0u);
  EXPECT_LT(accepted, got.drafts.drafted_total()) << "some drafts were forced wrong";
  EXPECT_EQ(drafted.downloads, 1) << "only the prompt's last row came back";
  // Every token after the first (the prompt row's, drawn by the host) was drawn at its own index; the rows
  // after a rejection were drawn too and are drawn again in the next round at the same indices.
  std::vector<uint64_t> steps = drafted.steps.at(7);
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps.front(), 1u);
  EXPECT_GE(steps.back(), static_cast<uint64_t>(n_predict - 1));
  EXPECT_EQ(steps.size(), steps.back()) << "no index skipped";
}

}  // namespace
}  // namespace bloomery
