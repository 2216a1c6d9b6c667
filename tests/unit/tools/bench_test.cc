// bloomery bench's library parts on the CPU backend: statistics on known inputs, the synthetic builder on a
// tiny qwen4_exp config (formats per tensor, magnitudes, finite logits), the pp/tg grid run once, and the
// decode-bytes model.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "tiny_synthetic.h"
#include "tools/bench_bytes.h"
#include "tools/bench_core.h"
#include "tools/synthetic_model.h"

namespace bloomery::tools {
namespace {

TEST(BenchStats, PercentileNearestRank) {
  EXPECT_EQ(percentile({}, 0.5), 0.0);
  EXPECT_EQ(percentile({7}, 0.95), 7.0);
  EXPECT_EQ(percentile({5, 1, 4, 2, 3}, 0.5), 3.0);
  EXPECT_EQ(percentile({5, 1, 4, 2, 3}, 0.95), 5.0);
  EXPECT_EQ(percentile({5, 1, 4, 2, 3}, 0.05), 1.0);
  std::vector<double> v;
  for (int i = 20; i >= 1; --i) v.push_back(i);
  EXPECT_EQ(percentile(v, 0.5), 10.0);   // rank ceil(10) = 10
  EXPECT_EQ(percentile(v, 0.95), 19.0);  // rank ceil(19) = 19
  EXPECT_EQ(percentile(v, 1.0), 20.0);
}

// A tiny qwen4_exp (the fixture's shape: 5 layers, 2 QSA, PLE on layer 1, 16 experts top-4, MTP layer).
std::string tiny_config_file() {
  nlohmann::json t = tiny_qwen4_widths();
  t.merge_patch(
      {{"num_hidden_layers", 5},
       {"layer_types",
        {"linear_attention", "linear_attention", "full_attention", "linear_attention", "full_attention"}},
       {"eos_token_id", 2}});
  const auto path = std::filesystem::temp_directory_path() /
                    ("bloomery_tiny_qwen4_" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << t.dump();
  return path.string();
}

TEST(Synthetic, ConfigMergesOverBuiltin) {
  const nlohmann::json full = synthetic_config("qwen4_exp");
  EXPECT_EQ(full["text_config"]["num_hidden_layers"], 48);
  EXPECT_EQ(full["text_config"]["num_experts"], 512);
  EXPECT_EQ(full["text_config"]["layer_types"][3], "full_attention");
  const nlohmann::json tiny = synthetic_config("qwen4_exp:" + tiny_config_file());
  EXPECT_EQ(tiny["text_config"]["num_hidden_layers"], 5);
  EXPECT_EQ(tiny["text_config"]["output_gate_type"], "sigmoid");  // kept from the built-in config
  EXPECT_EQ(tiny["model_type"], "qwen4_exp");
  try {
    synthetic_config("no_such_family");
    FAIL() << "no built-in config for an unknown family";
  } catch (const Error& e) {
    EXPECT_EQ(e.info().id, "E_BENCH_UNSUPPORTED");
  }
  try {
    synthetic_config("qwen4_exp:/nonexistent/config.json");
    FAIL() << "missing file";
  } catch (const Error& e) {
    EXPECT_EQ(e.info().id, "E_BENCH_CONFIG");
  }
}

double rms(const Tensor& t) {
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += static_cast<double>(t.f32()[i]) * t.f32()[i];
  return std::sqrt(s / static_cast<double>(t.numel()));
}

TEST(Synthetic, TinyQwen4OnCpuHasExportFormatsAndSaneScales) {
  auto be = make_cpu_backend(2);
  auto sm = build_synthetic(synthetic_config("qwen4_exp:" + tiny_config_file()), *be, SyntheticLayout::Nvidia,
                            {}, 2);
  const auto decls = sm->model->declare();
  EXPECT_EQ(sm->weights.size(), decls.size());  // every declared tensor, the optional MTP layer included
  EXPECT_TRUE(sm->model->info().has_draft);
  EXPECT_GT(sm->bytes_by_format["NVFP4"], 0u);
  EXPECT_GT(sm->bytes_by_format["BF16"], 0u);
  EXPECT_GT(sm->bytes_by_format["FP8_BLOCK"], 0u);  // the MTP layer's experts
  EXPECT_GT(sm->table_bytes, 0u);                   // the FP8 PLE table
  EXPECT_EQ(sm->bytes_by_format.count("MXFP8"), 0u);
  // Weights come out near N(0, 1/K): an NVFP4 expert, a BF16 projection, the FP8-block MTP expert.
  const std::string P = "model.language_model.layers.0.";
  for (const std::string& name : {P + "mlp.experts.3.gate_proj.weight", P + "linear_attn.in_proj_qkv.weight",
                                  std::string("mtp.layers.0.mlp.experts.1.up_proj.weight")}) {
    const Weight& w = sm->weights.get(name);
    const double want = 1.0 / std::sqrt(static_cast<double>(w.cols()));
    EXPECT_NEAR(rms(w.dense()), want, 0.25 * want) << name;
  }
  // Norm weights hold their usual values: zero-centred q_norm, plain GDN gated norm around 1.
  EXPECT_LT(rms(sm->weights.get("model.language_model.layers.2.self_attn.q_norm.weight").dense()), 0.1);
  EXPECT_NEAR(rms(sm->weights.get(P + "linear_attn.norm.weight").dense()), 1.0, 0.1);
  const float a_log = sm->weights.get(P + "linear_attn.A_log").dense().f32()[0];
  EXPECT_TRUE(a_log >= 0.0f && a_log <= std::log(16.0f));

  // The bench grid once: pp and tg at depth 4 with C = 1 and 2 (tg batched through forward_batch).
  BenchParams p;
  p.ps = {8};
  p.ns = {3};
  p.ds = {4};
  p.cs = {1, 2};
  p.repeats = 2;
  int seen = 0;
  const auto rows = run_bench_grid(*be, *sm->model, host_hooks(*be), p, [&](const BenchRow&) { ++seen; });
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(seen, 4);
  for (const BenchRow& r : rows) {
    EXPECT_FALSE(r.skipped);
    EXPECT_TRUE(r.finite) << r.test << " c=" << r.conc;
    ASSERT_EQ(r.tps.size(), 2u);
    EXPECT_GT(percentile(r.tps, 0.5), 0.0);
    if (r.test == "tg3") {
      EXPECT_EQ(r.ms.size(), 6u);  // 2 repeats × 3 steps
      EXPECT_GE(r.depth_end, 4 + 6);
    } else {
      EXPECT_EQ(r.test, "pp8");
      EXPECT_EQ(r.ms.size(), 2u);
    }
  }
  EXPECT_EQ(rows[2].conc, 1);
  EXPECT_EQ(rows[3].conc, 2);
  EXPECT_EQ(rows[3].depth_end, rows[2].depth_end + 6);  // C = 2 continues on the same pool sequences
}

TEST(Synthetic, QadLayoutStoresProjectionsMxfp8) {
  auto be = make_cpu_backend(2);
  auto sm =
      build_synthetic(synthetic_config("qwen4_exp:" + tiny_config_file()), *be, SyntheticLayout::Qad, {}, 2);
  EXPECT_GT(sm->bytes_by_format["MXFP8"], 0u);
  EXPECT_EQ(sm->bytes_by_format.count("FP8_BLOCK"), 0u);  // QAD ships NVFP4 draft experts
  const Weight& w = sm->weights.get("model.language_model.layers.0.linear_attn.in_proj_qkv.weight");
  const double want = 1.0 / std::sqrt(static_cast<double>(w.cols()));
  EXPECT_NEAR(rms(w.dense()), want, 0.5 * want);  // power-of-two scales: within a factor √2
  // pp at its own depth and concurrency (--pp-depths / --pp-concurrent), tg at -d / -c.
  BenchParams p;
  p.ps = {4};
  p.pp_ds = {0};
  p.pp_cs = {1};
  p.ns = {2};
  p.ds = {3};
  p.cs = {1, 3};
  p.repeats = 1;
  p.warmup = false;
  const auto rows = run_bench_grid(*be, *sm->model, host_hooks(*be), p);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].test, "pp4");
  EXPECT_EQ(rows[0].depth, 0);
  EXPECT_EQ(rows[1].test, "tg2");
  EXPECT_EQ(rows[1].depth, 3);
  EXPECT_EQ(rows[2].conc, 3);
  for (const BenchRow& r : rows) EXPECT_TRUE(r.finite) << r.test;
}

TEST(Synthetic, GraphsAbAlternatesRepeatByRepeat) {
  auto be = make_cpu_backend(2);
  auto sm = build_synthetic(synthetic_config("qwen4_exp:" + tiny_config_file()), *be, SyntheticLayout::Nvidia,
                            {}, 2);
  BenchParams p;
  p.ps = {0};
  p.ns = {2};
  p.ds = {1};
  p.cs = {2};
  p.repeats = 2;
  p.warmup = false;
  p.graphs_ab = true;
  BenchHooks h = host_hooks(*be);
  std::vector<bool> toggles;
  h.set_step_graphs = [&](bool on) { toggles.push_back(on); };
  const auto rows = run_bench_grid(*be, *sm->model, h, p);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].test, "tg2");
  EXPECT_EQ(rows[1].test, "tg2+graphs");
  for (const BenchRow& r : rows) {
    EXPECT_EQ(r.ms.size(), 4u) << r.test;  // 2 repeats × 2 steps each
    EXPECT_EQ(r.conc, 2);
    EXPECT_TRUE(r.finite) << r.test;
  }
  EXPECT_EQ(toggles, (std::vector<bool>{false, true, false, false, true, false}));
  // Without a hook (a backend with no step graphs) ab has nothing to alternate: one row per test.
  p.graphs_ab = true;
  EXPECT_EQ(run_bench_grid(*be, *sm->model, host_hooks(*be), p).size(), 1u);
}

TEST(BenchBytes, ExpertsAreTheUnionOverSequences) {
  auto be = make_cpu_backend(1);
  auto sm = build_synthetic(synthetic_config("qwen4_exp:" + tiny_config_file()), *be, SyntheticLayout::Nvidia,
                            {}, 1);
  const nlohmann::json& c = sm->config.text;
  const DecodeBytes b1 = decode_bytes(sm->costs, "qwen4_exp", c, "cuda", 100, 1);
  const DecodeBytes b4 = decode_bytes(sm->costs, "qwen4_exp", c, "cuda", 100, 4);
  EXPECT_DOUBLE_EQ(b1.unique_experts, 4.0);  // C = 1: exactly top_k
  const double u4 = 16.0 * (1.0 - std::pow(1.0 - 4.0 / 16.0, 4));
  EXPECT_NEAR(b4.unique_experts, u4, 1e-9);
  EXPECT_NEAR(static_cast<double>(b4.experts) / b1.experts, u4 / 4.0, 1e-3);
  EXPECT_EQ(b4.state, 4 * b1.state);  // state is per sequence
  EXPECT_TRUE(b1.state_known);
  // Deeper context reads more KV; a BF16 cache (-ctk bf16) reads half the K/V bytes of the f32 one.
  const DecodeBytes deep = decode_bytes(sm->costs, "qwen4_exp", c, "cuda", 1000, 1);
  EXPECT_GT(deep.state, b1.state);
  const DecodeBytes deep_bf16 = decode_bytes(sm->costs, "qwen4_exp", c, "cuda", 1000, 1, 1, 2);
  const DecodeBytes first = decode_bytes(sm->costs, "qwen4_exp", c, "cuda", 1, 1);
  const DecodeBytes first_bf16 = decode_bytes(sm->costs, "qwen4_exp", c, "cuda", 1, 1, 1, 2);
  EXPECT_LT(deep_bf16.state, deep.state);
  EXPECT_GT(deep.state - deep_bf16.state, first.state - first_bf16.state)
      << "the saving grows with the rows attended";
  EXPECT_EQ(first.dense, first_bf16.dense);
  // Dense weights: read once per step whatever C is, apart from the embedding and PLE rows per sequence.
  EXPECT_LT(b4.dense, 2 * b1.dense);
  // The MTP layer is never counted; f32 (CPU) bytes exceed stored bytes.
  EXPECT_GT(decode_bytes(sm->costs, "qwen4_exp", c, "cpu", 100, 1).dense, b1.dense);
}

// The full-size plan (nothing built): stored bytes per format and weights read per decoded token against
// models.md §3.11 (NVIDIA export 9.95 GB, QAD 6.47 GB) and formats.md §7 (FP8 table 51.2 GB).
TEST(Synthetic, FullSizePlanMatchesTheSpecBytes) {
  const SyntheticPlan nv = plan_synthetic(synthetic_config("qwen4_exp"), SyntheticLayout::Nvidia);
  EXPECT_EQ(nv.family, "qwen4_exp");
  // 48 layers × 512 experts × 3 projections of [640, 2560]: nibbles + E4M3 scales + one F32 global.
  EXPECT_EQ(nv.bytes_by_format.at("NVFP4"), 48ull * 512 * 3 * (640 * 2560 / 2 + 640 * 2560 / 16 + 4));
  EXPECT_EQ(nv.bytes_by_format.at("FP8_BLOCK"), 512ull * 3 * (640 * 2560 + 5 * 20 * 2));  // MTP experts
  EXPECT_EQ(nv.table_bytes, 320001536ull * 160 + 2);  // FP8 rows + the BF16 scale
  const DecodeBytes b = decode_bytes(nv.costs, nv.family, nv.config.text, "cuda", 0, 1);
  EXPECT_NEAR(static_cast<double>(b.dense + b.experts) / 1e9, 9.95, 0.01);
  const SyntheticPlan qad = plan_synthetic(synthetic_config("qwen4_exp"), SyntheticLayout::Qad);
  const DecodeBytes q = decode_bytes(qad.costs, qad.family, qad.config.text, "cuda", 0, 1);
  EXPECT_NEAR(static_cast<double>(q.dense + q.experts) / 1e9, 6.47, 0.03);
}

// A K-row verify of one sequence reads the dense weights once, the experts its K rows pick and one sequence's
// state: at full size (uniform routing) a 4-row verify must read about 1.37× a decode step's bytes in the
// nvidia layout, more in qad (fewer dense bytes to share), which bounds issue 13's verify4 target from below.
TEST(BenchBytes, AVerifyReadsTheDenseWeightsOnceAndTheExpertsOfItsRows) {
  const SyntheticPlan nv = plan_synthetic(synthetic_config("qwen4_exp"), SyntheticLayout::Nvidia);
  const auto& c = nv.config.text;
  const DecodeBytes one = decode_bytes(nv.costs, nv.family, c, "cuda", 4096, 1);
  const DecodeBytes v1 = verify_bytes(nv.costs, nv.family, c, "cuda", 4096, 1);
  EXPECT_EQ(v1.total(), one.total());  // one row is a decode step
  const DecodeBytes v4 = verify_bytes(nv.costs, nv.family, c, "cuda", 4096, 4);
  const DecodeBytes c4 = decode_bytes(nv.costs, nv.family, c, "cuda", 4096, 4);
  EXPECT_EQ(v4.experts, c4.experts);  // the union over the rows, as for four sequences
  EXPECT_EQ(v4.state, one.state);     // but one sequence's state
  const double nv4 = static_cast<double>(v4.total()) / one.total();
  EXPECT_NEAR(nv4, 1.37, 0.02);
  const SyntheticPlan qad = plan_synthetic(synthetic_config("qwen4_exp"), SyntheticLayout::Qad);
  const double qad4 =
      static_cast<double>(verify_bytes(qad.costs, qad.family, qad.config.text, "cuda", 4096, 4).total()) /
      decode_bytes(qad.costs, qad.family, qad.config.text, "cuda", 4096, 1).total();
  EXPECT_GT(qad4, nv4);
}

// The full-size model's stored weights without its host table (80.5 GB) do not fit 64 GiB: refused by
// name before anything is built; a card with room, or an unknown free size, passes.
TEST(Synthetic, AModelBeyondTheDevicesMemoryIsRefusedBeforeItIsBuilt) {
  const SyntheticPlan nv = plan_synthetic(synthetic_config("qwen4_exp"), SyntheticLayout::Nvidia);
  uint64_t device = 0;
  for (const auto& [format, bytes] : nv.bytes_by_format) device += bytes;
  device -= nv.table_bytes;
  EXPECT_NEAR(static_cast<double>(device) / 1e9, 80.5, 0.1);
  try {
    check_synthetic_fits(nv, 64ull << 30, "synthetic qwen4_exp");
    FAIL() << "not refused";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("E_MEMORY_PLAN"), std::string::npos) << what;
    EXPECT_NE(what.find("synthetic qwen4_exp"), std::string::npos) << what;
    EXPECT_NE(what.find("--layers"), std::string::npos) << what;
  }
  EXPECT_NO_THROW(check_synthetic_fits(nv, device, "synthetic qwen4_exp"));
  EXPECT_NO_THROW(check_synthetic_fits(nv, 0, "synthetic qwen4_exp"));
}

}  // namespace
}  // namespace bloomery::tools
