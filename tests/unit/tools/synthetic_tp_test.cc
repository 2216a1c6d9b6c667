// `bloomery bench --synthetic <family> --tp N` on CPU ranks: each rank builds only its slices of the random
// model (build_synthetic_rank), and those are the slices of the TP 1 model's weights. For a tiny config of
// every family at TP 2: the ranks are bit-identical to each other at every step (logits and hidden), the
// greedy tokens of the prompt and a few decode steps equal TP 1's on the same synthetic model, the logits are
// close to TP 1's, and the bench grid runs through the TP group (TpGroup + TpStepEngine, as bench.cc drives
// it) with finite logits. A world size the shapes or the stored formats do not divide is refused by name.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "parallel/thread_group.h"
#include "parallel/tp_group.h"
#include "parallel/tp_step_engine.h"
#include "tiny_synthetic.h"
#include "tools/bench_bytes.h"
#include "tools/bench_core.h"
#include "tools/synthetic_model.h"

namespace bloomery::tools {
namespace {

using namespace std::chrono_literals;

struct Trace {
  std::vector<int32_t> tokens;             // greedy tokens after the prompt
  std::vector<std::vector<float>> logits;  // the prompt's last position, then each decode step
  std::vector<std::vector<float>> hidden;  // per step: the hidden rows the forward returned
};

// Prompt, then `steps` greedy decode steps.
Trace greedy(Backend& be, Model& model, int steps) {
  const int64_t V = model.info().vocab_size;
  const std::vector<int32_t> ids = {3, 17, 42, 99, 7, 250, 12, 1, 64};
  auto st = model.new_state(be, 64);
  Trace t;
  ForwardResult r = model.forward(be, *st, ids, false);
  for (int s = 0;; ++s) {
    t.logits.push_back(be.download(r.logits));
    t.hidden.push_back(be.download(r.hidden));
    if (s == steps) break;
    const float* row = t.logits.back().data() + t.logits.back().size() - size_t(V);
    const int32_t next = int32_t(std::max_element(row, row + V) - row);
    t.tokens.push_back(next);
    const int32_t one[1] = {next};
    r = model.forward(be, *st, one, false);
  }
  return t;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

constexpr int kSteps = 4;

class SyntheticTp : public ::testing::TestWithParam<std::string> {};

TEST_P(SyntheticTp, Tp2RanksAgreeAndMatchTp1) {
  const nlohmann::json c = tiny_synthetic(GetParam());
  Trace ref;
  {
    cpu::CpuBackend be(1);
    auto sm = build_synthetic(c, be, SyntheticLayout::Nvidia, {}, 1);
    ref = greedy(be, *sm->model, kSteps);
  }
  const int tp = 2;
  const std::shared_ptr<SyntheticSource> src = make_synthetic_source(c, SyntheticLayout::Nvidia, 1);
  std::vector<Trace> ranks(tp);
  std::vector<uint64_t> weight_bytes(tp);
  ThreadGroup g(tp, 20000ms);
  g.run([&](Communicator& comm) {
    cpu::CpuBackend be(1);
    auto sm = build_synthetic_rank(*src, be, {}, comm.rank(), tp, &comm, 1);
    for (const WeightCost& w : sm->costs) weight_bytes[comm.rank()] += w.stored;
    ranks[comm.rank()] = greedy(be, *sm->model, kSteps);
  });
  ASSERT_EQ(ranks[0].logits.size(), ref.logits.size());
  for (size_t s = 0; s < ref.logits.size(); ++s) {
    ASSERT_TRUE(same_bits(ranks[1].logits[s], ranks[0].logits[s])) << "step " << s;
    ASSERT_TRUE(same_bits(ranks[1].hidden[s], ranks[0].hidden[s])) << "step " << s;
  }
  EXPECT_EQ(ranks[0].tokens, ref.tokens);
  float worst = 0;
  for (size_t s = 0; s < ref.logits.size(); ++s) {
    ASSERT_EQ(ranks[0].logits[s].size(), ref.logits[s].size());
    for (size_t i = 0; i < ref.logits[s].size(); ++i) {
      ASSERT_TRUE(std::isfinite(ranks[0].logits[s][i]));
      const float d = std::fabs(ranks[0].logits[s][i] - ref.logits[s][i]);
      worst = std::max(worst, d / std::max(1.0f, std::fabs(ref.logits[s][i])));
    }
  }
  // Only the order of the row-parallel sums differs from TP 1.
  EXPECT_LE(worst, 1e-4f) << "largest relative logit difference against TP = 1";
  RecordProperty("worst_relative_logit_diff", std::to_string(worst));
  // Each rank holds its slices: the same bytes on both, fewer than the whole model's (the roofline's
  // per-rank bytes), more than half of them (embeddings, norms, routers are replicated).
  EXPECT_EQ(weight_bytes[0], weight_bytes[1]);
  const SyntheticPlan whole = plan_synthetic(c, SyntheticLayout::Nvidia);
  uint64_t whole_bytes = 0;
  for (const WeightCost& w : whole.costs) whole_bytes += w.stored;
  EXPECT_LT(weight_bytes[0], whole_bytes);
  EXPECT_GT(weight_bytes[0], whole_bytes / 3);
}

// bench's own road: a TpGroup whose ranks build through synthetic_load_rank, every step planned by rank 0
// through the step engine, the grid's rows finite.
TEST_P(SyntheticTp, BenchGridRunsThroughTheGroup) {
  const nlohmann::json c = tiny_synthetic(GetParam());
  TpFlags flags;
  flags.tp = 2;
  const TpLayout layout = resolve_tp(flags);
  std::vector<WeightCost> rank0_costs;
  LoadRank load = synthetic_load_rank(make_synthetic_source(c, SyntheticLayout::Nvidia, 1), nullptr, 1,
                                      [&](const SyntheticModel& m, int rank) {
                                        if (rank == 0) rank0_costs = m.costs;
                                      });
  TpGroup group(
      layout, std::move(load), LoadOptions{},
      [](int threads, int) { return std::unique_ptr<Backend>(std::make_unique<cpu::CpuBackend>(threads)); },
      2);
  EXPECT_FALSE(rank0_costs.empty());
  Model& model = *group.model().model;
  EXPECT_EQ(model.info().family, GetParam());
  TpStepEngine steps(*group.comm(), model, group.backend(), 10000ms);
  BenchParams p;
  p.ps = {9};
  p.ns = {3};
  p.ds = {0};
  p.cs = {1, 2};
  p.repeats = 1;
  p.warmup = false;
  const auto rows = run_bench_grid(group.backend(), model, host_hooks(group.backend()), p, nullptr, &steps);
  ASSERT_EQ(rows.size(), 4u);
  for (const BenchRow& r : rows) EXPECT_TRUE(r.finite) << r.test << " c=" << r.conc;
  // The per-rank roofline: rank 0's slices read fewer bytes per step than the whole model.
  const SyntheticPlan whole = plan_synthetic(c, SyntheticLayout::Nvidia);
  const DecodeBytes one = decode_bytes(whole.costs, whole.family, whole.config.text, "cuda", 16, 1);
  const DecodeBytes rank = decode_bytes(rank0_costs, whole.family, whole.config.text, "cuda", 16, 1, 2);
  EXPECT_LT(rank.total(), one.total());
  EXPECT_LE(rank.state, one.state);
}

INSTANTIATE_TEST_SUITE_P(Families, SyntheticTp, ::testing::Values("qwen4_exp", "qwen3_next", "glm5_next"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// A world size the family's shapes do not divide (4 MLA heads over 3 ranks), and one whose cut falls off the
// stored format's unit (experts at I = 8 columns, NVFP4 scale blocks of 16): refused by name, through the
// group as bench builds it, before any rank runs.
TEST(SyntheticTpRefusals, WorldSizeRefusedByName) {
  const nlohmann::json c = tiny_synthetic("glm5_next");
  struct Case {
    int tp;
    std::string phrase;
  };
  for (const Case& k : {Case{3, "4 MLA heads cannot be split over 3 ranks"},
                        Case{4, "multiples of 16 (NVFP4 scale blocks of 16 columns)"}}) {
    TpFlags flags;
    flags.tp = k.tp;
    try {
      TpGroup group(
          resolve_tp(flags),
          synthetic_load_rank(make_synthetic_source(c, SyntheticLayout::Nvidia, 1), nullptr, 1),
          LoadOptions{},
          [](int threads, int) {
            return std::unique_ptr<Backend>(std::make_unique<cpu::CpuBackend>(threads));
          },
          k.tp);
      FAIL() << "tp " << k.tp << " was not refused";
    } catch (const Error& e) {
      EXPECT_EQ(e.id(), "E_TP_CUT") << e.what();
      EXPECT_NE(std::string(e.what()).find(k.phrase), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace bloomery::tools
