// Graph steps as the engine brackets them (models/forward_step.h): every batched decode step of every family
// is one begin_step … end_step with a key that follows the step's shape, nothing inside the bracket reads
// device data on the host (the CUDA backend records the step as a graph and would refuse such a read), a
// prompt chunk is not bracketed, and a step whose forward throws is aborted, not ended.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../../common/fixture_folders.h"
#include "backend/cpu/cpu_backend.h"
#include "forwarding_backend.h"
#include "models/forward_step.h"
#include "models/model_loader.h"
#include "runtime/engine.h"

namespace bloomery {
namespace {

namespace fs = std::filesystem;

const fs::path kModels = testing_fixtures::models_root();

class Bracketing : public test::ForwardingBackend {
 public:
  Bracketing() : ForwardingBackend(make_cpu_backend(2)) {}
  void on_begin_step(uint64_t key) override {
    EXPECT_FALSE(open) << "begin_step inside a step";
    open = true;
    keys.push_back(key);
  }
  void on_end_step() override {
    EXPECT_TRUE(open) << "end_step outside a step";
    open = false;
    ++ended;
  }
  void on_abort_step() override {
    open = false;
    ++aborted;
  }
  void on_step_layer_done() override {
    if (open) ++layer_ends;
  }
  void on_host_transfer(const char* what) override {
    if (open) reads_inside.push_back(what);
  }
  bool open = false;
  std::vector<uint64_t> keys;
  int ended = 0, aborted = 0, layer_ends = 0;
  std::vector<std::string> reads_inside;
};

class StepBracket : public ::testing::TestWithParam<std::string> {};

TEST_P(StepBracket, DecodeStepsAreBracketedAndReadNothingBack) {
  if (GetParam() == "none") GTEST_SKIP() << "no fixture folders";
  Bracketing be;
  auto lm = load_model(kModels / GetParam(), be);
  Engine e(be, *lm->model);
  SeqId a = e.add_sequence(128), b = e.add_sequence(128);
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5};  // 11 tokens: not a graph step
  e.prefill(a, prompt);
  e.prefill(b, std::span(prompt).first(4));
  EXPECT_TRUE(be.keys.empty()) << "a prompt chunk was bracketed";
  for (int s = 0; s < 3; ++s) {
    SeqId seqs[] = {a, b};
    int32_t toks[] = {7, 8};
    e.decode(seqs, toks);
  }
  SeqId one[] = {a};
  int32_t tok[] = {2};
  e.decode(one, tok);
  ASSERT_EQ(be.keys.size(), 4u);
  EXPECT_EQ(be.ended, 4);
  // Every layer end is marked, so a recording backend can launch the step in segments as it goes.
  fs::path config = kModels / GetParam() / "config.json";
  if (!fs::exists(config)) config = kModels / GetParam() / "metadata" / "config.json";  // FP4-Local layout
  const nlohmann::json c = nlohmann::json::parse(std::ifstream(config));
  const int64_t top_layers =
      c.value("num_hidden_layers",
              c.value("text_config", nlohmann::json::object()).value("num_hidden_layers", int64_t{0}));
  ASSERT_GT(top_layers, 0) << config;
  EXPECT_EQ(be.layer_ends, 4 * top_layers) << "layer ends inside the steps";
  EXPECT_EQ(be.aborted, 0);
  EXPECT_EQ(be.keys[0], be.keys[1]) << "same shape, same key";
  EXPECT_EQ(be.keys[1], be.keys[2]);
  EXPECT_NE(be.keys[2], be.keys[3]) << "two sequences and one sequence share a key";
  EXPECT_TRUE(be.reads_inside.empty())
      << GetParam() << ": a decode step read device data on the host (" << be.reads_inside.front() << ")";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, StepBracket, ::testing::ValuesIn(testing_fixtures::fixture_names()),
                         testing_fixtures::param_name);

TEST(StepBracket, KeysFollowTheShapeAndPromptChunksAreNotSteps) {
  std::vector<int32_t> ids(12, 1);
  std::vector<Model::BatchEntry> two = {{nullptr, std::span(ids).first(1), false},
                                        {nullptr, std::span(ids).first(1), false}};
  std::vector<Model::BatchEntry> verify = {{nullptr, std::span(ids).first(4), true}};
  std::vector<Model::BatchEntry> verify_last = {{nullptr, std::span(ids).first(4), false}};
  std::vector<Model::BatchEntry> prompt = {{nullptr, std::span(ids).first(kStepGraphMaxTokens + 1), false}};
  EXPECT_NE(step_graph_key(two), 0u);
  EXPECT_NE(step_graph_key(verify), 0u);
  EXPECT_NE(step_graph_key(verify), step_graph_key(verify_last)) << "all_logits changes the step";
  EXPECT_NE(step_graph_key(two), step_graph_key(verify));
  EXPECT_EQ(step_graph_key(prompt), 0u);
  EXPECT_EQ(step_graph_key({}), 0u);
}

TEST(StepBracket, AStepThatThrowsIsAborted) {
  const fs::path dir = kModels / "qwen3_next-bf16";
  if (!fs::is_directory(dir)) GTEST_SKIP() << "no fixture " << dir;
  Bracketing be;
  auto lm = load_model(dir, be);
  auto st = lm->model->new_state(be, 16);
  const int32_t bad[] = {static_cast<int32_t>(lm->model->info().vocab_size)};  // out of range
  std::vector<Model::BatchEntry> entries = {{st.get(), std::span<const int32_t>(bad), false}};
  EXPECT_THROW(forward_step(*lm->model, be, entries), Error);
  EXPECT_EQ(be.keys.size(), 1u);
  EXPECT_EQ(be.aborted, 1);
  EXPECT_EQ(be.ended, 0);
  EXPECT_FALSE(be.open);
}

}  // namespace
}  // namespace bloomery
