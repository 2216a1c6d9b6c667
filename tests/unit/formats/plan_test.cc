// Quantisation-plan resolution from config JSON (formats.md §4.1–§4.7).
#include <gtest/gtest.h>

#include "formats/quant_plan.h"

namespace bloomery {
namespace {

using json = nlohmann::json;

std::string error_id(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.id();
  }
  return "no error";
}

QuantPlan plan_of(const json& config, const json& hf = nullptr, bool csf = false) {
  Warnings w;
  return resolve_quant_plan(config, hf, csf, w);
}

FormatId predicted(const QuantPlan& p, const std::string& module, bool linear = true) {
  Warnings w;
  Prediction pr = p.predict(module, linear, w);
  return pr.scheme.quantized ? pr.scheme.format : FormatId::BF16;
}

TEST(GlobMatch, ShellSemantics) {
  EXPECT_TRUE(glob_match("model.visual*", "model.visual.blocks.0.attn"));
  EXPECT_TRUE(glob_match("*mlp.gate", "model.layers.3.mlp.gate"));
  EXPECT_FALSE(glob_match("*mlp.gate", "model.layers.3.mlp.gate_proj"));
  EXPECT_TRUE(glob_match("layers.?.x", "layers.7.x"));
  EXPECT_FALSE(glob_match("layers.?.x", "layers.17.x"));
  EXPECT_TRUE(glob_match("layers.[0-2].x", "layers.1.x"));
  EXPECT_FALSE(glob_match("layers.[!0-2].x", "layers.1.x"));
  EXPECT_TRUE(glob_match("a*b*c", "a.x.b.y.c"));
  EXPECT_FALSE(glob_match("a*b*c", "a.x.b.y.d"));
}

TEST(Plan, NoQuantisationIsAllDense) {
  QuantPlan p = plan_of(json{{"model_type", "qwen3_next"}});
  EXPECT_EQ(p.source, PlanSource::None);
  EXPECT_EQ(predicted(p, "model.layers.0.mlp.experts.0.up_proj"), FormatId::BF16);
}

TEST(Plan, HfQuantConfigSingleFormatWithGlobs) {
  json hf = {{"producer", {{"name", "modelopt"}, {"version", "0.40"}}},
             {"quantization",
              {{"quant_algo", "NVFP4"},
               {"kv_cache_quant_algo", "FP8"},
               {"group_size", 16},
               {"exclude_modules", {"lm_head", "model.visual*", "model.layers.0.mlp.*"}}}}};
  QuantPlan p = plan_of(json::object(), hf);
  EXPECT_EQ(p.source, PlanSource::HfQuantConfig);
  EXPECT_EQ(p.producer_name, "modelopt");
  EXPECT_EQ(p.producer_version, "0.40");
  EXPECT_EQ(p.kv_cache_scheme, "FP8");
  EXPECT_EQ(predicted(p, "model.layers.1.self_attn.q_proj"), FormatId::NVFP4);
  EXPECT_EQ(predicted(p, "lm_head"), FormatId::BF16);
  EXPECT_EQ(predicted(p, "model.visual"), FormatId::BF16);  // prefix* tried as the bare prefix
  EXPECT_EQ(predicted(p, "model.visual.blocks.0.qkv"), FormatId::BF16);
  EXPECT_EQ(predicted(p, "model.layers.0.mlp"), FormatId::BF16);  // prefix.* covers the bare module too
  EXPECT_EQ(predicted(p, "model.layers.0.mlp.down_proj"), FormatId::BF16);
  EXPECT_EQ(predicted(p, "model.layers.10.mlp.down_proj"), FormatId::NVFP4);
  EXPECT_EQ(predicted(p, "model.layers.1.input_layernorm", false), FormatId::BF16);  // not a linear module
}

TEST(Plan, HfQuantConfigMissingKeysWarn) {
  Warnings w;
  resolve_quant_plan(json::object(), json{{"quantization", {{"quant_algo", "NVFP4"}}}}, false, w);
  EXPECT_EQ(w.count("W_CFG_MISSING_KEY"), 3u);
}

TEST(Plan, ConfigModelOptLowerCaseAlgoAndIgnore) {
  json cfg = {
      {"quantization_config",
       {{"quant_method", "modelopt"}, {"quant_algo", "mxfp8"}, {"ignore", {"lm_head", "*mlp.gate"}}}}};
  QuantPlan p = plan_of(cfg);
  EXPECT_EQ(p.source, PlanSource::ConfigModelOpt);
  EXPECT_EQ(p.quant_algo, "MXFP8");
  EXPECT_EQ(predicted(p, "model.layers.1.self_attn.o_proj"), FormatId::MXFP8);
  EXPECT_EQ(predicted(p, "model.layers.1.mlp.gate"), FormatId::BF16);
  EXPECT_EQ(predicted(p, "model.layers.1.mlp.gate_proj"), FormatId::MXFP8);
}

TEST(Plan, QuantizationConfigInTextConfigAndMirror) {
  json qc = {{"quant_method", "modelopt"}, {"quant_algo", "FP8"}};
  QuantPlan p = plan_of(json{{"text_config", {{"quantization_config", qc}}}});
  EXPECT_EQ(predicted(p, "model.language_model.layers.0.self_attn.q_proj"), FormatId::FP8_TENSOR);

  json other = qc;
  other["quant_algo"] = "NVFP4";
  Warnings w;
  QuantPlan p2 =
      resolve_quant_plan(json{{"quantization_config", other}, {"text_config", {{"quantization_config", qc}}}},
                         nullptr, false, w);
  EXPECT_EQ(w.count("W_CFG_QC_MIRROR_DIFFERS"), 1u);
  EXPECT_EQ(predicted(p2, "x.q_proj"), FormatId::NVFP4);  // top level wins

  Warnings w2;
  resolve_quant_plan(json{{"quantization_config", qc}, {"text_config", {{"quantization_config", qc}}}},
                     nullptr, false, w2);
  EXPECT_EQ(w2.count("W_CFG_QC_MIRROR_DIFFERS"), 0u);
}

json qwen38_mixed() {
  return {{"quant_method", "modelopt"},
          {"quant_algo", "MIXED_PRECISION"},
          {"kv_cache_scheme", {{"num_bits", 8}, {"type", "float"}, {"dynamic", false}}},
          {"quantized_layers",
           {{"model.language_model.layers.0.mlp.experts", {{"quant_algo", "NVFP4"}, {"group_size", 16}}},
            {"mtp.layers.0.mlp.experts", {{"quant_algo", "FP8_BLOCK_SCALES"}, {"group_size", 128}}},
            {"model.language_model.layers.1.ple.ple_embedding.ngram_embedding", {{"quant_algo", "FP8"}}}}}};
}

TEST(Plan, MixedPrecisionContainerKeys) {
  QuantPlan p = plan_of(json{{"quantization_config", qwen38_mixed()}});
  EXPECT_TRUE(p.longest_match);
  EXPECT_EQ(p.kv_cache_scheme, "FP8");
  EXPECT_EQ(predicted(p, "model.language_model.layers.0.mlp.experts.17.down_proj"), FormatId::NVFP4);
  EXPECT_EQ(predicted(p, "model.language_model.layers.0.mlp.experts"), FormatId::NVFP4);
  // A key covers modules below it only at a '.' boundary.
  EXPECT_EQ(predicted(p, "model.language_model.layers.0.mlp.experts_extra"), FormatId::BF16);
  Warnings w;
  Prediction mtp = p.predict("mtp.layers.0.mlp.experts.3.gate_proj", true, w);
  EXPECT_EQ(mtp.scheme.format, FormatId::FP8_BLOCK);
  EXPECT_EQ(mtp.scheme.block_n, 128);
  EXPECT_EQ(mtp.scheme.block_k, 128);
  EXPECT_EQ(predicted(p, "model.language_model.layers.1.ple.ple_embedding.ngram_embedding", false),
            FormatId::FP8_TENSOR);
  // A module absent from quantized_layers is unquantised even when it is a linear.
  EXPECT_EQ(predicted(p, "model.language_model.layers.0.self_attn.q_proj"), FormatId::BF16);
}

TEST(Plan, MixedPrecisionLongestKeyWins) {
  json qc = {{"quant_algo", "MIXED_PRECISION"},
             {"quantized_layers",
              {{"model.layers.2.mlp", {{"quant_algo", "FP8"}}},
               {"model.layers.2.mlp.experts", {{"quant_algo", "NVFP4"}}}}}};
  QuantPlan p = plan_of(json::object(), json{{"quantization", qc}});
  EXPECT_EQ(predicted(p, "model.layers.2.mlp.experts.0.up_proj"), FormatId::NVFP4);
  EXPECT_EQ(predicted(p, "model.layers.2.mlp.shared_expert.up_proj"), FormatId::FP8_TENSOR);
}

TEST(Plan, MixedPrecisionAmbiguousAfterFusedExpansion) {
  json qc = {{"quant_algo", "MIXED_PRECISION"},
             {"quantized_layers",
              {{"model.layers.0.self_attn.qkv_proj", {{"quant_algo", "FP8"}}},
               {"model.layers.0.self_attn.q_proj", {{"quant_algo", "NVFP4"}}}}}};
  EXPECT_EQ(error_id([&] { plan_of(json::object(), json{{"quantization", qc}}); }), "E_CFG_MIXED_AMBIGUOUS");
  // Equal schemes are not ambiguous; the fused key reaches its shards.
  qc["quantized_layers"]["model.layers.0.self_attn.q_proj"]["quant_algo"] = "FP8";
  QuantPlan p = plan_of(json::object(), json{{"quantization", qc}});
  EXPECT_EQ(predicted(p, "model.layers.0.self_attn.v_proj"), FormatId::FP8_TENSOR);
}

TEST(Plan, MixedPrecisionNameNormalisation) {
  json qc = {{"quant_algo", "MIXED_PRECISION"},
             {"quantized_layers", {{"model.layers.4.mlp.experts", {{"quant_algo", "NVFP4"}}}}}};
  QuantPlan p = plan_of(json::object(), json{{"quantization", qc}});
  Warnings w;
  Prediction pr = p.predict("model.language_model.layers.4.mlp.experts.0.up_proj", true, w);
  EXPECT_EQ(pr.scheme.format, FormatId::NVFP4);
  EXPECT_EQ(w.count("W_CFG_NAME_NORMALISED"), 1u);
  Warnings w2;
  EXPECT_TRUE(p.predict("language_model.model.layers.4.mlp.experts.0.up_proj", true, w2).scheme.quantized);
  EXPECT_EQ(w2.count("W_CFG_NAME_NORMALISED"), 1u);
  json qc2 = {
      {"quant_algo", "MIXED_PRECISION"},
      {"quantized_layers", {{"model.language_model.layers.4.mlp.experts", {{"quant_algo", "NVFP4"}}}}}};
  QuantPlan p2 = plan_of(json::object(), json{{"quantization", qc2}});
  EXPECT_EQ(predicted(p2, "model.layers.4.mlp.experts.9.down_proj"), FormatId::NVFP4);
  EXPECT_EQ(predicted(p2, "language_model.model.layers.4.mlp.experts.9.down_proj"), FormatId::BF16);
}

TEST(Plan, MixedPrecisionErrors) {
  EXPECT_EQ(error_id([] {
              plan_of(json::object(), json{{"quantization", {{"quant_algo", "MIXED_PRECISION"}}}});
            }),
            "E_CFG_MIXED_NO_LAYERS");
  json qc = {{"quant_algo", "MIXED_PRECISION"},
             {"exclude_modules", {"*mlp.experts*"}},
             {"quantized_layers", {{"model.layers.4.mlp.experts", {{"quant_algo", "NVFP4"}}}}}};
  EXPECT_EQ(error_id([&] { plan_of(json::object(), json{{"quantization", qc}}); }), "E_CFG_MIXED_CONFLICT");
  json bad = {{"quant_algo", "MIXED_PRECISION"}, {"quantized_layers", {{"a.b", {{"quant_algo", "INT3"}}}}}};
  EXPECT_EQ(error_id([&] {
              plan_of(json::object(), json{{"quantization", bad}});
            }),
            "E_CFG_QUANT_ALGO_UNKNOWN");
}

TEST(Plan, MethodAndAlgoErrors) {
  auto with_qc = [](json qc) { return [qc] { plan_of(json{{"quantization_config", qc}}); }; };
  EXPECT_EQ(error_id(with_qc({{"quant_method", "gptq"}})), "E_CFG_QUANT_METHOD_UNKNOWN");
  EXPECT_EQ(error_id(with_qc({{"quant_method", 7}})), "E_CFG_QUANT_METHOD_UNKNOWN");
  EXPECT_EQ(error_id(with_qc({{"bits", 4}})), "E_CFG_QUANT_METHOD_UNKNOWN");
  EXPECT_EQ(error_id(with_qc({{"quant_method", "modelopt"}, {"quant_algo", "NVFP7"}})),
            "E_CFG_QUANT_ALGO_UNKNOWN");
  for (const char* algo : {"NVFP4_AWQ", "NVFP4_SVD", "W4A8_AWQ", "W4A16_AWQ", "W8A16", "W4A8_NVFP4_FP8",
                           "W4A8_MXFP4_FP8", "W8A8_SQ_PER_CHANNEL"})
    EXPECT_EQ(error_id(with_qc({{"quant_method", "modelopt"}, {"quant_algo", algo}})),
              "E_CFG_ALGO_UNSUPPORTED")
        << algo;
  EXPECT_EQ(error_id(with_qc({{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}, {"group_size", 32}})),
            "E_CFG_ALGO_UNSUPPORTED");
  Warnings w;
  QuantPlan p = resolve_quant_plan(
      json{{"quantization_config", {{"quant_algo", "FP8_PER_CHANNEL_PER_TOKEN"}}}}, nullptr, false, w);
  EXPECT_EQ(w.count("W_CFG_NO_QUANT_METHOD"), 1u);
  EXPECT_EQ(predicted(p, "a.q_proj"), FormatId::FP8_CHANNEL);
}

TEST(Plan, SourcesDisagreeIsAWarningAndHfWins) {
  json hf = {{"quantization",
              {{"quant_algo", "NVFP4"},
               {"group_size", 16},
               {"kv_cache_quant_algo", nullptr},
               {"exclude_modules", {"lm_head"}}}}};
  json cfg = {{"quantization_config",
               {{"quant_method", "modelopt"}, {"quant_algo", "FP8"}, {"ignore", {"lm_head", "x"}}}}};
  Warnings w;
  QuantPlan p = resolve_quant_plan(cfg, hf, false, w);
  EXPECT_EQ(p.source, PlanSource::HfQuantConfig);
  EXPECT_EQ(predicted(p, "a.q_proj"), FormatId::NVFP4);
  EXPECT_EQ(w.count("W_CFG_SOURCES_DISAGREE"), 3u);  // algo, default scheme, exclusion "x"
}

TEST(Plan, CompressedTensorsTargetsIgnoreAndRegex) {
  json qc = {{"quant_method", "compressed-tensors"},
             {"format", "nvfp4-pack-quantized"},
             {"config_groups",
              {{"group_0",
                {{"targets", {"Linear"}},
                 {"weights",
                  {{"num_bits", 4}, {"type", "float"}, {"strategy", "tensor_group"}, {"group_size", 16}}}}}}},
             {"ignore", {"lm_head", "re:.*mlp\\.gate$", "re:mlp\\.shared"}}};
  QuantPlan p = plan_of(json{{"quantization_config", qc}});
  EXPECT_EQ(p.source, PlanSource::CompressedTensors);
  EXPECT_EQ(predicted(p, "model.layers.0.mlp.experts.0.up_proj"), FormatId::NVFP4_CT);
  EXPECT_EQ(predicted(p, "model.layers.0.mlp.gate"), FormatId::BF16);
  EXPECT_EQ(predicted(p, "lm_head"), FormatId::BF16);
  // re: is anchored at the start only: "mlp\.shared" does not match in the middle of a name...
  EXPECT_EQ(predicted(p, "model.layers.0.mlp.shared_expert.up_proj"), FormatId::NVFP4_CT);
  // ...but matches a name that starts with it, whatever follows.
  EXPECT_EQ(predicted(p, "mlp.shared_expert.up_proj"), FormatId::BF16);
  // The class-name target "Linear" covers only linear modules.
  EXPECT_EQ(predicted(p, "model.layers.0.input_layernorm", false), FormatId::BF16);
}

TEST(Plan, CompressedTensorsSchemes) {
  auto scheme = [](json weights, json targets = json::array({"re:.*"})) {
    json qc = {{"quant_method", "compressed-tensors"},
               {"config_groups", {{"g", {{"targets", targets}, {"weights", weights}}}}}};
    return plan_of(json{{"quantization_config", qc}});
  };
  EXPECT_EQ(predicted(scheme({{"num_bits", 4}, {"type", "float"}, {"strategy", "group"}, {"group_size", 32}}),
                      "a.b"),
            FormatId::MXFP4);
  EXPECT_EQ(predicted(scheme({{"num_bits", 8}, {"type", "float"}, {"strategy", "group"}, {"group_size", 32}}),
                      "a.b"),
            FormatId::MXFP8);
  EXPECT_EQ(predicted(scheme({{"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"}}), "a.b"),
            FormatId::FP8_TENSOR);
  EXPECT_EQ(predicted(scheme({{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"}}), "a.b"),
            FormatId::FP8_CHANNEL);
  QuantPlan block =
      scheme({{"num_bits", 8}, {"type", "float"}, {"strategy", "block"}, {"block_structure", {64, 32}}});
  Warnings w;
  Prediction pr = block.predict("x.y", true, w);
  EXPECT_EQ(pr.scheme.format, FormatId::FP8_BLOCK);
  EXPECT_EQ(pr.scheme.block_n, 64);
  EXPECT_EQ(pr.scheme.block_k, 32);
  // Exact targets match only that module.
  QuantPlan exact =
      scheme({{"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"}}, json::array({"a.q_proj"}));
  EXPECT_EQ(predicted(exact, "a.q_proj"), FormatId::FP8_TENSOR);
  EXPECT_EQ(predicted(exact, "a.q_proj.x"), FormatId::BF16);
  EXPECT_EQ(error_id([&] {
              scheme({{"num_bits", 4}, {"type", "int"}, {"strategy", "group"}, {"group_size", 128}});
            }),
            "E_CFG_ALGO_UNSUPPORTED");
  EXPECT_EQ(error_id([&] {
              scheme({{"num_bits", 6}, {"type", "float"}, {"strategy", "tensor"}});
            }),
            "E_CFG_ALGO_UNSUPPORTED");
  EXPECT_EQ(
      error_id([&] {
        scheme({{"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"}}, json::array({"re:(unclosed"}));
      }),
      "E_CFG_PATTERN_INVALID");
}

TEST(Plan, BlockFp8DeepSeekStyle) {
  json qc = {{"quant_method", "fp8"},          {"fmt", "e4m3"},
             {"activation_scheme", "dynamic"}, {"weight_block_size", {128, 128}},
             {"scale_fmt", "ue8m0"},           {"modules_to_not_convert", {"lm_head", "mlp.gate"}}};
  QuantPlan p = plan_of(json{{"quantization_config", qc}});
  Warnings w;
  Prediction pr = p.predict("model.layers.0.self_attn.q_a_proj", true, w);
  EXPECT_EQ(pr.scheme.format, FormatId::FP8_BLOCK);
  EXPECT_TRUE(pr.scheme.e8m0_scales);
  EXPECT_EQ(pr.scheme.block_n, 128);
  EXPECT_EQ(predicted(p, "model.layers.0.mlp.gate"), FormatId::BF16);
  EXPECT_EQ(predicted(p, "lm_head"), FormatId::BF16);
  qc["fmt"] = "e5m2";
  EXPECT_EQ(error_id([&] { plan_of(json{{"quantization_config", qc}}); }), "E_CFG_ALGO_UNSUPPORTED");
}

TEST(Plan, Mxfp4MoeAndCsfServing) {
  QuantPlan g = plan_of(
      json{{"quantization_config", {{"quant_method", "mxfp4"}, {"modules_to_not_convert", {"self_attn"}}}}});
  EXPECT_EQ(predicted(g, "model.layers.0.mlp.experts"), FormatId::MXFP4);
  EXPECT_EQ(predicted(g, "model.layers.0.self_attn.q_proj"), FormatId::BF16);

  json serving = {{"text_config",
                   {{"quantization_config",
                     {{"quant_method", "nvfp4_csf"},
                      {"format_version", 1},
                      {"checkpoint_root", "/x"},
                      {"source_quantization_config", qwen38_mixed()}}}}}};
  QuantPlan c = plan_of(serving);
  EXPECT_EQ(c.source, PlanSource::Csf);
  EXPECT_EQ(c.expert_scale_encoding, ScaleEncoding::NvFp4Csf);
  EXPECT_EQ(predicted(c, "model.language_model.layers.0.mlp.experts.1.up_proj"), FormatId::NVFP4);
  // A container folder: the original ModelOpt block of metadata/config.json, plus the CSF encoding.
  QuantPlan k = plan_of(
      json{{"quantization_config", {{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}}}}, nullptr, true);
  EXPECT_EQ(k.expert_scale_encoding, ScaleEncoding::NvFp4Csf);
  EXPECT_EQ(predicted(k, "a.up_proj"), FormatId::NVFP4);
}

}  // namespace
}  // namespace bloomery
