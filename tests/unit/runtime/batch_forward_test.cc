// Model::forward_batch against forward() one sequence at a time, on every fixture folder: three sequences in
// different phases (a mid-prompt chunk, two decode tokens at different positions) in one pass give the same
// logits and hiddens (within 1e-5 relative) and leave the same states (each continued one step and
// compared); a batch refused for one entry's room changes no state; ModelStepEngine fails only that entry.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "../../common/fixture_folders.h"
#include "backend/cpu/cpu_backend.h"
#include "models/model_loader.h"
#include "runtime/engine.h"
#include "runtime/scheduler.h"

namespace bloomery {
namespace {

namespace fs = std::filesystem;

const fs::path kModels = testing_fixtures::models_root();
constexpr float kTol = 1e-5f;

float rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  float d = 0.0f, m = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, std::fabs(a[i] - b[i]));
    m = std::max(m, std::fabs(b[i]));
  }
  return m > 0.0f ? d / m : d;
}

// Deterministic token ids below the vocabulary.
std::vector<int32_t> tokens(int64_t vocab, int n, uint32_t seed) {
  std::vector<int32_t> r;
  for (int i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    r.push_back(static_cast<int32_t>((seed >> 8) % static_cast<uint32_t>(vocab)));
  }
  return r;
}

struct Fixture {
  std::unique_ptr<Backend> be;
  std::unique_ptr<LoadedModel> lm;
};

class BatchForward : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "none") GTEST_SKIP() << "no fixture folders under " << kModels;
    f_.be = make_cpu_backend(2);
    f_.lm = load_model(kModels / GetParam(), *f_.be);
  }
  Model& model() { return *f_.lm->model; }
  Backend& be() { return *f_.be; }
  Fixture f_;
};

// Three sequences with their own histories; `prefix[i]` tokens consumed before the pass.
struct Three {
  std::vector<std::unique_ptr<SequenceState>> st;
};

Three start(Model& m, Backend& be, const std::vector<std::vector<int32_t>>& prefix) {
  Three t;
  for (const auto& p : prefix) {
    t.st.push_back(m.new_state(be, 64));
    m.forward(be, *t.st.back(), p, false);
  }
  return t;
}

TEST_P(BatchForward, EqualsPerSequenceForwardAndLeavesSameStates) {
  const int64_t V = model().info().vocab_size;
  // A: 5 prompt tokens read, the pass reads the next 6 (all logits); B and C decode one token at positions 9
  // and 3.
  const auto a = tokens(V, 12, 1), b = tokens(V, 11, 2), c = tokens(V, 5, 3);
  const std::vector<std::vector<int32_t>> prefix = {
      {a.begin(), a.begin() + 5}, {b.begin(), b.begin() + 9}, {c.begin(), c.begin() + 3}};
  Three ref = start(model(), be(), prefix), bat = start(model(), be(), prefix);
  const std::span<const int32_t> chunk(a.data() + 5, 6), tok_b(b.data() + 9, 1), tok_c(c.data() + 3, 1);

  std::vector<ForwardResult> want;
  want.push_back(model().forward(be(), *ref.st[0], chunk, true));
  want.push_back(model().forward(be(), *ref.st[1], tok_b, false));
  want.push_back(model().forward(be(), *ref.st[2], tok_c, false));
  const Model::BatchEntry entries[] = {
      {bat.st[0].get(), chunk, true}, {bat.st[1].get(), tok_b, false}, {bat.st[2].get(), tok_c, false}};
  std::vector<ForwardResult> got = model().forward_batch(be(), entries);
  ASSERT_EQ(got.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(got[i].logits.shape(), want[i].logits.shape()) << "entry " << i;
    EXPECT_LE(rel_err(be().download(got[i].logits), be().download(want[i].logits)), kTol) << "logits " << i;
    EXPECT_EQ(got[i].hidden.shape(), want[i].hidden.shape()) << "entry " << i;
    EXPECT_LE(rel_err(be().download(got[i].hidden), be().download(want[i].hidden)), kTol) << "hidden " << i;
    EXPECT_EQ(bat.st[i]->pos, ref.st[i]->pos);
    EXPECT_EQ(bat.st[i]->history, ref.st[i]->history);
  }
  // The states are the same: one more token each (one at a time) gives the same logits.
  const int32_t next[] = {a[11], b[10], c[4]};
  for (int i = 0; i < 3; ++i) {
    auto w = be().download(model().forward(be(), *ref.st[i], std::span(&next[i], 1), false).logits);
    auto g = be().download(model().forward(be(), *bat.st[i], std::span(&next[i], 1), false).logits);
    EXPECT_LE(rel_err(g, w), kTol) << "step after the pass, entry " << i;
  }
}

TEST_P(BatchForward, RefusedBatchChangesNoState) {
  const int64_t V = model().info().vocab_size;
  auto ids = tokens(V, 8, 4);
  auto roomy = model().new_state(be(), 64), full = model().new_state(be(), 4);
  auto ref = model().new_state(be(), 64);
  model().forward(be(), *full, std::span(ids).first(4), false);  // no room left
  const Model::BatchEntry entries[] = {{roomy.get(), std::span(ids).first(3), false},
                                       {full.get(), std::span(ids).subspan(4, 1), false}};
  try {
    model().forward_batch(be(), entries);
    FAIL() << "a batch with an entry past its capacity ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.id(), "E_CONTEXT_FULL");
  }
  EXPECT_EQ(roomy->pos, 0);
  EXPECT_EQ(full->pos, 4);
  // The untouched state still computes what a fresh one does.
  auto g = be().download(model().forward(be(), *roomy, std::span(ids).first(3), false).logits);
  auto w = be().download(model().forward(be(), *ref, std::span(ids).first(3), false).logits);
  EXPECT_EQ(g, w);
}

TEST_P(BatchForward, StepEngineFailsOnlyTheEntryWithoutRoom) {
  const int64_t V = model().info().vocab_size;
  auto ids = tokens(V, 8, 5);
  ModelStepEngine engine(model(), be());
  auto ok = engine.new_state(64), full = engine.new_state(3), ref = engine.new_state(64);
  model().forward(be(), *full, std::span(ids).first(3), false);
  StepItem items[2];
  items[0].state = ok.get();
  items[0].ids = std::span(ids).first(4);
  items[0].want_logits = true;
  items[1].state = full.get();
  items[1].ids = std::span(ids).subspan(3, 1);
  items[1].want_logits = true;
  engine.forward(items);
  EXPECT_TRUE(items[0].error.empty()) << items[0].error;
  EXPECT_NE(items[1].error.find("E_CONTEXT_FULL"), std::string::npos) << items[1].error;
  auto w = be().download(model().forward(be(), *ref, std::span(ids).first(4), false).logits);
  EXPECT_LE(rel_err(items[0].logits, w), kTol);
  EXPECT_EQ(ok->pos, 4);
  EXPECT_EQ(full->pos, 3);
}

TEST_P(BatchForward, EngineDecodeOfSeveralSequencesEqualsOneByOne) {
  const int64_t V = model().info().vocab_size;
  auto a = tokens(V, 6, 7), b = tokens(V, 3, 8);
  Engine batched(be(), model()), single(be(), model());
  SeqId ba = batched.add_sequence(32), bb = batched.add_sequence(32);
  SeqId sa = single.add_sequence(32), sb = single.add_sequence(32);
  batched.prefill(ba, std::span(a).first(5));
  batched.prefill(bb, std::span(b).first(2));
  single.prefill(sa, std::span(a).first(5));
  single.prefill(sb, std::span(b).first(2));
  const SeqId seqs[] = {ba, bb};
  const int32_t toks[] = {a[5], b[2]};
  auto rows = batched.decode(seqs, toks);
  ASSERT_EQ(rows.size(), 2u);
  const SeqId one_a[] = {sa}, one_b[] = {sb};
  EXPECT_LE(rel_err(rows[0], single.decode(one_a, std::span(toks).first(1))[0]), kTol);
  EXPECT_LE(rel_err(rows[1], single.decode(one_b, std::span(toks).subspan(1))[0]), kTol);
  EXPECT_LE(rel_err(be().download(batched.last_hidden(bb)), be().download(single.last_hidden(sb))), kTol);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BatchForward, ::testing::ValuesIn(testing_fixtures::fixture_names()),
                         testing_fixtures::param_name);

}  // namespace
}  // namespace bloomery
