// CUDA graph steps (backend/cuda/step_graph.h, graph mode): per-step values that change while
// the step's shape stays (host arrays staged through the pinned arena, scalars in kernel parameters) reach
// the replayed graph; an op that reads the card on the host is refused inside a capture and its shape then
// runs eagerly; whole models decode to the same logits and tokens with graphs as without, and the decode
// steps really are captured.
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cuda/cuda_backend.h"
#include "backend_util.h"
#include "models/model_loader.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"

namespace bloomery {
namespace {

namespace fs = std::filesystem;
using gputest::ScopedEnv;

// A CUDA backend with graph mode on or off (read from the environment at construction), whatever the
// environment the suite runs in (scripts/gpu-check-all.sh runs it with BLOOMERY_CUDA_GRAPHS=0 and =1);
// `segment_layers`: layers per recorded segment (nullptr: the default).
std::unique_ptr<cuda::CudaBackend> make_backend(bool graphs, const char* segment_layers = nullptr) {
  ScopedEnv mode("BLOOMERY_CUDA_GRAPHS", graphs ? "1" : "0");
  ScopedEnv layers("BLOOMERY_CUDA_GRAPH_LAYERS", segment_layers);
  auto be = std::make_unique<cuda::CudaBackend>(0);
  EXPECT_EQ(be->step_graphs().enabled(), graphs);
  return be;
}
std::unique_ptr<cuda::CudaBackend> graph_backend() {
  return make_backend(true);
}

TEST(StepGraph, ChangingValuesReachTheReplayedSteps) {
  if (!gputest::have_gpu()) GTEST_SKIP() << "no CUDA device";
  auto be = graph_backend();
  ASSERT_TRUE(be->step_graphs().enabled());
  const int64_t T = 3, H = 2, hd = 8;
  RopeSpec spec;
  spec.rot_dim = hd;
  for (int step = 0; step < 6; ++step) {
    // Same shapes every step; the fill value (a kernel parameter) and the positions (a host array copied
    // through the pinned arena) change.
    Tensor x = be->alloc({T, H, hd});
    Tensor y = be->alloc({T, H, hd});
    be->begin_step(42);
    be->fill(x, 1.0f + static_cast<float>(step));
    const std::vector<int64_t> pos = {step, step + 1, step + 7};
    be->rope(x, pos, spec);
    be->add(y, x, x);
    be->end_step();
    // The same ops eagerly on a plain backend give the reference.
    auto ref = make_backend(false);
    Tensor rx = ref->alloc({T, H, hd}), ry = ref->alloc({T, H, hd});
    ref->fill(rx, 1.0f + static_cast<float>(step));
    ref->rope(rx, pos, spec);
    ref->add(ry, rx, rx);
    EXPECT_EQ(be->download(y), ref->download(ry)) << "step " << step;
  }
  const cuda::StepGraphStats& g = be->step_graphs().stats();
  EXPECT_EQ(g.steps, 6u);
  EXPECT_EQ(g.captured, 5u) << "every step after the warm-up is captured";
  EXPECT_EQ(g.instantiated, 1u) << "one shape, one executable graph, updated in place";
  EXPECT_EQ(g.updated, 4u);
  EXPECT_EQ(g.eager_keys, 0u);
}

// A step recorded in segments (one per "layer" here): each segment is launched while the next is recorded,
// and a value produced by one segment is read by the next.
TEST(StepGraph, SegmentsLaunchedWhileRecordingKeepTheStepsOrder) {
  if (!gputest::have_gpu()) GTEST_SKIP() << "no CUDA device";
  auto be = make_backend(true, "1");
  const int64_t n = 1 << 16;
  Tensor x = be->alloc({n}), y = be->alloc({n});
  for (int step = 0; step < 5; ++step) {
    be->begin_step(9);
    be->fill(x, static_cast<float>(step));
    be->step_layer_done();
    for (int layer = 0; layer < 3; ++layer) {  // y = 2x + x, x = y: x ends at step · 27
      be->add(y, x, x);
      be->add(y, y, x);
      be->copy(x, y);
      be->step_layer_done();
    }
    be->end_step();
    EXPECT_EQ(be->download(x), std::vector<float>(n, 27.0f * static_cast<float>(step))) << "step " << step;
  }
  const cuda::StepGraphStats& g = be->step_graphs().stats();
  EXPECT_EQ(g.captured, 4u);
  EXPECT_EQ(g.segments, 4u * 5u) << "four layer ends and the step's end, each launching a segment";
  EXPECT_EQ(g.instantiated, 5u) << "one executable graph per segment, then updated in place";
  EXPECT_EQ(g.update_failures, 0u);
}

TEST(StepGraph, HostReadInsideACaptureIsRefusedAndTheShapeRunsEagerly) {
  if (!gputest::have_gpu()) GTEST_SKIP() << "no CUDA device";
  auto be = graph_backend();
  Tensor x = be->alloc({4});
  be->begin_step(7);  // warm-up: eager
  be->fill(x, 2.0f);
  be->end_step();
  be->begin_step(7);  // captured
  be->fill(x, 3.0f);
  try {
    (void)be->download(x);
    FAIL() << "a download inside a captured step was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.id(), "E_CUDA_GRAPH");
    EXPECT_NE(std::string(e.what()).find("download"), std::string::npos) << e.what();
  }
  be->abort_step();
  EXPECT_EQ(be->download(x), std::vector<float>(4, 2.0f)) << "nothing of the aborted capture ran";
  be->begin_step(7);  // the shape is eager now: a read inside the step is fine
  be->fill(x, 4.0f);
  EXPECT_EQ(be->download(x), std::vector<float>(4, 4.0f));
  be->end_step();
  EXPECT_EQ(be->step_graphs().stats().eager_keys, 1u);
}

fs::path fixtures_dir() {
  const char* env = std::getenv("BLOOMERY_SOURCE_DIR");
  return fs::path(env && *env ? env : BLOOMERY_SOURCE_DIR) / "tests/fixtures";
}

// Two sequences decoded together for `steps` steps (greedy); every step's logits rows.
std::vector<std::vector<float>> decode_rows(Backend& be, const fs::path& dir, int steps,
                                            std::vector<int32_t>* tokens) {
  auto lm = load_model(dir, be);
  Engine e(be, *lm->model);
  SeqId a = e.add_sequence(256), b = e.add_sequence(256);
  std::vector<int32_t> pa = {1, 5, 9, 14, 3}, pb = {7, 2, 8};
  std::vector<float> ra = e.prefill(a, pa), rb = e.prefill(b, pb);
  std::vector<std::vector<float>> rows;
  for (int s = 0; s < steps; ++s) {
    const int32_t ta = argmax(ra), tb = argmax(rb);
    tokens->push_back(ta);
    tokens->push_back(tb);
    SeqId seqs[] = {a, b};
    int32_t toks[] = {ta, tb};
    auto r = e.decode(seqs, toks);
    ra = r[0], rb = r[1];
    rows.push_back(ra);
    rows.push_back(rb);
  }
  return rows;
}

// (fixture folder, layers per recorded segment: "0" whole steps, "1" one graph per layer)
class StepGraphModel : public ::testing::TestWithParam<std::tuple<std::string, const char*>> {};

TEST_P(StepGraphModel, DecodeWithGraphsEqualsEager) {
  if (!gputest::have_gpu()) GTEST_SKIP() << "no CUDA device";
  const auto& [name, segment_layers] = GetParam();
  const fs::path dir = fixtures_dir() / "models" / name;
  if (!fs::is_directory(dir)) GTEST_SKIP() << "no fixture " << dir;
  const int steps = 12;
  std::vector<int32_t> eager_tokens, graph_tokens;
  auto eager = make_backend(false);
  const auto want = decode_rows(*eager, dir, steps, &eager_tokens);
  auto graphs = make_backend(true, segment_layers);
  const auto got = decode_rows(*graphs, dir, steps, &graph_tokens);
  EXPECT_EQ(graph_tokens, eager_tokens);
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    for (size_t j = 0; j < got[i].size(); ++j)
      worst = std::max(worst, std::fabs(static_cast<double>(got[i][j]) - want[i][j]));
  // The same kernels on the same data in the same order: equal up to float atomics' ordering.
  EXPECT_LE(worst, 1e-4) << "largest logit difference, graphs vs eager";
  const cuda::StepGraphStats& g = graphs->step_graphs().stats();
  EXPECT_EQ(g.eager_keys, 0u) << "a decode op of this fixture could not be captured";
  EXPECT_GE(g.captured, static_cast<uint64_t>(steps - 1)) << "decode steps were not captured";
  if (std::string(segment_layers) == "1")
    EXPECT_GT(g.segments, 2 * g.captured) << "a step of several layers was not recorded in segments";
}

// BF16 and ModelOpt-mixed layouts of both families the card runs (the mixed layout's experts go through
// the decode kernels; its dense parts through every GEMV format).
INSTANTIATE_TEST_SUITE_P(Fixtures, StepGraphModel,
                         ::testing::Combine(::testing::Values("qwen3_next-bf16", "qwen3_next-modelopt-mixed",
                                                              "qwen4_exp-bf16", "qwen4_exp-modelopt-mixed"),
                                            ::testing::Values("0", "1")),
                         [](const auto& info) {
                           std::string n = std::get<0>(info.param) + "_layers" + std::get<1>(info.param);
                           for (char& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

}  // namespace
}  // namespace bloomery
