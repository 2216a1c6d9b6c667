// Folder classification (formats.md §1) and the shard index (§3).
#include <gtest/gtest.h>

#include "formats/tensor_source.h"
#include "source_test_writer.h"

namespace bloomery::testing {
namespace {

using nlohmann::json;

// A sharded folder: two shards and an index mapping each tensor to its shard.
struct ShardedFolder {
  TempDir dir;
  StFile shard1, shard2;
  json index;
  ShardedFolder() {
    shard1.add("model.embed_tokens.weight", "BF16", {4, 8})
        .add("model.layers.0.mlp.gate.weight", "BF16", {32, 64});
    shard2.add("lm_head.weight", "BF16", {4, 8}).add("model.norm.weight", "F32", {8});
    index = {{"metadata", {{"total_size", 64 + 4096 + 64 + 32}}},
             {"weight_map",
              {{"model.embed_tokens.weight", "model-00001-of-00002.safetensors"},
               {"model.layers.0.mlp.gate.weight", "model-00001-of-00002.safetensors"},
               {"lm_head.weight", "model-00002-of-00002.safetensors"},
               {"model.norm.weight", "model-00002-of-00002.safetensors"}}}};
  }
  void write() {
    write_json(dir / "config.json", plain_config());
    write_file(dir / "model-00001-of-00002.safetensors", shard1.bytes());
    write_file(dir / "model-00002-of-00002.safetensors", shard2.bytes());
    write_json(dir / "model.safetensors.index.json", index);
  }
  void expect(const std::string& id, const std::vector<std::string>& parts) {
    write();
    Warnings w;
    expect_error([&] { TensorSource::open(dir.path(), w); }, id, parts);
  }
};

TEST(SourceFolder, ShardedGood) {
  ShardedFolder f;
  f.write();
  write_file(f.dir / "README.md", "# model");
  Warnings w;
  TensorSource src = TensorSource::open(f.dir.path(), w);
  EXPECT_EQ(src.kind(), FolderKind::Sharded);
  EXPECT_TRUE(w.empty()) << (w.empty() ? "" : w.summary()[0]);
  ASSERT_EQ(src.tensors().size(), 4u);
  EXPECT_EQ(src.tensors()[0].name, "lm_head.weight");  // sorted by name
  EXPECT_EQ(src.file_count(), 2u);
  const TensorEntry* norm = src.find("model.norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(src.display_path(norm->file_index), "model-00002-of-00002.safetensors");
  auto bytes = src.read_all(*norm);
  EXPECT_EQ(bytes[0], StFile::pattern(64));
  EXPECT_EQ(src.config_dir(), f.dir.path());
}

TEST(SourceFolder, HfQuantConfigLoaded) {
  ShardedFolder f;
  f.write();
  write_json(f.dir / "hf_quant_config.json", {{"quantization", {{"quant_algo", "NVFP4"}}}});
  Warnings w;
  TensorSource src = TensorSource::open(f.dir.path(), w);
  EXPECT_EQ(src.hf_quant_config()["quantization"]["quant_algo"], "NVFP4");
}

TEST(SourceFolder, ShardStructuralErrorNamesShard) {
  ShardedFolder f;
  f.shard2.entries[1].nbytes = 30;
  f.expect("E_ST_SIZE_MISMATCH",
           {"model-00002-of-00002.safetensors", "model.norm.weight", "expected 32 bytes"});
}

TEST(SourceFolder, IndexNotJson) {
  ShardedFolder f;
  f.write();
  write_file(f.dir / "model.safetensors.index.json", "{\"weight_map\": {");
  Warnings w;
  expect_error([&] { TensorSource::open(f.dir.path(), w); }, "E_IDX_NOT_JSON",
               {"model.safetensors.index.json"});
}

TEST(SourceFolder, IndexWithoutWeightMap) {
  ShardedFolder f;
  f.index.erase("weight_map");
  f.expect("E_IDX_NOT_JSON", {"model.safetensors.index.json", "field 'weight_map'", "no such key"});
}

TEST(SourceFolder, IndexShardNameDotDot) {
  ShardedFolder f;
  f.index["weight_map"]["model.norm.weight"] = "../evil.safetensors";
  f.expect("E_IDX_SHARD_NAME",
           {"model.safetensors.index.json", "model.norm.weight", "'../evil.safetensors'"});
}

TEST(SourceFolder, IndexShardNameAbsolute) {
  ShardedFolder f;
  f.index["weight_map"]["lm_head.weight"] = "/etc/passwd.safetensors";
  f.expect("E_IDX_SHARD_NAME", {"model.safetensors.index.json", "lm_head.weight"});
}

TEST(SourceFolder, IndexShardNameNotSafetensors) {
  ShardedFolder f;
  f.index["weight_map"]["lm_head.weight"] = "pytorch_model.bin";
  f.expect("E_IDX_SHARD_NAME", {"model.safetensors.index.json", "lm_head.weight", "pytorch_model.bin"});
}

TEST(SourceFolder, IndexNamesMissingShard) {
  ShardedFolder f;
  f.index["weight_map"]["lm_head.weight"] = "model-00003-of-00002.safetensors";
  f.expect("E_IDX_SHARD_MISSING", {"model-00003-of-00002.safetensors", "lm_head.weight"});
}

TEST(SourceFolder, TensorAbsentFromMappedShard) {
  ShardedFolder f;
  f.index["weight_map"]["model.layers.1.mlp.gate.weight"] = "model-00002-of-00002.safetensors";
  f.expect("E_IDX_TENSOR_ABSENT", {"model-00002-of-00002.safetensors", "model.layers.1.mlp.gate.weight"});
}

TEST(SourceFolder, TensorMappedToWrongShard) {
  ShardedFolder f;
  f.index["weight_map"]["lm_head.weight"] = "model-00001-of-00002.safetensors";
  f.expect("E_IDX_TENSOR_ABSENT", {"model-00001-of-00002.safetensors", "lm_head.weight",
                                   "only in model-00002-of-00002.safetensors"});
}

TEST(SourceFolder, DuplicateTensorAcrossShards) {
  ShardedFolder f;
  f.shard2.add("model.embed_tokens.weight", "BF16", {4, 8});
  f.expect("E_IDX_DUPLICATE_TENSOR", {"model-00002-of-00002.safetensors", "model.embed_tokens.weight",
                                      "model-00001-of-00002.safetensors"});
}

TEST(SourceFolder, DuplicateTensorInWeightMap) {
  ShardedFolder f;
  f.write();
  std::string text = f.index.dump();
  const std::string key = "\"lm_head.weight\":\"model-00002-of-00002.safetensors\"";
  text.replace(text.find(key), key.size(), key + "," + key);
  write_file(f.dir / "model.safetensors.index.json", text);
  Warnings w;
  expect_error([&] { TensorSource::open(f.dir.path(), w); }, "E_IDX_DUPLICATE_TENSOR",
               {"model.safetensors.index.json", "lm_head.weight"});
}

TEST(SourceFolder, IndexWarnings) {
  ShardedFolder f;
  f.shard2.add("extra.bias", "F32", {2});
  f.index["metadata"]["total_size"] = 999999;
  f.write();
  write_file(f.dir / "amax.safetensors", StFile().add("x.amax", "F32", {}).bytes());
  Warnings w;
  TensorSource src = TensorSource::open(f.dir.path(), w);
  EXPECT_EQ(w.count("W_IDX_EXTRA_TENSOR"), 1u);
  EXPECT_EQ(w.count("W_IDX_UNREFERENCED_SHARD"), 1u);
  EXPECT_EQ(w.count("W_IDX_TOTAL_SIZE"), 1u);
  EXPECT_NE(src.find("extra.bias"), nullptr);
  EXPECT_EQ(src.find("x.amax"), nullptr);
}

TEST(SourceFolder, IndexPlusDifferentModelSafetensorsIsAmbiguous) {
  ShardedFolder f;
  f.write();
  write_file(f.dir / "model.safetensors", StFile().add("lm_head.weight", "BF16", {4, 8}).bytes());
  Warnings w;
  expect_error([&] { TensorSource::open(f.dir.path(), w); }, "E_FOLDER_AMBIGUOUS",
               {"model.safetensors", "4 tensors"});
}

TEST(SourceFolder, IndexPlusSameModelSafetensorsIsSkipped) {
  ShardedFolder f;
  f.write();
  StFile same;
  for (const auto& e : f.shard1.entries) same.entries.push_back(e);
  for (const auto& e : f.shard2.entries) same.entries.push_back(e);
  write_file(f.dir / "model.safetensors", same.bytes());
  Warnings w;
  TensorSource src = TensorSource::open(f.dir.path(), w);
  EXPECT_EQ(w.count("W_IDX_UNREFERENCED_SHARD"), 1u);
  EXPECT_EQ(src.file_count(), 2u);
}

TEST(SourceFolder, TwoSingleFilesOverlappingIsAmbiguous) {
  TempDir dir;
  write_json(dir / "config.json", plain_config());
  write_file(dir / "a.safetensors", StFile().add("w", "U8", {2}).bytes());
  write_file(dir / "b.safetensors", StFile().add("w", "U8", {2}).bytes());
  Warnings w;
  expect_error([&] { TensorSource::open(dir.path(), w); }, "E_FOLDER_AMBIGUOUS",
               {"b.safetensors", "tensor 'w'", "a.safetensors"});
}

TEST(SourceFolder, TwoDisjointFilesWithoutIndexAreJoined) {
  TempDir dir;
  write_json(dir / "config.json", plain_config());
  write_file(dir / "a.safetensors", StFile().add("w1", "U8", {2}).bytes());
  write_file(dir / "b.safetensors", StFile().add("w2", "U8", {3}).bytes());
  Warnings w;
  TensorSource src = TensorSource::open(dir.path(), w);
  EXPECT_EQ(src.tensors().size(), 2u);
  EXPECT_EQ(src.display_path(src.find("w2")->file_index), "b.safetensors");
}

TEST(SourceFolder, PickleOnly) {
  TempDir dir;
  write_json(dir / "config.json", plain_config());
  write_file(dir / "pytorch_model.bin", "PK\x03\x04");
  Warnings w;
  expect_error([&] { TensorSource::open(dir.path(), w); }, "E_FOLDER_PICKLE_ONLY",
               {dir.path().string(), "pickle"});
}

TEST(SourceFolder, NoWeights) {
  TempDir dir;
  write_json(dir / "config.json", plain_config());
  write_file(dir / "training_args.bin", "x");
  write_file(dir / "amax.safetensors", StFile().add("x.amax", "F32", {}).bytes());
  Warnings w;
  expect_error([&] { TensorSource::open(dir.path(), w); }, "E_FOLDER_NO_WEIGHTS", {dir.path().string()});
}

TEST(SourceFolder, NoConfig) {
  TempDir dir;
  write_file(dir / "model.safetensors", StFile().add("w", "U8", {2}).bytes());
  Warnings w;
  expect_error([&] { TensorSource::open(dir.path(), w); }, "E_FOLDER_NO_CONFIG",
               {"config.json", "no such file"});
}

TEST(SourceFolder, ConfigNotJson) {
  TempDir dir;
  write_file(dir / "model.safetensors", StFile().add("w", "U8", {2}).bytes());
  write_file(dir / "config.json", "{\"model_type\": ");
  Warnings w;
  expect_error([&] { TensorSource::open(dir.path(), w); }, "E_FOLDER_NO_CONFIG",
               {"config.json", "valid JSON"});
}

TEST(SourceFolder, CalibrationLeftoverIgnoredBesideSingleFile) {
  TempDir dir;
  write_json(dir / "config.json", plain_config());
  write_file(dir / "model.safetensors", StFile().add("w", "U8", {2}).bytes());
  write_file(dir / "amax.safetensors", StFile().add("w", "U8", {2}).bytes());
  Warnings w;
  TensorSource src = TensorSource::open(dir.path(), w);
  EXPECT_EQ(src.kind(), FolderKind::SingleFile);
  EXPECT_EQ(src.file_count(), 1u);
  EXPECT_EQ(w.count("W_FOLDER_IGNORED"), 1u);
}

TEST(SourceFolder, NotADirectory) {
  TempDir dir;
  Warnings w;
  expect_error([&] { TensorSource::open(dir / "nothing-here", w); }, "E_FOLDER_NO_WEIGHTS", {"nothing-here"});
}

TEST(SourceFolder, GgufOnlyIsNotYetReadable) {
  TempDir dir;
  write_json(dir / "config.json", plain_config());
  write_file(dir / "model-00001-of-00002.gguf", "GGUF");
  Warnings w;
  expect_error([&] { TensorSource::open(dir.path(), w); }, "E_FOLDER_NO_WEIGHTS",
               {dir.path().string(), "GGUF"});
}

TEST(SourceFolder, ShardedWithoutConfig) {
  ShardedFolder f;
  f.write();
  std::filesystem::remove(f.dir / "config.json");
  Warnings w;
  expect_error([&] { TensorSource::open(f.dir.path(), w); }, "E_FOLDER_NO_CONFIG", {"config.json"});
}

}  // namespace
}  // namespace bloomery::testing
