// The synthetic models of qwen3_next and glm5_next (bench --synthetic, --layers): the full-size plans against
// the parameter counts of models.md §2.6 / §4.11, the layer cut, and a small glm5_next built and benchmarked
// on the CPU backend.
#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "tiny_synthetic.h"
#include "tools/bench_bytes.h"
#include "tools/bench_core.h"
#include "tools/synthetic_model.h"

namespace bloomery::tools {
namespace {

uint64_t params(const SyntheticPlan& p) {
  uint64_t n = 0;
  for (const WeightCost& c : p.costs) n += c.f32 / 4;
  return n;
}

constexpr uint64_t nvfp4_bytes(uint64_t rows, uint64_t cols) {
  return rows * cols / 2 + rows * cols / 16 + 4;
}

TEST(SyntheticFamilies, Glm5NextFullPlanMatchesTheSpec) {
  const SyntheticPlan p = plan_synthetic(synthetic_config("glm5_next"), SyntheticLayout::Nvidia);
  EXPECT_EQ(p.family, "glm5_next");
  // models.md §4.11: 313,326,811,966 text parameters + 7,432,592,416 in the NextN layer, whose optional own
  // head (shared_head.head [154880, 4096], declared and so built) the spec's count leaves out.
  EXPECT_EQ(params(p), 313326811966ull + 7432592416ull + 154880ull * 4096);
  // 42 sparse layers + the NextN layer, 288 experts × 3 projections of [2048, 4096] / [4096, 2048].
  EXPECT_EQ(p.bytes_by_format.at("NVFP4"), 43ull * 288 * 3 * nvfp4_bytes(2048, 4096));
}

TEST(SyntheticFamilies, Qwen3NextFullPlanMatchesTheSpec) {
  const SyntheticPlan p = plan_synthetic(synthetic_config("qwen3_next"), SyntheticLayout::Nvidia);
  EXPECT_EQ(p.family, "qwen3_next");
  EXPECT_EQ(p.bytes_by_format.at("NVFP4"), 48ull * 512 * 3 * nvfp4_bytes(512, 2048));
  // models.md §2.6: 79,674,391,296 without the MTP layer (≈ 1.65 G more).
  EXPECT_GT(params(p), 79674391296ull + 1600000000ull);
  EXPECT_LT(params(p), 79674391296ull + 1700000000ull);
  const DecodeBytes b = decode_bytes(p.costs, p.family, p.config.text, "cuda", 0, 1);
  EXPECT_NEAR(static_cast<double>(b.dense + b.experts) / 1e9, 4.96, 0.1);  // experts NVFP4, the rest BF16
}

TEST(SyntheticFamilies, LayersCutEverySchedule) {
  const nlohmann::json c = limit_layers(synthetic_config("glm5_next"), 8);
  const nlohmann::json& t = c["text_config"];
  EXPECT_EQ(t["num_hidden_layers"], 8);
  EXPECT_EQ(t["layer_types"].size(), 8u);
  EXPECT_EQ(t["mlp_layer_types"].size(), 8u);
  EXPECT_EQ(t["indexer_types"].size(), 8u);
  EXPECT_EQ(t["layer_types"][7], "deepseek_sparse_attention");
  const SyntheticPlan p = plan_synthetic(c, SyntheticLayout::Nvidia);
  // layers 3…7 sparse + the NextN layer
  EXPECT_EQ(p.bytes_by_format.at("NVFP4"), 6ull * 288 * 3 * nvfp4_bytes(2048, 4096));
  const nlohmann::json q = limit_layers(synthetic_config("qwen4_exp"), 2);
  EXPECT_TRUE(q["text_config"]["ple_layer_ids"].empty());  // PLE sat at layer 2
  for (int64_t bad : {int64_t{0}, int64_t{46}}) {
    try {
      limit_layers(synthetic_config("glm5_next"), bad);
      FAIL() << "--layers " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.info().id, "E_BENCH_ARGS");
    }
  }
}

// A small glm5_next (shipped schedule rules, tiny widths, 4 layers: KDA ×3 + one DSA with its indexer, dense
// then sparse MLPs) built on the CPU and run through the bench grid: every row finite.
TEST(SyntheticFamilies, TinyGlm5NextRunsOnCpu) {
  const nlohmann::json c = tiny_synthetic("glm5_next");
  auto be = make_cpu_backend(2);
  auto sm = build_synthetic(c, *be, SyntheticLayout::Nvidia, {}, 2);
  EXPECT_EQ(sm->model->info().family, "glm5_next");
  EXPECT_TRUE(sm->model->info().has_draft);
  EXPECT_GT(sm->bytes_by_format["NVFP4"], 0u);
  // plain (weight-multiplying) norms get weights near 1
  const Weight& norm = sm->weights.get("model.language_model.layers.0.input_layernorm.weight");
  EXPECT_NEAR(norm.dense().f32()[0], 1.0f, 0.11f);
  BenchParams p;
  p.ps = {9};
  p.ns = {3};
  p.ds = {4};
  p.cs = {1, 2};
  p.repeats = 1;
  const auto rows = run_bench_grid(*be, *sm->model, host_hooks(*be), p);
  ASSERT_EQ(rows.size(), 4u);
  for (const BenchRow& r : rows) EXPECT_TRUE(r.finite) << r.test << " c=" << r.conc;
}

}  // namespace
}  // namespace bloomery::tools
