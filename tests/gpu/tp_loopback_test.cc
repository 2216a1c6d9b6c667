// Tensor parallel on the card (issue 16): TP = 2 as two CUDA ranks of this process on one GPU (the loopback,
// summed in device memory in rank order) follows TP = 1 on the same GPU, teacher-forced, within the band of
// a changed summation split; the loopback and the host-memory path (what ranks of separate processes on one
// GPU take) agree; and NCCL with a world of one rank runs the real NCCL calls.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cuda/collectives/device_collective.h"
#include "backend/cuda/cuda_backend.h"
#include "models/model_loader.h"
#include "parallel/local_ranks.h"
#include "parallel/thread_group.h"
#include "runtime/engine.h"

namespace bloomery {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const fs::path kModels = fs::path(BLOOMERY_SOURCE_DIR) / "tests/fixtures/models";
const std::vector<int32_t> kPrompt = {3, 17, 42, 99, 7, 250, 12, 1};
constexpr int kSteps = 8;

LoadOptions quiet() {
  LoadOptions o;
  o.progress = ProgressMode::Quiet;
  return o;
}

int32_t argmax(const std::vector<float>& row) {
  return int32_t(std::max_element(row.begin(), row.end()) - row.begin());
}

// Logit rows of the prompt and kSteps decodes fed `ids` (teacher-forced: every run sees the same tokens).
template <class E>
std::vector<std::vector<float>> rows_of(E& e, const std::vector<int32_t>& ids) {
  const SeqId s = e.add_sequence(64);
  std::vector<std::vector<float>> rows = {e.prefill(s, kPrompt)};
  for (int i = 0; i < kSteps; ++i) {
    const int32_t t[1] = {ids[size_t(i)]};
    rows.push_back(e.decode(std::span(&s, 1), t)[0]);
  }
  return rows;
}

struct Tp1 {
  std::vector<int32_t> ids;  // greedy continuation on TP = 1
  std::vector<std::vector<float>> rows;
};
Tp1 tp1(const fs::path& folder) {
  cuda::CudaBackend be(0);
  auto lm = load_model(folder, be, quiet());
  Engine e(be, *lm->model);
  const SeqId s = e.add_sequence(64);
  Tp1 out;
  out.rows = {e.prefill(s, kPrompt)};
  for (int i = 0; i < kSteps; ++i) {
    out.ids.push_back(argmax(out.rows.back()));
    const int32_t t[1] = {out.ids.back()};
    out.rows.push_back(e.decode(std::span(&s, 1), t)[0]);
  }
  return out;
}

std::vector<std::vector<float>> tp2_rows(const fs::path& folder, const char* collective,
                                         const std::vector<int32_t>& ids, std::string* line) {
  setenv("BLOOMERY_TP_COLLECTIVE", collective, 1);
  LocalTpRanks ranks(2, 20000ms, folder, quiet(), [](int) { return std::make_unique<cuda::CudaBackend>(0); });
  unsetenv("BLOOMERY_TP_COLLECTIVE");
  *line = ranks.collectives();
  return rows_of(ranks, ids);
}

// Largest |a − b| / max(1, |b|) over every row.
float max_rel(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  float m = 0;
  for (size_t r = 0; r < a.size(); ++r)
    for (size_t i = 0; i < a[r].size(); ++i)
      m = std::max(m, std::fabs(a[r][i] - b[r][i]) / std::max(1.0f, std::fabs(b[r][i])));
  return m;
}

class TpLoopback : public ::testing::TestWithParam<const char*> {};

TEST_P(TpLoopback, TwoRanksOnOneGpuFollowOneRank) {
  const fs::path folder = kModels / GetParam();
  if (!fs::exists(folder)) GTEST_SKIP() << folder;
  const Tp1 ref = tp1(folder);
  std::string line_loop, line_host;
  const auto loop = tp2_rows(folder, "loopback", ref.ids, &line_loop);
  const auto host = tp2_rows(folder, "host", ref.ids, &line_host);
  EXPECT_NE(line_loop.find("loopback"), std::string::npos) << line_loop;
  EXPECT_NE(line_host.find("host memory"), std::string::npos) << line_host;
  ASSERT_EQ(loop.size(), ref.rows.size());
  // The same partials summed in the same order: only kernels' own run-to-run freedom may differ.
  EXPECT_LE(max_rel(loop, host), 1e-5f);
  // Against TP = 1 the row-parallel products are split in two sums: f32 reassociation, far below a token.
  EXPECT_LE(max_rel(loop, ref.rows), 2e-3f);
  for (int i = 0; i < kSteps; ++i) {
    std::vector<float> sorted = ref.rows[size_t(i)];
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    if (sorted[0] - sorted[1] > 1e-2f) EXPECT_EQ(argmax(loop[size_t(i)]), ref.ids[size_t(i)]) << "step " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TpLoopback,
                         ::testing::Values("qwen4_exp-bf16", "glm5_next-bf16", "qwen3_next-modelopt-mixed"));

TEST(TpNccl, AWorldOfOneRankRunsTheNcclCalls) {
  ThreadGroup g(1, 5000ms);
  Communicator& c = g.rank(0);
  auto nccl = cuda::make_nccl_collective(c, 0, 5000ms);
  ASSERT_EQ(nccl->kind(), "nccl");
  std::vector<float> h(1000);
  for (size_t i = 0; i < h.size(); ++i) h[i] = 0.5f * float(i) - 7.0f;
  float *d = nullptr, *g_out = nullptr;
  ASSERT_EQ(cudaMalloc(&d, h.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&g_out, h.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d, h.data(), h.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  nccl->all_reduce_sum(d, h.size(), nullptr, "world of one sum");
  nccl->all_gather(d, h.size(), g_out, nullptr, "world of one gather");
  nccl->wait(nullptr, "world of one");
  std::vector<float> back(h.size()), gathered(h.size());
  ASSERT_EQ(cudaMemcpy(back.data(), d, h.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(gathered.data(), g_out, h.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, h);
  EXPECT_EQ(gathered, h);
  cudaFree(d);
  cudaFree(g_out);
}

}  // namespace
}  // namespace bloomery
