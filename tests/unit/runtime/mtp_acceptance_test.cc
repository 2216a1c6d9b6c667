// Issue 13's acceptance target on the trained models (tests/fixtures/trained/, issue 14): the engine's MTP
// acceptance equals the reference acceptance of the trained draft layer that the training run stored in the
// goldens (`mtp.acceptance`, reference/trained/train.py: acceptance()).
//  * The reference statistic itself: on greedy continuations of four held-out prompts (ACCEPT_SEQS 4 of 24
//    tokens at held-out token 997·j, ACCEPT_NEW 40 tokens each), at every position the engine's draft
//    (ModelStepEngine::draft, the scheduler's proposal) chains 4 tokens; a_t = its leading drafts equal to
//    the continuation; acceptance at k = mean(min(a_t, k)) / k. The CPU engine computes the f32 reference's
//    numbers, so it must equal them up to a draft near-tie or two (kCpuBand); a device, within the sampling
//    noise of the statistic (2 binomial standard errors over its positions).
//  * What the scheduler measures while it drafts (a greedy request's draft_n_accepted / draft_n at k = 1) is
//    that reference at the positions where its rounds drafted: each draft is the reference chain's first at
//    its position, and accepted exactly where that one matches. A round starts only where the last one ended,
//    so those positions are a subset, and the measured rate differs from the all-positions number by their
//    choice (printed).
// Skips while the trained folders or their goldens are absent. BLOOMERY_SPEC_BACKEND=cuda runs it on the
// card.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../../common/fixture_folders.h"
#include "../../common/spec_backend.h"
#include "../../golden/golden_file.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/select/backend_choice.h"
#include "models/model_loader.h"
#include "runtime/sampler.h"
#include "runtime/scheduler.h"

namespace bloomery {
namespace {

namespace fs = std::filesystem;

constexpr int kSeqs = 4, kPromptTokens = 24, kPromptStride = 997, kNew = 40, kChain = 4;
// The CPU engine against the f32 reference: two positions' drafts (of ~156) may part at a near-tie.
constexpr double kCpuBand = 2.0 / (kSeqs * (kNew - 1));

fs::path trained_root() {
  return testing_fixtures::models_root().parent_path() / "trained";
}

// Trained folders whose goldens hold the reference acceptance; {"none"} when there are none.
std::vector<std::string> trained_with_acceptance() {
  std::vector<std::string> out;
  const fs::path gold = trained_root() / "goldens";
  if (fs::is_directory(gold))
    for (const auto& e : fs::directory_iterator(gold)) {
      const std::string name = e.path().stem().string();
      if (e.path().extension() != ".safetensors" || !fs::is_directory(trained_root() / name)) continue;
      if (test::read_goldens(e.path().string()).count("mtp.acceptance")) out.push_back(name);
    }
  std::sort(out.begin(), out.end());
  if (out.empty()) out.push_back("none");
  return out;
}

class MtpAcceptance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "none") GTEST_SKIP() << "no trained folders with goldens under " << trained_root();
    const fs::path dir = trained_root() / GetParam();
    const std::string be = spec_backend_name();
    if (be != "cpu") {
      const auto missing = missing_family_ops(be, folder_model_type(dir));
      if (!missing.empty()) GTEST_SKIP() << be << " lacks " << missing[0] << " for " << GetParam();
    }
    golden_ = test::read_goldens((trained_root() / "goldens" / (GetParam() + ".safetensors")).string());
    be_ = be == "cpu" ? make_cpu_backend(2) : make_backend(be, 0);
    lm_ = load_model(dir, *be_);
    ASSERT_TRUE(lm_->model->info().has_draft) << GetParam();
    const std::vector<int64_t>& held = golden_.at("ppl.ids").i64;
    ASSERT_GE(held.size(), static_cast<size_t>((kSeqs - 1) * kPromptStride + kPromptTokens));
    for (int j = 0; j < kSeqs; ++j)
      prompts_.emplace_back(held.begin() + j * kPromptStride,
                            held.begin() + j * kPromptStride + kPromptTokens);
    reference_ = golden_.at("mtp.acceptance").f32;
    ASSERT_EQ(reference_.size(), static_cast<size_t>(kChain));
  }

  // The last row's logits of `ids` fed to `st` as one plain item.
  std::vector<float> feed(ModelStepEngine& e, SequenceState& st, std::vector<int32_t> ids) {
    StepItem it;
    it.state = &st;
    it.ids = std::move(ids);
    it.want_logits = true;
    std::vector<StepItem> items{it};
    e.forward(items);
    EXPECT_EQ(items[0].error, "");
    return items[0].logits;
  }

  // Within the statistic's sampling noise: 2 binomial standard errors of p over n positions (at least
  // kCpuBand on the CPU, at most it when `exact`).
  static double band(double p, double n, bool exact) {
    return exact ? kCpuBand : std::max(kCpuBand, 2.0 * std::sqrt(p * (1.0 - p) / n));
  }

  // A prompt's greedy continuation s (|p| + kNew tokens) and, at each position t = |p| − 1 … |s| − 3 (its
  // next token s[t+1] known), the kChain drafts the engine chains from there for s[t+2 …], before s[t+1] is
  // fed: chains[t − (|p| − 1)].
  struct Chains {
    std::vector<int32_t> s;
    std::vector<std::vector<int32_t>> chains;
  };
  Chains chains(const std::vector<int32_t>& p) {
    ModelStepEngine e(*lm_->model, *be_);
    e.enable_drafting({.n_max = kChain});
    auto st = e.new_state(kPromptTokens + kNew + 8);
    Chains c{p, {}};
    c.s.push_back(argmax(feed(e, *st, p)));
    for (int i = 1; i < kNew; ++i) {
      c.chains.push_back(e.draft(*st, c.s.back(), kChain));
      c.s.push_back(argmax(feed(e, *st, {c.s.back()})));
    }
    return c;
  }

  // The leading drafts of the chain at t that equal the continuation.
  static int matched(const Chains& c, size_t t) {
    const std::vector<int32_t>& d = c.chains[t - (kPromptTokens - 1)];
    int n = 0;
    while (n < static_cast<int>(d.size()) && t + 2 + n < c.s.size() && d[n] == c.s[t + 2 + n]) ++n;
    return n;
  }

  std::map<std::string, test::GoldenTensor> golden_;
  std::unique_ptr<Backend> be_;
  std::unique_ptr<LoadedModel> lm_;
  std::vector<std::vector<int32_t>> prompts_;
  std::vector<float> reference_;
};

TEST_P(MtpAcceptance, EveryPositionsDraftChainMatchesTheReferenceAcceptance) {
  double acc[kChain] = {};
  int positions = 0;
  for (const std::vector<int32_t>& p : prompts_) {
    const Chains c = chains(p);
    for (size_t t = kPromptTokens - 1; t + 3 <= c.s.size(); ++t, ++positions)
      for (int k = 0; k < kChain; ++k)
        acc[k] += static_cast<double>(std::min(matched(c, t), k + 1)) / (k + 1);
  }
  ASSERT_EQ(positions, kSeqs * (kNew - 1));
  const bool cpu = spec_backend_name() == "cpu";
  for (int k = 0; k < kChain; ++k) {
    const double got = acc[k] / positions, want = reference_[k];
    std::printf("    %s: acceptance at k = %d: engine %.4f, reference %.4f (%d positions)\n",
                GetParam().c_str(), k + 1, got, want, positions);
    EXPECT_LE(std::fabs(got - want), band(want, positions, cpu)) << "k = " << k + 1;
  }
}

TEST_P(MtpAcceptance, TheSchedulersMeasuredAcceptanceIsTheReferenceAtItsDraftedPositions) {
  // Where the scheduler drafted: the hook sees every draft with its position (returned unchanged).
  std::vector<std::pair<int64_t, int32_t>> drafts;
  ModelStepEngine e(*lm_->model, *be_);
  e.enable_drafting({.n_max = 1, .hook = [&](int64_t pos, int, int32_t d) {
                       drafts.emplace_back(pos, d);
                       return d;
                     }});
  SchedulerConfig cfg;
  cfg.n_ctx_slot = kPromptTokens + kNew + 8;
  cfg.spec.n_max = 1;
  cfg.spec.adaptive = false;  // a draft every round: the measured rate is the layer's, not the width rule's
  Scheduler sched(e, cfg,
                  [](std::span<const float> logits, const SamplingParams&, std::span<const int32_t>,
                     std::mt19937_64&) { return SampledToken{argmax(logits)}; });
  int64_t drafted = 0, accepted = 0, same_draft = 0, expected = 0;
  for (const std::vector<int32_t>& p : prompts_) {
    drafts.clear();
    std::vector<int32_t> out;
    std::promise<FinishInfo> done;
    GenRequest req;
    req.prompt = p;
    req.n_predict = kNew;
    req.sampling.temperature = 0.0;
    req.ignore_eos = true;
    req.on_token = [&](const SampledToken& t) {
      out.push_back(t.id);
      return true;
    };
    req.on_finish = [&](const FinishInfo& f) { done.set_value(f); };
    sched.submit(std::move(req));
    const FinishInfo f = done.get_future().get();
    ASSERT_EQ(f.error, "");
    drafted += f.draft_n;
    accepted += f.draft_n_accepted;
    // The reference at the drafted positions: the chain drafted at t = pos − 2 (its first draft is for pos).
    const Chains c = chains(p);
    ASSERT_EQ(std::vector<int32_t>(c.s.begin() + kPromptTokens, c.s.end()), out)
        << "drafting changed the text";
    for (const auto& [pos, d] : drafts) {
      const size_t t = static_cast<size_t>(pos) - 2;
      ASSERT_GE(t, static_cast<size_t>(kPromptTokens - 1));
      same_draft += d == c.chains[t - (kPromptTokens - 1)].at(0);
      expected += matched(c, t) > 0;
    }
  }
  ASSERT_GT(drafted, kSeqs * kNew / 3) << "too few rounds drafted to measure";
  const double n = static_cast<double>(drafted), got = static_cast<double>(accepted) / n,
               want = static_cast<double>(expected) / n;
  std::printf(
      "    %s: scheduler at k = 1: %lld of %lld drafts accepted (%.4f); the reference at those positions "
      "%.4f, at every position %.4f; %lld drafts equal the reference chain's\n",
      GetParam().c_str(), static_cast<long long>(accepted), static_cast<long long>(drafted), got, want,
      reference_[0], static_cast<long long>(same_draft));
  const bool cpu = spec_backend_name() == "cpu";
  if (cpu) EXPECT_EQ(same_draft, drafted) << "a draft differs from the reference chain's at its position";
  EXPECT_LE(std::fabs(got - want), band(want, n, cpu));
}

INSTANTIATE_TEST_SUITE_P(Trained, MtpAcceptance, ::testing::ValuesIn(trained_with_acceptance()),
                         testing_fixtures::param_name);

}  // namespace
}  // namespace bloomery
