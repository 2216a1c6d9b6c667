// bloomery bench --spec-rows on the CPU fixtures that ship a draft layer (qwen4_exp-bf16, qwen3_next-bf16):
// the verifyK and draft rows exist after their tg row with positive, finite times and ratios; every verify is
// rolled back to its depth (the tg steps that follow are bit for bit those of a run without spec rows, and
// the tg row ends at the same depth); a model without a draft layer skips the draft row by name; bad widths
// are refused naming the flag.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../../common/fixture_folders.h"
#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "models/model_loader.h"
#include "no_draft_model.h"
#include "tools/bench_core.h"

namespace bloomery::tools {
namespace {

BenchParams spec_params(std::vector<int64_t> widths) {
  BenchParams p;
  p.ps = {0};
  p.ns = {3};
  p.ds = {5};
  p.cs = {1};
  p.repeats = 2;
  p.spec_rows = std::move(widths);
  return p;
}

// The tg steps' last logits rows, in order, through BenchHooks::on_tg_step.
std::vector<std::vector<float>> tg_logits(Backend& be, Model& m, const BenchParams& p,
                                          std::vector<BenchRow>* rows = nullptr) {
  std::vector<std::vector<float>> out;
  BenchHooks h = host_hooks(be);
  h.on_tg_step = [&](std::span<const Tensor> logits) {
    const Tensor& t = logits.back();
    out.push_back(be.download(t.view({t.rows(), t.cols()}).slice(t.rows() - 1, 1)));
  };
  std::vector<BenchRow> r = run_bench_grid(be, m, h, p);
  if (rows) *rows = std::move(r);
  return out;
}

class BenchSpec : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    be_ = make_cpu_backend(2);
    lm_ = load_model(testing_fixtures::models_root() / GetParam(), *be_);
    ASSERT_TRUE(lm_->model->info().has_draft) << GetParam();
  }
  std::unique_ptr<Backend> be_;
  std::unique_ptr<LoadedModel> lm_;
};

TEST_P(BenchSpec, RowsAreTimedAndEveryVerifyIsRolledBack) {
  Model& m = *lm_->model;
  std::vector<BenchRow> rows;
  const auto with_spec = tg_logits(*be_, m, spec_params({2, 4}), &rows);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].test, "tg3");
  EXPECT_EQ(rows[1].test, "verify2");
  EXPECT_EQ(rows[2].test, "verify4");
  EXPECT_EQ(rows[3].test, "draft");
  EXPECT_EQ(rows[0].depth_end, 5 + 2 * 3);  // the verifies left the decode where it was
  for (size_t i = 1; i < rows.size(); ++i) {
    const BenchRow& r = rows[i];
    EXPECT_TRUE(is_spec_row(r));
    EXPECT_FALSE(r.skipped) << r.test;
    EXPECT_TRUE(r.finite) << r.test;
    EXPECT_EQ(r.ref, "tg3");
    EXPECT_EQ(r.conc, 1);
    EXPECT_EQ(r.depth, 5 + 3) << r.test;  // measured after each repeat, at the depth it reached
    EXPECT_EQ(r.depth_end, 5 + 2 * 3) << r.test;
    ASSERT_EQ(r.ms.size(), 6u) << r.test;  // 2 repeats × n = 3 samples
    for (double ms : r.ms) EXPECT_TRUE(std::isfinite(ms) && ms > 0) << r.test;
    EXPECT_TRUE(std::isfinite(r.ratio) && r.ratio > 0) << r.test;
    EXPECT_EQ(r.step, "eager") << r.test;  // the CPU backend has no step graphs
  }
  for (size_t i : {1, 2}) {
    const BenchRow& r = rows[i];
    EXPECT_EQ(r.tokens, i == 1 ? 2 : 4);
    ASSERT_EQ(r.rollback_ms.size(), r.ms.size());
    for (size_t j = 0; j < r.ms.size(); ++j)
      EXPECT_TRUE(r.rollback_ms[j] > 0 && r.rollback_ms[j] <= r.ms[j]) << r.test;
  }
  // The same grid without spec rows: every tg step's logits are the same, bit for bit.
  const auto plain = tg_logits(*be_, m, spec_params({}));
  ASSERT_EQ(with_spec.size(), plain.size());
  ASSERT_EQ(plain.size(), 4u + 6u);  // the warm-up's 4 steps, then 2 repeats × 3
  for (size_t s = 0; s < plain.size(); ++s) EXPECT_EQ(with_spec[s], plain[s]) << "tg step " << s;
}

TEST_P(BenchSpec, WithoutADraftLayerTheDraftRowIsSkipped) {
  NoDraft m(*lm_->model);
  BenchParams p = spec_params({3});
  p.warmup = false;
  const auto rows = run_bench_grid(*be_, m, host_hooks(*be_), p);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[1].test, "verify3");
  EXPECT_FALSE(rows[1].skipped);
  EXPECT_EQ(rows[1].ms.size(), 6u);
  EXPECT_EQ(rows[2].test, "draft");
  EXPECT_TRUE(rows[2].skipped);
  EXPECT_EQ(rows[2].skip_reason, "no MTP/NextN draft layer");
  EXPECT_TRUE(rows[2].ms.empty());
}

// With --ab the spec rows run in both settings, each sample in the setting it is named for, its ratio against
// its own tg row.
TEST_P(BenchSpec, UnderAbTheSpecRowsRunInBothSettings) {
  BenchParams p = spec_params({2});
  p.warmup = false;
  p.ab = "knob";
  BenchHooks h = host_hooks(*be_);
  bool candidate = false;
  std::vector<bool> toggles;
  h.set_ab = [&](bool on) {
    candidate = on;
    toggles.push_back(on);
  };
  const auto rows = run_bench_grid(*be_, *lm_->model, h, p);
  std::vector<std::string> names;
  for (const BenchRow& r : rows) names.push_back(r.test);
  EXPECT_EQ(names,
            (std::vector<std::string>{"tg3", "tg3+knob", "verify2", "draft", "verify2+knob", "draft+knob"}));
  for (const BenchRow& r : rows) {
    if (!is_spec_row(r)) continue;
    const bool knob = r.test.find("+knob") != std::string::npos;
    EXPECT_EQ(r.ref, knob ? "tg3+knob" : "tg3") << r.test;
    EXPECT_EQ(r.ms.size(), 6u) << r.test;
    const BenchRow& tg = rows[knob ? 1 : 0];
    EXPECT_DOUBLE_EQ(r.ratio, percentile(r.ms, 0.5) / percentile(tg.ms, 0.5)) << r.test;
  }
  // Per repeat: main's tg, the candidate's tg, back, main's spec rows, then the candidate's and back.
  EXPECT_EQ(toggles, (std::vector<bool>{false, true, false, true, false, false, true, false, true, false}));
  EXPECT_FALSE(candidate);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BenchSpec, ::testing::Values("qwen4_exp-bf16", "qwen3_next-bf16"),
                         testing_fixtures::param_name);

void expect_refused(const BenchParams& p, const std::string& found) {
  try {
    check_params(p);
    FAIL() << "accepted " << found;
  } catch (const Error& e) {
    EXPECT_EQ(e.info().id, "E_BENCH_ARGS");
    EXPECT_NE(std::string(e.what()).find("--spec-rows"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(found), std::string::npos) << e.what();
  }
}

TEST(BenchSpecArgs, BadWidthsAreRefusedNamingTheFlag) {
  expect_refused(spec_params({0}), "0");
  expect_refused(spec_params({4, 99}), "99");
  expect_refused(spec_params({1}), "1");
  BenchParams no_c1 = spec_params({4});
  no_c1.cs = {2, 4};
  expect_refused(no_c1, "no 1 in -c");
  EXPECT_NO_THROW(check_params(spec_params({2, 9})));
  // run_bench_grid refuses before it builds or runs anything.
  auto be = make_cpu_backend(1);
  auto lm = load_model(testing_fixtures::models_root() / "qwen4_exp-bf16", *be);
  EXPECT_THROW(run_bench_grid(*be, *lm->model, host_hooks(*be), spec_params({99})), Error);
}

}  // namespace
}  // namespace bloomery::tools
