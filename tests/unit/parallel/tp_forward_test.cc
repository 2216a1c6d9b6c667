// TP on CPU ranks (ThreadGroup, one CpuBackend per rank): every fixture × world size either runs, with the
// ranks bit-identical to each other at every step (logits and the hidden handed to the draft layer), greedy
// tokens equal to TP = 1's and logits within 1e-5 of them; or is refused by name before anything loads.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "models/model_loader.h"
#include "parallel/thread_group.h"

namespace bloomery {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const fs::path kModels = fs::path(BLOOMERY_SOURCE_DIR) / "tests/fixtures/models";

struct Trace {
  std::vector<int32_t> tokens;             // greedy tokens after the prompt
  std::vector<std::vector<float>> logits;  // per step: the prompt's every position, then each decode step
  std::vector<std::vector<float>> hidden;  // per step: the hidden rows handed to the draft layer
  bool has_draft = false;
  std::vector<std::vector<float>> draft;  // per step: the draft layer's logits over that step's hidden rows
};

int32_t argmax_last(const std::vector<float>& l, int64_t V) {
  const float* row = l.data() + l.size() - size_t(V);
  return int32_t(std::max_element(row, row + V) - row);
}

// Prompt (all positions' logits), then `steps` greedy decode steps.
Trace greedy(Backend& be, LoadedModel& lm, int steps) {
  const int64_t V = lm.model->info().vocab_size;
  std::vector<int32_t> ids = {3, 17, 42, 99, 7, 250, 12, 1, 64, 300, 5, 8};
  auto st = lm.model->new_state(be, 64);
  Trace t;
  t.has_draft = lm.model->info().has_draft;
  ForwardResult r = lm.model->forward(be, *st, ids, true);
  for (int s = 0;; ++s) {
    t.logits.push_back(be.download(r.logits));
    t.hidden.push_back(be.download(r.hidden));
    if (s == steps) break;
    const int32_t next = argmax_last(t.logits.back(), V);
    t.tokens.push_back(next);
    if (t.has_draft) {
      // The draft layer over this step's rows, each with the token after it (as the draft queue runs it).
      std::vector<int32_t> after(ids.begin() + 1, ids.end());
      if (s > 0) after.clear();
      after.push_back(next);
      st->draft_pos = st->pos - r.hidden.rows();
      t.draft.push_back(be.download(lm.model->draft(be, *st, r.hidden, after).logits));
    }
    const int32_t one[1] = {next};
    r = lm.model->forward(be, *st, one, false);
  }
  return t;
}

Trace run_tp1(const fs::path& folder, int steps) {
  cpu::CpuBackend be(1);
  LoadOptions o;
  o.progress = ProgressMode::Quiet;
  auto lm = load_model(folder, be, o);
  return greedy(be, *lm, steps);
}

std::vector<Trace> run_tp(const fs::path& folder, int tp, int steps) {
  ThreadGroup g(tp, 20000ms);
  std::vector<Trace> out(tp);
  g.run([&](Communicator& c) {
    cpu::CpuBackend be(1);
    LoadOptions o;
    o.progress = ProgressMode::Quiet;
    o.tp_rank = c.rank();
    o.tp_size = tp;
    o.comm = &c;
    auto lm = load_model(folder, be, o);
    out[c.rank()] = greedy(be, *lm, steps);
  });
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// What each fixture × world size must do: "ok", or the E_ id and a phrase of the refusal. A draft layer the
// fixture ships is cut like the main layers, or dropped whole (the model still runs) when its stored formats
// cannot take the cut: `no_draft` is a phrase of that reason.
struct Expect {
  std::string fixture;
  int tp;
  std::string id, phrase;  // id empty: runs
  std::string no_draft = {};
};

const std::vector<Expect> kExpect = {
    {"qwen3_next-bf16", 2, "", ""},
    // NVFP4 experts at 16 columns, FP8 per-tensor attention; the MTP experts' FP8-block tiles take no cut
    {"qwen3_next-modelopt-mixed", 2, "", "", "mtp.layers.0.mlp.experts"},
    {"qwen3_next-bf16", 4, "E_TP_CUT", "2 GDN key heads cannot be split over 4 ranks"},
    {"qwen3_next-bf16", 3, "E_TP_CUT", "4 attention heads cannot be split over 3 ranks"},
    {"qwen4_exp-bf16", 2, "", ""},
    {"qwen4_exp-modelopt-mixed", 2, "", "", "mtp.layers.0.mlp.experts"},  // FP8-block expert tiles
    {"qwen4_exp-fp4local-csf", 2, "E_TP_CUT",
     "out_proj.weight': field 'columns': expected cuts on multiples of 32 (MXFP8"},
    {"qwen4_exp-bf16", 4, "E_TP_CUT", "6 attention heads cannot be split over 4 ranks"},
    {"glm5_next-bf16", 2, "", ""},
    {"glm5_next-bf16", 4, "", ""},  // one MLA and one KDA head per rank, experts at I = 8
    {"glm5_next-modelopt-mixed", 2, "", "", "layers.6.mlp.experts"},  // FP8-block NextN expert tiles
    {"glm5_next-modelopt-mixed", 4, "E_TP_CUT", "multiples of 16 (NVFP4 scale blocks"},
    {"glm5_next-bf16", 3, "E_TP_CUT", "4 MLA heads cannot be split over 3 ranks"},
    {"glm5_next-fp4local-csf", 2, "E_TP_CUT",
     "down_proj.weight': field 'columns': expected cuts on multiples of 32 (CSF"},
};

void PrintTo(const Expect& e, std::ostream* os) {
  *os << e.fixture << " tp " << e.tp << (e.id.empty() ? " runs" : " refused: " + e.phrase);
}

class TpForward : public ::testing::TestWithParam<Expect> {};

TEST_P(TpForward, RanksAgreeAndMatchTp1OrAreRefusedByName) {
  const Expect& e = GetParam();
  const fs::path folder = kModels / e.fixture;
  if (!fs::exists(folder)) GTEST_SKIP() << "no fixture " << e.fixture;
  const int steps = 6;
  if (!e.id.empty()) {
    // Refused before any allocation: prepare_model (no backend memory) already throws.
    LoadOptions o;
    o.tp_size = e.tp;
    ThreadGroup g(e.tp, 1000ms);
    o.comm = &g.rank(0);
    try {
      prepare_model(folder, "cpu", {}, o);
      FAIL() << "tp " << e.tp << " was not refused";
    } catch (const Error& err) {
      EXPECT_EQ(err.id(), e.id) << err.what();
      EXPECT_NE(std::string(err.what()).find(e.phrase), std::string::npos) << err.what();
    }
    return;
  }
  const Trace ref = run_tp1(folder, steps);
  const std::vector<Trace> ranks = run_tp(folder, e.tp, steps);
  for (int r = 1; r < e.tp; ++r)
    for (size_t s = 0; s < ref.logits.size(); ++s) {
      ASSERT_TRUE(same_bits(ranks[r].logits[s], ranks[0].logits[s])) << "rank " << r << " step " << s;
      ASSERT_TRUE(same_bits(ranks[r].hidden[s], ranks[0].hidden[s])) << "rank " << r << " step " << s;
    }
  EXPECT_EQ(ranks[0].tokens, ref.tokens);
  auto worst_of = [](const std::vector<std::vector<float>>& got,
                     const std::vector<std::vector<float>>& want) {
    float worst = 0;
    for (size_t s = 0; s < want.size(); ++s) {
      EXPECT_EQ(got[s].size(), want[s].size()) << "step " << s;
      for (size_t i = 0; i < want[s].size() && i < got[s].size(); ++i) {
        const float d = std::fabs(got[s][i] - want[s][i]);
        worst = std::max(worst, d / std::max(1.0f, std::fabs(want[s][i])));
      }
    }
    return worst;
  };
  const float worst = worst_of(ranks[0].logits, ref.logits);
  EXPECT_LE(worst, 1e-5f) << "largest relative logit difference against TP = 1";
  RecordProperty("worst_relative_logit_diff", std::to_string(worst));
  // The draft layer: kept (every rank's draft logits bit-identical, within 1e-5 of TP = 1) or dropped whole.
  const bool keeps = ref.has_draft && e.no_draft.empty();
  LoadOptions o;
  o.tp_size = e.tp;
  ThreadGroup g(e.tp, 1000ms);
  o.comm = &g.rank(0);
  const std::string dropped = prepare_model(folder, "cpu", {}, o)->draft_dropped;
  for (int r = 0; r < e.tp; ++r) ASSERT_EQ(ranks[r].has_draft, keeps) << "rank " << r << ": " << dropped;
  if (!keeps) {
    if (!ref.has_draft) return;
    EXPECT_NE(dropped.find(e.no_draft), std::string::npos) << dropped;
    o.require_draft = true;
    try {
      prepare_model(folder, "cpu", {}, o);
      FAIL() << "--spec-type draft-mtp was not refused";
    } catch (const Error& err) {
      EXPECT_EQ(err.id(), "E_SPEC_NO_DRAFT") << err.what();
      EXPECT_NE(std::string(err.what()).find("cannot be cut over " + std::to_string(e.tp) + " ranks"),
                std::string::npos)
          << err.what();
    }
    return;
  }
  ASSERT_EQ(ref.draft.size(), size_t(steps));
  for (int r = 1; r < e.tp; ++r)
    for (size_t s = 0; s < ref.draft.size(); ++s)
      ASSERT_TRUE(same_bits(ranks[r].draft[s], ranks[0].draft[s])) << "draft, rank " << r << " step " << s;
  const float worst_draft = worst_of(ranks[0].draft, ref.draft);
  EXPECT_LE(worst_draft, 1e-5f) << "largest relative draft logit difference against TP = 1";
  RecordProperty("worst_relative_draft_logit_diff", std::to_string(worst_draft));
}

// The memory plan is the rank's: at TP 2 each rank plans fewer weight bytes than TP 1 reads (the sharded part
// halves, replicated parts stay), and both ranks plan the same.
TEST(TpPlan, EachRankPlansItsShare) {
  const fs::path folder = kModels / "glm5_next-bf16";
  if (!fs::exists(folder)) GTEST_SKIP();
  const auto one = prepare_model(folder, "cpu", {}, LoadOptions{});
  ThreadGroup g(2, 1000ms);
  uint64_t read[2] = {}, weights[2] = {};
  for (int r = 0; r < 2; ++r) {
    LoadOptions o;
    o.tp_rank = r;
    o.tp_size = 2;
    o.comm = &g.rank(r);
    const auto lm = prepare_model(folder, "cpu", {}, o);
    read[r] = lm->plan.read_bytes;
    weights[r] = lm->plan.weights_total;
  }
  EXPECT_EQ(read[0], read[1]);
  EXPECT_EQ(weights[0], weights[1]);
  EXPECT_LT(read[0], one->plan.read_bytes * 3 / 4);
  EXPECT_GT(read[0], one->plan.read_bytes / 2);  // embeddings, mHC, routers, indexers are replicated
  EXPECT_LT(weights[0], one->plan.weights_total * 3 / 4);
}

std::string name_of(const ::testing::TestParamInfo<Expect>& info) {
  std::string n = info.param.fixture + "_tp" + std::to_string(info.param.tp);
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TpForward, ::testing::ValuesIn(kExpect), name_of);

}  // namespace
}  // namespace bloomery
