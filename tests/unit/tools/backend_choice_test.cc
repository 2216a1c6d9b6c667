// Backend selection: the automatic choice and the families each backend runs.
#include <gtest/gtest.h>

#include "backend/select/backend_choice.h"
#include "core/error.h"

namespace bloomery {
namespace {

const std::filesystem::path kFixtures = std::filesystem::path(BLOOMERY_SOURCE_DIR) / "tests/fixtures/models";

TEST(BackendChoice, CpuAndExplicitRequestsAreKept) {
  EXPECT_EQ(pick_backend("cpu", kFixtures / "qwen4_exp-bf16").name, "cpu");
  EXPECT_EQ(pick_backend("cuda", kFixtures / "qwen4_exp-bf16").name, "cuda");
}

TEST(BackendChoice, AutoPicksCudaOnlyWhereItCanRun) {
  const BackendPick q = pick_backend("auto", kFixtures / "qwen4_exp-modelopt-mixed");
  const bool gpu = cuda_built() && cuda_device_count() > 0;
  EXPECT_EQ(q.name, gpu ? "cuda" : "cpu") << q.why;
  // glm5_next's family ops are on the card too (backend/cuda/family/glm_ops.cc).
  const BackendPick g = pick_backend("auto", kFixtures / "glm5_next-bf16");
  EXPECT_EQ(g.name, gpu ? "cuda" : "cpu") << g.why;
  EXPECT_FALSE(g.why.empty());
}

TEST(BackendChoice, CudaRunsEveryFamily) {
  for (const char* f : {"qwen3_next-bf16", "qwen4_exp-bf16", "glm5_next-bf16", "glm5_next-modelopt-mixed"}) {
    EXPECT_NO_THROW(check_backend_runs("cuda", kFixtures / f)) << f;
    EXPECT_TRUE(missing_family_ops("cuda", folder_model_type(kFixtures / f)).empty()) << f;
  }
}

TEST(BackendChoice, ModelTypeReadsTextConfig) {
  EXPECT_NE(folder_model_type(kFixtures / "qwen4_exp-bf16").find("qwen4_exp"), std::string::npos);
  EXPECT_EQ(folder_model_type(kFixtures / "no-such-folder"), "");
}

}  // namespace
}  // namespace bloomery
