// The memory plan (issue 6 §2): per-role weight bytes against an independent sum over the stored tensors of
// every fixture folder, KV/state from the family, refusal when the free memory (a fake memory_info) or the
// budget is smaller, and the error text naming every size.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "core/progress.h"
#include "models/memory_plan.h"
#include "models/model_loader.h"
#include "models/roles.h"

#include "../../common/fixture_folders.h"

namespace bloomery {
namespace {

namespace fs = std::filesystem;
const fs::path kModels = testing_fixtures::models_root();

using testing_fixtures::fixture_folders;

uint64_t pad(uint64_t n) {  // cudaMalloc-style buffer: 16 bytes of over-read slack, 256-byte aligned
  return (n + 16 + 255) / 256 * 256;
}

// What the CUDA backend keeps for a record, from the stored tensors' byte counts alone (not from the
// format layer's size arithmetic the plan uses).
uint64_t independent_cuda_bytes(const WeightRecord& r, int64_t numel) {
  const FormatId f = r.format;
  const bool dense = f == FormatId::BF16 || f == FormatId::F16 || f == FormatId::F32;
  const DType want = f == FormatId::BF16 ? DType::BF16 : f == FormatId::F16 ? DType::F16 : DType::F32;
  if (dense && (r.main.size() != 1 || r.main[0]->dtype != want)) return pad(uint64_t(numel) * 4);
  uint64_t main = 0;
  for (const TensorEntry* t : r.main) main += t->nbytes;
  uint64_t scales = 0;
  switch (f) {
    case FormatId::NVFP4:
    case FormatId::W4A16_NVFP4:
    case FormatId::NVFP4_CT:
      // CSF-coded scales are decoded back to one E4M3 byte per 16 elements.
      scales = r.block_scale ? r.block_scale->nbytes : r.rows() * r.cols() / 16;
      for (const TensorEntry* t : r.block_scale_shards) scales += t->nbytes;
      break;
    case FormatId::MXFP4:
    case FormatId::MXFP8:
      scales = r.block_scale->nbytes;
      break;
    case FormatId::FP8_CHANNEL:
      scales = r.rows() * 4;
      break;
    case FormatId::FP8_BLOCK:
      scales = (r.rows() + r.block_n - 1) / r.block_n * ((r.cols() + r.block_k - 1) / r.block_k) * 4;
      break;
    default:
      break;
  }
  uint64_t total = pad(main) + (scales ? pad(scales) : 0);
  if (dense && f != FormatId::F32 && numel <= 262144) total += uint64_t(numel) * 4;  // f32 copy
  return total;
}

TEST(MemoryPlan, WeightsByRoleMatchAnIndependentSumOnEveryFixture) {
  for (const fs::path& dir : fixture_folders()) {
    SCOPED_TRACE(dir.filename().string());
    std::unique_ptr<LoadedModel> lm = prepare_model(dir, "cuda", Backend::MemoryInfo{});
    const RoleContext roles = role_context_from_config(lm->source->config());
    std::array<uint64_t, kPlanGroups> want{};
    uint64_t host = 0, read = 0, cpu = 0;
    for (const WeightJob& j : lm->jobs) {
      int64_t numel = 1;
      for (int64_t d : j.shape) numel *= d;
      if (j.streamed) {
        host += j.record->stored_bytes();
        continue;
      }
      want[static_cast<int>(plan_group(role_of(j.name, roles)))] += independent_cuda_bytes(*j.record, numel);
      read += j.record->stored_bytes();
      cpu += uint64_t(numel) * 4;
    }
    uint64_t total = 0;
    for (int g = 0; g < kPlanGroups; ++g) {
      EXPECT_EQ(lm->plan.weights[g], want[g]) << plan_group_name(static_cast<PlanGroup>(g));
      total += want[g];
    }
    EXPECT_EQ(lm->plan.weights_total, total);
    EXPECT_GT(lm->plan.weights[static_cast<int>(PlanGroup::Experts)], 0u);
    EXPECT_GT(lm->plan.weights[static_cast<int>(PlanGroup::EmbeddingsHead)], 0u);
    EXPECT_EQ(lm->plan.host_tables, host);
    EXPECT_EQ(lm->plan.read_bytes, read);
    // The CPU backend keeps every weight as f32.
    std::unique_ptr<LoadedModel> lc = prepare_model(dir, "cpu", Backend::MemoryInfo{});
    EXPECT_EQ(lc->plan.weights_total, cpu);
    EXPECT_EQ(lc->plan.keeping, WeightKeeping::DecodedF32);
  }
}

TEST(MemoryPlan, StateIsTheFamilysBytesTimesSequences) {
  for (const fs::path& dir : fixture_folders()) {
    SCOPED_TRACE(dir.filename().string());
    LoadOptions o;
    o.plan.context = 1000;
    o.plan.sequences = 3;
    std::unique_ptr<LoadedModel> lm = prepare_model(dir, "cuda", Backend::MemoryInfo{}, o);
    const uint64_t per = lm->model->state_bytes(1000);
    EXPECT_EQ(lm->plan.state, per * 3);
    EXPECT_EQ(lm->plan.state_known, per > 0);
    EXPECT_EQ(lm->plan.context, 1000);
    EXPECT_EQ(lm->plan.sequences, 3);
    EXPECT_GT(lm->plan.scratch, 0u);
    EXPECT_EQ(lm->plan.needed(), lm->plan.weights_total + lm->plan.state + lm->plan.scratch);
  }
}

TEST(MemoryPlan, RefusedWhenFreeMemoryIsSmallerAndTheMessageNamesEverySize) {
  const fs::path dir = kModels / "qwen3_next-modelopt-mixed";
  std::unique_ptr<LoadedModel> probe = prepare_model(dir, "cuda", Backend::MemoryInfo{});
  const uint64_t need = probe->plan.needed();
  // Unknown free memory: never refused.
  EXPECT_TRUE(probe->plan.fits());
  EXPECT_NO_THROW(check_memory_plan(probe->plan, dir.string()));
  // Exactly enough: fits.
  std::unique_ptr<LoadedModel> ok = prepare_model(dir, "cuda", Backend::MemoryInfo{need, need * 2});
  EXPECT_NO_THROW(check_memory_plan(ok->plan, dir.string()));
  // One byte short: E_MEMORY_PLAN naming the budget, the need, every group, KV/state and scratch.
  std::unique_ptr<LoadedModel> lm = prepare_model(dir, "cuda", Backend::MemoryInfo{need - 1, need * 2});
  EXPECT_FALSE(lm->plan.fits());
  try {
    check_memory_plan(lm->plan, dir.string());
    FAIL() << "expected E_MEMORY_PLAN";
  } catch (const Error& e) {
    EXPECT_EQ(e.id(), "E_MEMORY_PLAN");
    const std::string m = e.what();
    EXPECT_NE(m.find(format_bytes(need - 1)), std::string::npos) << m;  // expected: the free memory
    EXPECT_NE(m.find(format_bytes(need) + " needed"), std::string::npos) << m;
    EXPECT_NE(m.find("free device memory"), std::string::npos) << m;
    EXPECT_NE(m.find("weights " + format_bytes(lm->plan.weights_total)), std::string::npos) << m;
    for (int g = 0; g < kPlanGroups; ++g)
      EXPECT_NE(m.find(std::string(plan_group_name(static_cast<PlanGroup>(g))) + " " +
                       format_bytes(lm->plan.weights[g])),
                std::string::npos)
          << m;
    EXPECT_NE(m.find("KV/state " + (lm->plan.state_known ? format_bytes(lm->plan.state) : "unknown")),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("scratch " + format_bytes(lm->plan.scratch)), std::string::npos) << m;
    EXPECT_NE(m.find(dir.string()), std::string::npos) << m;
  }
  // A --mem-budget below the free memory is what the plan is held against.
  LoadOptions o;
  o.plan.budget_bytes = need / 2;
  std::unique_ptr<LoadedModel> lb = prepare_model(dir, "cuda", Backend::MemoryInfo{need * 4, need * 8}, o);
  EXPECT_EQ(lb->plan.budget, need / 2);
  EXPECT_EQ(lb->plan.budget_source, "--mem-budget");
  try {
    check_memory_plan(lb->plan, dir.string());
    FAIL() << "expected E_MEMORY_PLAN";
  } catch (const Error& e) {
    EXPECT_EQ(e.id(), "E_MEMORY_PLAN");
    EXPECT_NE(std::string(e.what()).find("--mem-budget"), std::string::npos);
  }
}

TEST(MemoryPlan, LinesAndSummaryNameTheSizes) {
  std::unique_ptr<LoadedModel> lm =
      prepare_model(kModels / "qwen4_exp-modelopt-mixed", "cuda", Backend::MemoryInfo{uint64_t(1) << 34, 0});
  std::string all;
  for (const std::string& l : lm->plan.lines()) all += l + "\n";
  EXPECT_NE(all.find("experts"), std::string::npos) << all;
  EXPECT_NE(all.find("KV/state"), std::string::npos) << all;
  EXPECT_NE(all.find("scratch"), std::string::npos) << all;
  EXPECT_NE(all.find("16.00 GiB free device memory"), std::string::npos) << all;
  EXPECT_NE(lm->plan.summary().find(format_bytes(lm->plan.needed())), std::string::npos);
  if (lm->plan.host_tables) EXPECT_NE(all.find("PLE tables (host)"), std::string::npos) << all;
}

TEST(MemoryPlan, GroupsFoldRoles) {
  EXPECT_EQ(plan_group(Role::RoutedExpert), PlanGroup::Experts);
  EXPECT_EQ(plan_group(Role::SharedExpert), PlanGroup::Experts);
  EXPECT_EQ(plan_group(Role::Attention), PlanGroup::Attention);
  EXPECT_EQ(plan_group(Role::LinearAttention), PlanGroup::LinearAttention);
  EXPECT_EQ(plan_group(Role::Embedding), PlanGroup::EmbeddingsHead);
  EXPECT_EQ(plan_group(Role::Head), PlanGroup::EmbeddingsHead);
  EXPECT_EQ(plan_group(Role::Draft), PlanGroup::Draft);
  EXPECT_EQ(plan_group(Role::Norm), PlanGroup::NormsOther);
  EXPECT_EQ(keeping_for_backend("cpu"), WeightKeeping::DecodedF32);
  EXPECT_EQ(keeping_for_backend("cuda"), WeightKeeping::Stored);
}

}  // namespace
}  // namespace bloomery
