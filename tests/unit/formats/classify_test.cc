// Per-tensor classification on synthetic tensor lists (formats.md §4.8 rows, reconcile actions, §6 shape
// checks).
#include <gtest/gtest.h>

#include <map>

#include "formats/classify.h"

namespace bloomery {
namespace {

using json = nlohmann::json;

// A synthetic folder: tensor names, dtypes and shapes only (no bytes).
struct Fake {
  std::vector<TensorEntry> tensors;
  Fake& add(const std::string& name, DType d, std::vector<uint64_t> shape) {
    TensorEntry t;
    t.name = name;
    t.dtype = d;
    t.shape = shape;
    t.numel = 1;
    for (uint64_t s : shape) t.numel *= s;
    t.nbytes = dtype_bytes_for(d, t.numel).value_or(0);
    tensors.push_back(std::move(t));
    return *this;
  }
  // ModelOpt NVFP4 linear [n, k].
  Fake& nvfp4(const std::string& m, uint64_t n, uint64_t k, bool input_scale = true) {
    add(m + ".weight", DType::U8, {n, k / 2});
    add(m + ".weight_scale", DType::F8_E4M3, {n, k / 16});
    add(m + ".weight_scale_2", DType::F32, {});
    if (input_scale) add(m + ".input_scale", DType::F32, {});
    return *this;
  }
  Fake& dense(const std::string& m, uint64_t n, uint64_t k, DType d = DType::BF16) {
    return add(m + ".weight", d, {n, k});
  }
  Fake& remove(const std::string& name) {
    std::erase_if(tensors, [&](const TensorEntry& t) { return t.name == name; });
    return *this;
  }
  TensorEntry& get(const std::string& name) {
    for (auto& t : tensors)
      if (t.name == name) return t;
    throw std::runtime_error("no tensor " + name);
  }
};

struct Result {
  std::vector<WeightRecord> records;
  Warnings warnings;
  const WeightRecord& at(const std::string& name) const {
    for (const auto& r : records)
      if (r.name == name) return r;
    throw std::runtime_error("no record " + name);
  }
};

QuantPlan plan_from(const json& qc) {
  Warnings w;
  return qc.is_null() ? QuantPlan{}
                      : resolve_quant_plan(json{{"quantization_config", qc}}, nullptr, false, w);
}

std::unique_ptr<Result> run(const Fake& f, const QuantPlan& plan, ClassifyOptions opt = {}) {
  auto r = std::make_unique<Result>();
  r->records = classify_tensors(f.tensors, plan, opt, r->warnings);
  // Every stored tensor belongs to exactly one record.
  std::map<const TensorEntry*, int> uses;
  for (const auto& rec : r->records) {
    for (const TensorEntry* t : rec.main) uses[t]++;
    for (const TensorEntry* t : rec.block_scale_shards) uses[t]++;
    for (const TensorEntry* t :
         {rec.block_scale, rec.global_scale, rec.input_scale, rec.csf_fixed, rec.csf_exceptions})
      if (t) uses[t]++;
  }
  EXPECT_EQ(uses.size(), f.tensors.size());
  for (const auto& [t, n] : uses) EXPECT_EQ(n, 1) << t->name;
  EXPECT_TRUE(std::is_sorted(r->records.begin(), r->records.end(),
                             [](const WeightRecord& a, const WeightRecord& b) { return a.name < b.name; }));
  return r;
}

std::string error_of(const Fake& f, const QuantPlan& plan = {}, ClassifyOptions opt = {}) {
  try {
    Warnings w;
    classify_tensors(f.tensors, plan, opt, w);
  } catch (const Error& e) {
    return e.id();
  }
  return "no error";
}

const json kNvfp4 = {{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}, {"ignore", {"lm_head"}}};

// ---- §4.8 table rows
// -----------------------------------------------------------------------------------------

TEST(Classify, CompressedTensorsNvfp4) {
  Fake f;
  f.add("l.q_proj.weight_packed", DType::U8, {32, 32})
      .add("l.q_proj.weight_scale", DType::F8_E4M3, {32, 4})
      .add("l.q_proj.weight_global_scale", DType::F32, {1})
      .add("l.q_proj.input_global_scale", DType::F32, {1});
  auto r = run(f, {});
  const auto& w = r->at("l.q_proj.weight");
  EXPECT_EQ(w.format, FormatId::NVFP4_CT);
  EXPECT_EQ(w.shape, (std::vector<uint64_t>{32, 64}));
  EXPECT_EQ(w.global_scale->name, "l.q_proj.weight_global_scale");
  EXPECT_EQ(w.input_scale->name, "l.q_proj.input_global_scale");
}

TEST(Classify, ModelOptNvfp4AndW4A16) {
  Fake f;
  f.nvfp4("m.layers.0.mlp.experts.0.up_proj", 16, 64).nvfp4("m.layers.0.self_attn.o_proj", 16, 64, false);
  f.add("m.layers.0.self_attn.x_proj.weight", DType::F4, {8, 32})
      .add("m.layers.0.self_attn.x_proj.weight_scale", DType::F8_E4M3, {8, 2})
      .add("m.layers.0.self_attn.x_proj.weight_scale_2", DType::F32, {1});
  auto r = run(f, {});
  const auto& e = r->at("m.layers.0.mlp.experts.0.up_proj.weight");
  EXPECT_EQ(e.format, FormatId::NVFP4);
  EXPECT_EQ(e.shape, (std::vector<uint64_t>{16, 64}));
  EXPECT_EQ(e.block_scale->name, "m.layers.0.mlp.experts.0.up_proj.weight_scale");
  EXPECT_EQ(e.global_scale->name, "m.layers.0.mlp.experts.0.up_proj.weight_scale_2");
  EXPECT_EQ(e.module, "m.layers.0.mlp.experts.0.up_proj");
  EXPECT_EQ(r->at("m.layers.0.self_attn.o_proj.weight").format, FormatId::W4A16_NVFP4);
  EXPECT_EQ(r->at("m.layers.0.self_attn.x_proj.weight").shape, (std::vector<uint64_t>{8, 32}));
  EXPECT_EQ(r->at("m.layers.0.self_attn.x_proj.weight").format, FormatId::W4A16_NVFP4);
}

Fake csf_expert(const std::string& m, uint64_t n = 32, uint64_t k = 64) {
  Fake f;
  f.add(m + ".weight", DType::U8, {n, k / 2})
      .add(m + ".weight_scale.nvfp4_csf_fixed", DType::U8, {n * (1 + k / 32)})
      .add(m + ".weight_scale.nvfp4_csf_exceptions", DType::U32, {3})
      .add(m + ".weight_scale_2", DType::F32, {})
      .add(m + ".input_scale", DType::F32, {});
  return f;
}

TEST(Classify, Nvfp4WithCsfScales) {
  Fake f = csf_expert("m.layers.0.mlp.experts.0.up_proj");
  // The 2-D fixed-stream form is accepted too.
  f.add("m.layers.0.mlp.experts.0.gate_proj.weight", DType::U8, {32, 32})
      .add("m.layers.0.mlp.experts.0.gate_proj.weight_scale.nvfp4_csf_fixed", DType::U8, {2, 16 * 3})
      .add("m.layers.0.mlp.experts.0.gate_proj.weight_scale.nvfp4_csf_exceptions", DType::U32, {0})
      .add("m.layers.0.mlp.experts.0.gate_proj.weight_scale_2", DType::F32, {})
      .add("m.layers.0.mlp.experts.0.gate_proj.input_scale", DType::F32, {});
  for (auto& t : csf_expert("m.layers.0.mlp.experts.0.down_proj", 64, 32).tensors) f.tensors.push_back(t);
  auto r = run(f, {});
  const auto& w = r->at("m.layers.0.mlp.experts.0.up_proj.weight");
  EXPECT_EQ(w.format, FormatId::NVFP4);
  EXPECT_EQ(w.scale_encoding, ScaleEncoding::NvFp4Csf);
  EXPECT_EQ(w.block_scale, nullptr);
  EXPECT_EQ(w.csf_fixed->name, "m.layers.0.mlp.experts.0.up_proj.weight_scale.nvfp4_csf_fixed");
  EXPECT_EQ(w.csf_exceptions->name, "m.layers.0.mlp.experts.0.up_proj.weight_scale.nvfp4_csf_exceptions");
  EXPECT_EQ(r->at("m.layers.0.mlp.experts.0.down_proj.weight").shape, (std::vector<uint64_t>{64, 32}));
}

TEST(Classify, Mxfp4ModelOptCtAndGptOss) {
  Fake f;
  f.add("a.weight", DType::U8, {8, 32}).add("a.weight_scale", DType::U8, {8, 2});
  f.add("b.weight_packed", DType::U8, {8, 32}).add("b.weight_scale", DType::F8_E8M0, {8, 2});
  f.add("c.weight", DType::I8, {8, 32}).add("c.scale", DType::F8_E8M0, {8, 2});  // DeepSeek-V4 naming
  f.add("m.experts.gate_up_proj_blocks", DType::U8, {2, 8, 2, 16})
      .add("m.experts.gate_up_proj_scales", DType::U8, {2, 8, 2});
  auto r = run(f, {});
  EXPECT_EQ(r->at("a.weight").format, FormatId::MXFP4);
  EXPECT_EQ(r->at("a.weight").shape, (std::vector<uint64_t>{8, 64}));
  EXPECT_EQ(r->at("b.weight").format, FormatId::MXFP4);
  EXPECT_EQ(r->at("c.weight").format, FormatId::MXFP4);
  EXPECT_EQ(r->at("c.weight").block_scale->name, "c.scale");
  const auto& g = r->at("m.experts.gate_up_proj");
  EXPECT_EQ(g.format, FormatId::MXFP4);
  EXPECT_EQ(g.shape, (std::vector<uint64_t>{2, 8, 64}));
}

TEST(Classify, Mxfp8) {
  Fake f;
  f.add("a.weight", DType::F8_E4M3, {4, 64}).add("a.weight_scale", DType::U8, {4, 2});
  auto r = run(f, plan_from({{"quant_method", "modelopt"}, {"quant_algo", "MXFP8"}}));
  EXPECT_EQ(r->at("a.weight").format, FormatId::MXFP8);
  EXPECT_TRUE(r->warnings.empty());
  // Without a plan the [N, K/32] U8 scale still says MXFP8.
  EXPECT_EQ(run(f, {})->at("a.weight").format, FormatId::MXFP8);
}

TEST(Classify, Fp8BlockFamilies) {
  Fake f;
  f.add("a.weight", DType::F8_E4M3, {300, 260}).add("a.weight_scale_inv", DType::F32, {3, 3});
  f.add("b.weight", DType::F8_E4M3, {256, 128}).add("b.weight_scale_inv", DType::BF16, {2, 1});
  f.add("c.weight", DType::F8_E4M3, {256, 256}).add("c.weight_scale", DType::F32, {2, 1, 2, 1});
  f.add("d.weight", DType::F8_E4M3, {256, 128}).add("d.weight_scale_inv", DType::F8_E8M0, {2, 1});
  auto r = run(f, plan_from({{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}}));
  for (const char* n : {"a.weight", "b.weight", "c.weight", "d.weight"}) {
    EXPECT_EQ(r->at(n).format, FormatId::FP8_BLOCK) << n;
    EXPECT_EQ(r->at(n).block_n, 128) << n;
  }
  EXPECT_TRUE(r->warnings.empty());
  // No block size in the config: inferred only for exact square tiles.
  Fake g;
  g.add("e.weight", DType::F8_E4M3, {64, 128}).add("e.weight_scale", DType::F32, {2, 4});
  auto r2 = run(g, {});
  EXPECT_EQ(r2->at("e.weight").format, FormatId::FP8_BLOCK);
  EXPECT_EQ(r2->at("e.weight").block_n, 32);
  EXPECT_EQ(r2->at("e.weight").block_k, 32);
  Fake h;
  h.add("e.weight", DType::F8_E4M3, {64, 128}).add("e.weight_scale", DType::F32, {2, 2});
  EXPECT_EQ(error_of(h), "E_FP8_BLOCK_GRID");
  // The config's block size must produce the stored grid.
  EXPECT_EQ(error_of(g, plan_from({{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}})),
            "E_FP8_BLOCK_GRID");
}

TEST(Classify, Fp8ChannelAndTensor) {
  Fake f;
  f.add("a.weight", DType::F8_E4M3, {8, 16}).add("a.weight_scale", DType::F32, {8});
  f.add("b.weight", DType::F8_E4M3, {8, 16}).add("b.weight_scale", DType::BF16, {8, 1});
  f.add("c.weight", DType::F8_E4M3, {8, 16})
      .add("c.weight_scale", DType::F32, {})
      .add("c.input_scale", DType::F32, {});
  f.add("d.weight", DType::F8_E4M3, {8, 16}).add("d.weight_scale", DType::BF16, {1});
  auto r = run(f, {});
  EXPECT_EQ(r->at("a.weight").format, FormatId::FP8_CHANNEL);
  EXPECT_EQ(r->at("b.weight").format, FormatId::FP8_CHANNEL);
  EXPECT_EQ(r->at("c.weight").format, FormatId::FP8_TENSOR);
  EXPECT_EQ(r->at("c.weight").global_scale->name, "c.weight_scale");
  EXPECT_EQ(r->at("c.weight").input_scale->name, "c.input_scale");
  EXPECT_EQ(r->at("d.weight").format, FormatId::FP8_TENSOR);
}

const std::string kTable = "model.language_model.layers.1.ple.ple_embedding.ngram_embedding";

Fake ple(DType d, int shards, uint64_t rows, uint64_t last_rows, uint64_t width = 4, bool scale = true) {
  Fake f;
  // Written in lexical order on purpose: numeric order must win (shard_2 before shard_11).
  std::vector<int> order;
  for (int j = 0; j < shards; ++j) order.push_back(j);
  std::sort(order.begin(), order.end(), [](int a, int b) { return std::to_string(a) < std::to_string(b); });
  for (int j : order)
    f.add(kTable + ".shard_" + std::to_string(j) + ".weight", d, {j == shards - 1 ? last_rows : rows, width});
  if (scale && d == DType::F8_E4M3) f.add(kTable + ".weight_scale", DType::BF16, {1});
  f.add("model.language_model.layers.1.ple.ple_embedding.ngram_heads_vocab_sizes", DType::I64, {2});
  return f;
}

TEST(Classify, PleTableIsOneRecordInNumericShardOrder) {
  Fake f = ple(DType::F8_E4M3, 12, 5, 3);  // records point into f: keep it alive
  auto r = run(f, plan_from({{"quant_algo", "MIXED_PRECISION"},
                             {"quantized_layers", {{kTable, {{"quant_algo", "FP8"}}}}}}));
  const auto& t = r->at(kTable + ".weight");
  EXPECT_EQ(t.format, FormatId::FP8_TENSOR);
  EXPECT_EQ(t.shape, (std::vector<uint64_t>{5 * 11 + 3, 4}));
  ASSERT_EQ(t.main.size(), 12u);
  for (size_t j = 0; j < 12; ++j)
    EXPECT_EQ(t.main[j]->name, kTable + ".shard_" + std::to_string(j) + ".weight");
  EXPECT_EQ(t.global_scale->name, kTable + ".weight_scale");
  EXPECT_TRUE(r->warnings.empty());
  EXPECT_EQ(r->at("model.language_model.layers.1.ple.ple_embedding.ngram_heads_vocab_sizes").kind,
            RecordKind::Param);
  Fake bf = ple(DType::BF16, 3, 5, 5);
  auto b = run(bf, {});
  EXPECT_EQ(b->at(kTable + ".weight").format, FormatId::BF16);
}

TEST(Classify, Nvfp4PleTableWithPerShardScales) {
  Fake f;
  for (int j = 0; j < 3; ++j) {
    f.add(kTable + ".shard_" + std::to_string(j) + ".weight", DType::U8, {j == 2 ? 2u : 4u, 8});
    f.add(kTable + ".shard_" + std::to_string(j) + ".weight_scale", DType::F8_E4M3, {j == 2 ? 2u : 4u, 1});
  }
  f.add(kTable + ".weight_scale_2", DType::F32, {});
  ClassifyOptions refuse;
  refuse.nvfp4_ple_shards = false;
  EXPECT_EQ(error_of(f, {}, refuse), "E_Q_UNRECOGNISED");
  ClassifyOptions opt;  // default: accepted, decode_weight reads the per-shard scales
  auto r = run(f, {}, opt);
  const auto& t = r->at(kTable + ".weight");
  EXPECT_EQ(t.format, FormatId::W4A16_NVFP4);
  EXPECT_EQ(t.shape, (std::vector<uint64_t>{10, 16}));
  ASSERT_EQ(t.block_scale_shards.size(), 3u);
  EXPECT_EQ(t.block_scale_shards[2]->name, kTable + ".shard_2.weight_scale");
  Fake no_scale = f;
  no_scale.remove(kTable + ".shard_1.weight_scale");
  EXPECT_EQ(error_of(no_scale, {}, opt), "E_PLE_SCALE_MISSING");
  Fake no_global = f;
  no_global.remove(kTable + ".weight_scale_2");
  EXPECT_EQ(error_of(no_global, {}, opt), "E_PLE_SCALE_MISSING");
  Fake bad = f;
  bad.get(kTable + ".shard_0.weight_scale").shape = {4, 2};
  EXPECT_EQ(error_of(bad, {}, opt), "E_NVFP4_SCALE_SHAPE");
}

TEST(Classify, DenseParamsBuffersAndKvScales) {
  Fake f;
  f.dense("m.layers.0.self_attn.q_proj", 8, 8)
      .add("m.layers.0.input_layernorm.weight", DType::BF16, {8})
      .add("m.layers.0.linear_attn.A_log", DType::F32, {4})
      .add("m.layers.0.self_attn.k_proj.k_scale", DType::F32, {})
      .add("m.layers.0.indexer.k_norm.bias", DType::BF16, {8})
      .add("lm_head.weight", DType::F16, {16, 8});
  auto r = run(f, {});
  EXPECT_EQ(r->at("m.layers.0.self_attn.q_proj.weight").format, FormatId::BF16);
  EXPECT_EQ(r->at("m.layers.0.self_attn.q_proj.weight").kind, RecordKind::Weight);
  EXPECT_EQ(r->at("m.layers.0.linear_attn.A_log").kind, RecordKind::Param);
  EXPECT_EQ(r->at("m.layers.0.linear_attn.A_log").format, FormatId::F32);
  EXPECT_EQ(r->at("m.layers.0.self_attn.k_proj.k_scale").kind, RecordKind::KvScale);
  EXPECT_EQ(r->at("lm_head.weight").format, FormatId::F16);
  EXPECT_EQ(r->records.size(), 6u);
}

TEST(Classify, VisionTowerIsListedAsSkipped) {
  Fake f;
  f.add("model.visual.blocks.0.attn.qkv.weight", DType::U8,
        {8, 8});  // no companions: not refused, only listed
  f.dense("model.visual.merger.fc", 4, 4);
  auto r = run(f, {});
  EXPECT_TRUE(r->at("model.visual.blocks.0.attn.qkv.weight").skipped);
  EXPECT_TRUE(r->at("model.visual.merger.fc.weight").skipped);
}

// ---- reconcile actions
// ---------------------------------------------------------------------------------------

TEST(Reconcile, SameFormatLoadsSilently) {
  Fake f;
  f.nvfp4("m.layers.0.mlp.down_proj", 16, 32).dense("lm_head", 8, 32);
  auto r = run(f, plan_from(kNvfp4));
  EXPECT_TRUE(r->warnings.empty());
}

TEST(Reconcile, PlanQuantTensorDenseWarns) {
  Fake f;
  f.dense("mtp.fc", 16, 32);
  auto r = run(f, plan_from(kNvfp4));
  EXPECT_EQ(r->at("mtp.fc.weight").format, FormatId::BF16);
  EXPECT_EQ(r->warnings.count("W_Q_PLAN_SAYS_QUANT_TENSOR_DENSE"), 1u);
}

TEST(Reconcile, PlanDenseTensorQuantWarns) {
  Fake f;
  f.nvfp4("lm_head", 16, 32);
  auto r = run(f, plan_from(kNvfp4));
  EXPECT_EQ(r->at("lm_head.weight").format, FormatId::NVFP4);
  EXPECT_EQ(r->warnings.count("W_Q_PLAN_SAYS_DENSE_TENSOR_QUANT"), 1u);
}

TEST(Reconcile, FormatConflictIsRefused) {
  Fake f;
  f.add("a.q_proj.weight", DType::F8_E4M3, {8, 16}).add("a.q_proj.weight_scale", DType::F32, {});
  EXPECT_EQ(error_of(f, plan_from(kNvfp4)), "E_Q_PLAN_FORMAT_CONFLICT");
}

TEST(Reconcile, Nvfp4InputScaleWarnings) {
  Fake f;
  f.nvfp4("a.q_proj", 16, 32, false);
  auto r = run(f, plan_from(kNvfp4));
  EXPECT_EQ(r->warnings.count("W_NVFP4_INPUT_SCALE_MISSING"), 1u);
  EXPECT_EQ(r->at("a.q_proj.weight").format, FormatId::W4A16_NVFP4);
  Fake g;
  g.nvfp4("a.q_proj", 16, 32, true);
  auto r2 = run(g, plan_from({{"quant_method", "modelopt"}, {"quant_algo", "W4A16_NVFP4"}}));
  EXPECT_EQ(r2->warnings.count("W_W4A16_INPUT_SCALE_IGNORED"), 1u);
  EXPECT_EQ(r2->at("a.q_proj.weight").format, FormatId::W4A16_NVFP4);
  EXPECT_NE(r2->at("a.q_proj.weight").input_scale, nullptr);  // kept, unused by W4A16
}

TEST(Reconcile, MissingOrphanUnrecognisedRoles) {
  Fake missing;
  missing.add("a.weight", DType::U8, {8, 8}).add("a.weight_scale_2", DType::F32, {});
  EXPECT_EQ(error_of(missing), "E_Q_MISSING_COMPANION");
  Fake fp8;
  fp8.add("a.weight", DType::F8_E4M3, {8, 8});
  EXPECT_EQ(error_of(fp8), "E_Q_MISSING_COMPANION");
  Fake orphan;
  orphan.add("a.weight_scale", DType::F8_E4M3, {8, 1}).add("b.weight", DType::BF16, {2, 2});
  EXPECT_EQ(error_of(orphan), "E_Q_ORPHAN_COMPANION");
  Fake orphan_p;
  orphan_p.add("m.experts.gate_up_proj_weight_scale", DType::F8_E4M3, {2, 8, 1});
  EXPECT_EQ(error_of(orphan_p), "E_Q_ORPHAN_COMPANION");
  Fake e5m2;
  e5m2.add("a.weight", DType::F8_E5M2, {8, 8}).add("a.weight_scale", DType::F32, {});
  EXPECT_EQ(error_of(e5m2), "E_Q_UNRECOGNISED");
  Fake awq;
  awq.nvfp4("a", 16, 32).add("a.pre_quant_scale", DType::BF16, {32});
  EXPECT_EQ(error_of(awq), "E_Q_UNRECOGNISED");
  Fake norm;
  norm.nvfp4("m.layers.0.self_attn.q_norm", 16, 32);
  EXPECT_EQ(error_of(norm), "E_Q_ROLE_NOT_QUANTISABLE");
  Fake conv;
  conv.add("m.layers.0.linear_attn.conv1d.weight", DType::F8_E4M3, {8, 4})
      .add("m.layers.0.linear_attn.conv1d.weight_scale", DType::F32, {});
  EXPECT_EQ(error_of(conv), "E_Q_ROLE_NOT_QUANTISABLE");
}

TEST(Reconcile, UnmatchedQuantizedLayersKeyWarns) {
  // Decision: a quantized_layers key naming a module with no tensors is W_Q_PLAN_KEY_UNMATCHED (the plan is
  // only a prediction; a stripped vision tower or draft layer must not refuse the folder).
  Fake f;
  f.nvfp4("model.layers.0.mlp.experts.0.up_proj", 16, 32);
  auto r = run(f, plan_from({{"quant_algo", "MIXED_PRECISION"},
                             {"quantized_layers",
                              {{"model.layers.0.mlp.experts", {{"quant_algo", "NVFP4"}}},
                               {"model.layers.9.mlp.experts", {{"quant_algo", "NVFP4"}}}}}}));
  EXPECT_EQ(r->warnings.count("W_Q_PLAN_KEY_UNMATCHED"), 1u);
}

// ---- named corruption cases
// ------------------------------------------------------------------------------------

TEST(Corrupt, Nvfp4Companions) {
  auto base = [] {
    Fake f;
    f.nvfp4("a", 16, 64);
    return f;
  };
  Fake f = base();
  f.get("a.weight_scale").shape = {16, 3};
  EXPECT_EQ(error_of(f), "E_NVFP4_SCALE_SHAPE");
  f = base();
  f.get("a.weight_scale").dtype = DType::U8;
  EXPECT_EQ(error_of(f), "E_NVFP4_SCALE_DTYPE");
  f = base();
  f.get("a.weight_scale").shape = {128 * 4};
  EXPECT_EQ(error_of(f), "E_NVFP4_SCALE_SWIZZLED");
  f = base();
  f.get("a.weight_scale_2").shape = {2};
  f.get("a.weight_scale_2").numel = 2;
  EXPECT_EQ(error_of(f), "E_NVFP4_GLOBAL_SHAPE");
  f = base();
  f.remove("a.weight_scale_2");
  EXPECT_EQ(error_of(f), "E_NVFP4_GLOBAL_MISSING");
  f = base();
  f.get("a.weight").shape = {16, 4};  // K = 8
  f.get("a.weight_scale").shape = {16, 0};
  EXPECT_EQ(error_of(f), "E_NVFP4_K_ALIGN");
  f = base();
  f.get("a.weight").shape = {2, 8, 32};
  EXPECT_EQ(error_of(f), "E_NVFP4_3D_UNVERIFIED");
  f = base();
  f.get("a.weight").shape = {512};
  EXPECT_EQ(error_of(f), "E_NVFP4_WEIGHT_SHAPE");
  Fake ct;
  ct.add("a.weight_packed", DType::U8, {8, 16})
      .add("a.weight_scale", DType::F8_E4M3, {8, 3})
      .add("a.weight_global_scale", DType::F32, {1});
  EXPECT_EQ(error_of(ct), "E_CT_NVFP4_SCALE_SHAPE");
  ct.remove("a.weight_global_scale");
  EXPECT_EQ(error_of(ct), "E_CT_NVFP4_GLOBAL_MISSING");
}

TEST(Corrupt, MxAndFp8Shapes) {
  const QuantPlan mx = plan_from({{"quant_method", "modelopt"}, {"quant_algo", "MXFP8"}});
  Fake f;
  f.add("a.weight", DType::F8_E4M3, {4, 64}).add("a.weight_scale", DType::U8, {4, 3});
  EXPECT_EQ(error_of(f, mx), "E_MXFP8_SCALE_SHAPE");
  Fake k;
  k.add("a.weight", DType::F8_E4M3, {4, 48}).add("a.weight_scale", DType::U8, {4, 2});
  EXPECT_EQ(error_of(k, mx), "E_MXFP8_K_ALIGN");
  Fake m4;
  m4.add("a.weight", DType::U8, {8, 32}).add("a.weight_scale", DType::U8, {8, 3});
  EXPECT_EQ(error_of(m4), "E_MXFP4_SHAPE");
  Fake gs;
  gs.add("m.experts.down_blocks", DType::U8, {2, 8, 2, 16})
      .add("m.experts.down_scales", DType::BF16, {2, 8, 2});
  EXPECT_EQ(error_of(gs), "E_MXFP4_SCALE_DTYPE");
  Fake fp8;
  fp8.add("a.weight", DType::F8_E4M3, {8, 16}).add("a.weight_scale", DType::F32, {8, 1, 1});
  EXPECT_EQ(error_of(fp8), "E_FP8_SCALE_SHAPE");
}

std::string moe(uint64_t experts, const std::function<void(Fake&)>& mutate, json text_config = nullptr) {
  Fake f;
  for (uint64_t e = 0; e < experts; ++e)
    for (const char* p : {"gate_proj", "up_proj", "down_proj"})
      f.nvfp4("m.layers.0.mlp.experts." + std::to_string(e) + "." + p, 16, 32);
  mutate(f);
  ClassifyOptions opt;
  opt.text_config = text_config;
  return error_of(f, {}, opt);
}

TEST(Corrupt, ExpertStacks) {
  EXPECT_EQ(moe(4, [](Fake&) {}), "no error");
  EXPECT_EQ(moe(4,
                [](Fake& f) {
                  for (const char* s : {".weight", ".weight_scale", ".weight_scale_2", ".input_scale"})
                    f.remove("m.layers.0.mlp.experts.2.up_proj" + std::string(s));
                }),
            "E_MOE_EXPERT_MISSING");
  EXPECT_EQ(moe(
                4, [](Fake&) {}, json{{"num_experts", 5}}),
            "E_MOE_EXPERT_MISSING");
  EXPECT_EQ(moe(
                4, [](Fake&) {}, json{{"num_experts", 4}}),
            "no error");
  EXPECT_EQ(moe(4, [](Fake& f) { f.remove("m.layers.0.mlp.experts.3.down_proj.input_scale"); }),
            "E_MOE_MIXED_FORMATS");
}

TEST(Corrupt, PleShards) {
  EXPECT_EQ(error_of(ple(DType::F8_E4M3, 4, 5, 3).remove(kTable + ".shard_2.weight")), "E_PLE_SHARD_MISSING");
  EXPECT_EQ(error_of(ple(DType::F8_E4M3, 4, 5, 3, 4, false)), "E_PLE_SCALE_MISSING");
  EXPECT_EQ(error_of(ple(DType::BF16, 4, 5, 7)), "E_PLE_SHARD_SHAPE");
  Fake mixed = ple(DType::BF16, 4, 5, 3);
  mixed.get(kTable + ".shard_1.weight").dtype = DType::F16;
  EXPECT_EQ(error_of(mixed), "E_PLE_DTYPE_MIXED");
  Fake wide = ple(DType::BF16, 4, 5, 3);
  wide.get(kTable + ".shard_3.weight").shape = {3, 5};
  EXPECT_EQ(error_of(wide), "E_PLE_SHARD_SHAPE");
  // With bytes: the head vocabulary sizes fix the row count (ceil(Σ / m) · m).
  ClassifyOptions opt;
  opt.text_config = {{"make_ngram_vocab_size_divisible_by", 2}, {"split_ngram_parts", 4}};
  std::vector<int64_t> sizes = {9, 8};  // Σ 17 → Vp 18 → 4 parts of 5 rows, the last 3
  opt.read = [&](const TensorEntry&) {
    std::vector<uint8_t> b(16);
    std::memcpy(b.data(), sizes.data(), 16);
    return b;
  };
  EXPECT_EQ(error_of(ple(DType::BF16, 4, 5, 3), {}, opt), "no error");
  sizes = {9, 11};  // Vp 20
  EXPECT_EQ(error_of(ple(DType::BF16, 4, 5, 3), {}, opt), "E_PLE_ROWS");
  opt.text_config = {{"ple_embed_dim", 32}, {"ngram_size", 3}, {"heads_per_ngram", 2}};  // de = 8
  EXPECT_EQ(error_of(ple(DType::BF16, 4, 5, 3), {}, opt), "E_PLE_SHARD_SHAPE");
}

Fake csf_layer(int experts = 2, const std::string& prefix = "m.layers.0.mlp.experts.") {
  Fake f;
  for (int e = 0; e < experts; ++e)
    for (const char* p : {"gate_proj", "up_proj"})
      for (auto& t : csf_expert(prefix + std::to_string(e) + "." + p, 32, 64).tensors) f.tensors.push_back(t);
  for (int e = 0; e < experts; ++e)
    for (auto& t : csf_expert(prefix + std::to_string(e) + ".down_proj", 64, 32).tensors)
      f.tensors.push_back(t);
  return f;
}

TEST(Corrupt, CsfInventory) {
  const std::string x = "m.layers.0.mlp.experts.1.up_proj";
  EXPECT_EQ(error_of(csf_layer()), "no error");
  EXPECT_EQ(error_of(csf_layer().remove(x + ".weight_scale.nvfp4_csf_exceptions")), "E_CSF_PARTNER_MISSING");
  Fake both = csf_layer();
  both.add(x + ".weight_scale", DType::F8_E4M3, {32, 4});
  EXPECT_EQ(error_of(both), "E_CSF_BOTH_FORMS");
  Fake fixed = csf_layer();
  fixed.get(x + ".weight_scale.nvfp4_csf_fixed").dtype = DType::I8;
  EXPECT_EQ(error_of(fixed), "E_CSF_FIXED_DTYPE");
  Fake exc = csf_layer();
  exc.get(x + ".weight_scale.nvfp4_csf_exceptions").dtype = DType::U8;
  EXPECT_EQ(error_of(exc), "E_CSF_EXC_DTYPE");
  Fake shape = csf_layer();
  shape.get(x + ".weight").dtype = DType::I8;
  EXPECT_EQ(error_of(shape), "E_CSF_WEIGHT_SHAPE");
  Fake globals = csf_layer();
  globals.get(x + ".weight_scale_2").shape = {2};
  globals.get(x + ".weight_scale_2").numel = 2;
  EXPECT_EQ(error_of(globals), "E_CSF_GLOBALS");
  Fake geom = csf_layer();
  geom.get(x + ".weight_scale.nvfp4_csf_fixed").numel = 7;
  geom.get(x + ".weight_scale.nvfp4_csf_fixed").shape = {7};
  EXPECT_EQ(error_of(geom), "E_CSF_GEOMETRY");
  // A projection missing from a CSF expert.
  Fake proj = csf_layer();
  for (const char* s : {".weight", ".weight_scale.nvfp4_csf_fixed", ".weight_scale.nvfp4_csf_exceptions",
                        ".weight_scale_2", ".input_scale"})
    proj.remove("m.layers.0.mlp.experts.1.down_proj" + std::string(s));
  EXPECT_EQ(error_of(proj), "E_CSF_PROJECTIONS");
  // CSF on a shared expert, on the draft layer, and a plain-scale expert in a CSF layer.
  Fake shared = csf_layer();
  for (auto& t : csf_expert("m.layers.0.mlp.shared_expert.up_proj").tensors) shared.tensors.push_back(t);
  EXPECT_EQ(error_of(shared), "E_CSF_INVENTORY");
  Fake draft = csf_layer(2, "mtp.layers.0.mlp.experts.");
  EXPECT_EQ(error_of(draft), "E_CSF_INVENTORY");
  Fake nextn = csf_layer(2, "m.layers.3.mlp.experts.");
  ClassifyOptions glm;
  glm.text_config = {{"num_hidden_layers", 3}};
  EXPECT_EQ(error_of(nextn, {}, glm), "E_CSF_INVENTORY");
  Fake plain = csf_layer();
  plain.nvfp4("m.layers.1.mlp.experts.0.up_proj", 32, 64);
  EXPECT_EQ(error_of(plain), "E_CSF_INVENTORY");
}

TEST(Corrupt, CsfGlobalValues) {
  std::map<std::string, float> values;
  ClassifyOptions opt;
  opt.read = [&](const TensorEntry& t) {
    float v = values.count(t.name) ? values[t.name] : 0.5f;
    std::vector<uint8_t> b(4);
    std::memcpy(b.data(), &v, 4);
    return b;
  };
  EXPECT_EQ(error_of(csf_layer(), {}, opt), "no error");
  values["m.layers.0.mlp.experts.1.up_proj.weight_scale_2"] = 0.25f;
  EXPECT_EQ(error_of(csf_layer(), {}, opt), "E_CSF_W13_GLOBAL_MISMATCH");
  values.clear();
  values["m.layers.0.mlp.experts.0.down_proj.input_scale"] = -1.0f;
  EXPECT_EQ(error_of(csf_layer(), {}, opt), "E_CSF_GLOBALS");
}

}  // namespace
}  // namespace bloomery
