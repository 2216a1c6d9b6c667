// The lil-nvfp4-csf container directory and serving folder (formats.md §8.1, §8.2).
#include <gtest/gtest.h>

#include "formats/tensor_source.h"
#include "source_test_writer.h"

namespace bloomery::testing {
namespace {

using nlohmann::json;

constexpr const char* kScale = "model.language_model.layers.0.mlp.experts.0.gate_proj.weight_scale";

// A two-shard Qwen container; tests mutate the JSON members before write().
struct Container {
  TempDir dir;
  json manifest, contract, config;
  StFile shard1, shard2;
  Container() {
    manifest = {
        {"schema", "lil-nvfp4-csf-checkpoint/1"},
        {"codec", "byte-window4-fixed-stream-u24-exceptions/1"},
        {"family", "qwen38_flash_next_nvfp4"},
        {"shards",
         {{{"file", "model-00001-of-00002.safetensors"}}, {{"file", "model-00002-of-00002.safetensors"}}}}};
    contract = manifest;
    contract.erase("shards");
    contract["source_names"] = {
        {"model.language_model.layers.0.mlp.experts.0.gate_proj.weight", "model-00001-of-00002.safetensors"},
        {kScale, "model-00001-of-00002.safetensors"},
        {"model.language_model.norm.weight", "model-00002-of-00002.safetensors"}};
    config = {{"model_type", "qwen4_exp"},
              {"architectures", {"Qwen4ExpForConditionalGeneration"}},
              {"text_config", {{"model_type", "qwen4_exp_text"}, {"hidden_size", 64}}}};
    shard1.add("model.language_model.layers.0.mlp.experts.0.gate_proj.weight", "U8", {32, 32})
        .add(std::string(kScale) + ".nvfp4_csf_fixed", "U8", {2, 80})
        .add(std::string(kScale) + ".nvfp4_csf_exceptions", "U32", {3});
    shard2.add("model.language_model.norm.weight", "BF16", {64});
  }
  void write() {
    write_json(dir / "manifest.json", manifest);
    write_json(dir / "build-contract.json", contract);
    write_json(dir / "metadata/config.json", config);
    write_file(dir / "tensors/model-00001-of-00002.safetensors", shard1.bytes());
    write_file(dir / "tensors/model-00002-of-00002.safetensors", shard2.bytes());
  }
  void expect(const std::string& id, const std::vector<std::string>& parts) {
    write();
    Warnings w;
    expect_error([&] { TensorSource::open(dir.path(), w); }, id, parts);
  }
};

// A serving folder pointing at a container.
json serving_config(const std::string& root, json version = 1) {
  return {{"model_type", "qwen4_exp"},
          {"architectures", {"Qwen4ExpForConditionalGeneration"}},
          {"text_config",
           {{"model_type", "qwen4_exp_text"},
            {"quantization_config",
             {{"quant_method", "nvfp4_csf"},
              {"format_version", version},
              {"checkpoint_root", root},
              {"source_quantization_config", {{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}}}}}}}};
}

TEST(SourceCsf, ContainerGood) {
  Container c;
  c.write();
  write_json(c.dir / "metadata/hf_quant_config.json", {{"quantization", {{"quant_algo", "NVFP4"}}}});
  write_json(c.dir / "verification.json", json::object());
  Warnings w;
  TensorSource src = TensorSource::open(c.dir.path(), w);
  EXPECT_EQ(src.kind(), FolderKind::CsfContainer);
  EXPECT_TRUE(w.empty()) << (w.empty() ? "" : w.summary()[0]);
  EXPECT_EQ(src.config_dir(), c.dir / "metadata");
  EXPECT_EQ(src.config()["model_type"], "qwen4_exp");
  EXPECT_EQ(src.hf_quant_config()["quantization"]["quant_algo"], "NVFP4");
  EXPECT_EQ(src.csf_manifest()["family"], "qwen38_flash_next_nvfp4");
  EXPECT_TRUE(src.csf_contract().contains("source_names"));
  EXPECT_EQ(src.csf_root(), c.dir.path());
  ASSERT_EQ(src.tensors().size(), 4u);
  const TensorEntry* exc = src.find(std::string(kScale) + ".nvfp4_csf_exceptions");
  ASSERT_NE(exc, nullptr);
  EXPECT_EQ(exc->dtype, DType::U32);
  EXPECT_EQ(src.display_path(exc->file_index), "tensors/model-00001-of-00002.safetensors");
  auto bytes = src.read_all(*exc);
  ASSERT_EQ(bytes.size(), 12u);
  EXPECT_EQ(bytes[0], StFile::pattern(1024 + 160));
}

TEST(SourceCsf, ServingFolderGood) {
  Container c;
  c.write();
  TempDir serving;
  write_json(serving / "config.json", serving_config(c.dir.path().string()));
  Warnings w;
  TensorSource src = TensorSource::open(serving.path(), w);
  EXPECT_EQ(src.kind(), FolderKind::CsfServing);
  EXPECT_EQ(src.config_dir(), serving.path());
  EXPECT_EQ(src.config()["text_config"]["quantization_config"]["quant_method"], "nvfp4_csf");
  EXPECT_EQ(src.csf_root(), c.dir.path());
  EXPECT_EQ(src.tensors().size(), 4u);
  const TensorEntry* norm = src.find("model.language_model.norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_NE(src.display_path(norm->file_index).find("tensors/model-00002-of-00002.safetensors"),
            std::string::npos);
}

TEST(SourceCsf, PredecessorSchemaRefused) {
  Container c;
  c.manifest["schema"] = "lil-nvfp4-lsc-checkpoint/1";
  c.expect("E_CSF_SCHEMA", {"manifest.json", "field 'schema'", "lil-nvfp4-lsc-checkpoint/1"});
}

TEST(SourceCsf, ManifestNotJson) {
  Container c;
  c.write();
  write_file(c.dir / "manifest.json", "{\"schema\":");
  Warnings w;
  expect_error([&] { TensorSource::open(c.dir.path(), w); }, "E_CSF_SCHEMA", {"manifest.json", "valid JSON"});
}

TEST(SourceCsf, UnknownCodec) {
  Container c;
  c.manifest["codec"] = "x4t/1";
  c.expect("E_CSF_CODEC", {"manifest.json", "field 'codec'", "x4t/1"});
}

TEST(SourceCsf, UnknownFamily) {
  Container c;
  c.manifest["family"] = "llama_nvfp4";
  c.expect("E_CSF_FAMILY", {"manifest.json", "field 'family'", "llama_nvfp4"});
}

TEST(SourceCsf, FamilyDisagreesWithConfig) {
  Container c;
  c.manifest["family"] = "glm53_nvfp4";
  c.contract["family"] = "glm53_nvfp4";
  c.expect("E_CSF_FAMILY", {"metadata/config.json", "field 'model_type'", "glm5_next", "'qwen4_exp'"});
}

TEST(SourceCsf, ContractDisagreesWithManifest) {
  Container c;
  c.contract["codec"] = "byte-window4-fixed-stream-u24-exceptions/2";
  c.expect("E_CSF_MANIFEST_MISMATCH", {"build-contract.json", "field 'codec'", "exceptions/2"});
}

TEST(SourceCsf, ManifestShardNameNotBare) {
  Container c;
  c.manifest["shards"][1]["file"] = "../model-00002-of-00002.safetensors";
  c.expect("E_CSF_SHARD_NAME", {"manifest.json", "field 'shards[1].file'", "../model-00002"});
}

TEST(SourceCsf, SourceNamesShardNameNotBare) {
  Container c;
  c.contract["source_names"]["model.language_model.norm.weight"] = "tensors/model-00002-of-00002.safetensors";
  c.expect("E_CSF_SHARD_NAME", {"build-contract.json", "model.language_model.norm.weight", "source_names"});
}

TEST(SourceCsf, ManifestShardNotInSourceNames) {
  Container c;
  c.manifest["shards"].push_back({{"file", "model-extra.safetensors"}});
  c.expect("E_CSF_SHARD_SET", {"manifest.json", "model-extra.safetensors"});
}

TEST(SourceCsf, SourceNamesShardNotInManifest) {
  Container c;
  c.contract["source_names"]["lm_head.weight"] = "model-00003-of-00002.safetensors";
  c.expect("E_CSF_SHARD_SET", {"build-contract.json", "model-00003-of-00002.safetensors"});
}

TEST(SourceCsf, ShardMissing) {
  Container c;
  c.write();
  std::filesystem::remove(c.dir / "tensors/model-00002-of-00002.safetensors");
  Warnings w;
  expect_error([&] { TensorSource::open(c.dir.path(), w); }, "E_CSF_SHARD_MISSING",
               {"tensors/model-00002-of-00002.safetensors"});
}

TEST(SourceCsf, ContainerWithoutMetadataConfig) {
  Container c;
  c.write();
  std::filesystem::remove(c.dir / "metadata/config.json");
  Warnings w;
  expect_error([&] { TensorSource::open(c.dir.path(), w); }, "E_FOLDER_NO_CONFIG", {"metadata/config.json"});
}

TEST(SourceCsf, ContractTensorAbsentFromShard) {
  Container c;
  c.contract["source_names"]["model.language_model.layers.0.mlp.experts.0.up_proj.weight_scale"] =
      "model-00001-of-00002.safetensors";
  c.expect("E_IDX_TENSOR_ABSENT",
           {"tensors/model-00001-of-00002.safetensors",
            "model.language_model.layers.0.mlp.experts.0.up_proj.weight_scale", "build-contract.json"});
}

TEST(SourceCsf, UnlistedTensorWarns) {
  Container c;
  c.shard2.add("lm_head.weight", "BF16", {4, 4});
  c.write();
  Warnings w;
  TensorSource src = TensorSource::open(c.dir.path(), w);
  EXPECT_EQ(w.count("W_IDX_EXTRA_TENSOR"), 1u);
  EXPECT_NE(src.find("lm_head.weight"), nullptr);
}

TEST(SourceCsf, ServingRootRelative) {
  TempDir serving;
  write_json(serving / "config.json", serving_config("relative/container"));
  Warnings w;
  expect_error([&] { TensorSource::open(serving.path(), w); }, "E_CSF_ROOT",
               {"config.json", "text_config.quantization_config.checkpoint_root", "relative/container"});
}

TEST(SourceCsf, ServingRootNotAContainer) {
  TempDir serving, empty;
  write_json(serving / "config.json", serving_config(empty.path().string()));
  Warnings w;
  expect_error([&] { TensorSource::open(serving.path(), w); }, "E_CSF_ROOT",
               {"config.json", "checkpoint_root", empty.path().string()});
}

TEST(SourceCsf, ServingRootMissing) {
  TempDir serving;
  json cfg = serving_config("/x");
  cfg["text_config"]["quantization_config"].erase("checkpoint_root");
  write_json(serving / "config.json", cfg);
  Warnings w;
  expect_error([&] { TensorSource::open(serving.path(), w); }, "E_CSF_ROOT", {"config.json", "no such key"});
}

TEST(SourceCsf, ServingFormatVersion) {
  Container c;
  c.write();
  TempDir serving;
  write_json(serving / "config.json", serving_config(c.dir.path().string(), 2));
  Warnings w;
  expect_error([&] { TensorSource::open(serving.path(), w); }, "E_CSF_FORMAT_VERSION",
               {"config.json", "format_version", "found 2"});
}

// source_names may list the stored stream names instead of the source scale name.
TEST(SourceCsf, SourceNamesListingStoredStreams) {
  Container c;
  c.contract["source_names"].erase(kScale);
  c.contract["source_names"][std::string(kScale) + ".nvfp4_csf_fixed"] = "model-00001-of-00002.safetensors";
  c.contract["source_names"][std::string(kScale) + ".nvfp4_csf_exceptions"] =
      "model-00001-of-00002.safetensors";
  c.write();
  Warnings w;
  TensorSource src = TensorSource::open(c.dir.path(), w);
  EXPECT_TRUE(w.empty()) << (w.empty() ? "" : w.summary()[0]);
  EXPECT_EQ(src.tensors().size(), 4u);
}

TEST(SourceCsf, ContainerShardStructuralError) {
  Container c;
  c.shard1.entries[2].nbytes = 11;
  c.expect("E_ST_SIZE_MISMATCH",
           {"tensors/model-00001-of-00002.safetensors", std::string(kScale) + ".nvfp4_csf_exceptions",
            "expected 12 bytes (U32 [3])"});
}

}  // namespace
}  // namespace bloomery::testing
