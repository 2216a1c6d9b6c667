// safetensors header checks (formats.md §2.3), each driven through a single-file model folder.
#include <gtest/gtest.h>

#include "formats/safetensors.h"
#include "formats/tensor_source.h"
#include "source_test_writer.h"

namespace bloomery::testing {
namespace {

// A folder with config.json and one model.safetensors holding `file`.
struct SingleFolder {
  TempDir dir;
  explicit SingleFolder(const StFile& file) {
    write_json(dir / "config.json", plain_config());
    write_file(dir / "model.safetensors", file.bytes());
  }
  TensorSource open(Warnings& w) const { return TensorSource::open(dir.path(), w); }
  void expect(const std::string& id, const std::vector<std::string>& parts) const {
    Warnings w;
    expect_error([&] { open(w); }, id, parts);
  }
};

TEST(SourceSafetensors, SingleFileGoodAndReads) {
  StFile f;
  f.metadata_raw = R"({"format":"pt"})";
  f.add("model.embed_tokens.weight", "BF16", {4, 8}).add("model.norm.weight", "F32", {8});
  SingleFolder folder(f);
  Warnings w;
  TensorSource src = folder.open(w);
  EXPECT_EQ(src.kind(), FolderKind::SingleFile);
  EXPECT_TRUE(w.empty());
  ASSERT_EQ(src.tensors().size(), 2u);
  EXPECT_EQ(src.config()["model_type"], "qwen3_next");
  EXPECT_TRUE(src.hf_quant_config().is_null());
  const TensorEntry* e = src.find("model.norm.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->dtype, DType::F32);
  EXPECT_EQ(e->shape, (std::vector<uint64_t>{8}));
  EXPECT_EQ(e->nbytes, 32u);
  EXPECT_EQ(src.display_path(e->file_index), "model.safetensors");
  // The norm follows the 64 embedding bytes in the data section.
  std::vector<uint8_t> bytes = src.read_all(*e);
  ASSERT_EQ(bytes.size(), 32u);
  for (size_t i = 0; i < bytes.size(); ++i) EXPECT_EQ(bytes[i], StFile::pattern(64 + i));
  uint8_t two[2];
  src.read(*e, 30, 2, two);
  EXPECT_EQ(two[1], StFile::pattern(64 + 31));
  EXPECT_EQ(src.find("absent"), nullptr);
  expect_error([&] { src.read(*e, 30, 3, two); }, "E_ST_OUT_OF_BOUNDS", {"model.norm.weight"});
}

TEST(SourceSafetensors, ScalarZeroSizeAndF4) {
  StFile f;
  f.add("scalar", "F32", {})
      .add("empty", "BF16", {0, 64})
      .add("packed", "F4", {4, 6})
      .add("big_empty", "F32", {1ull << 62, 0, 1ull << 62});
  SingleFolder folder(f);
  Warnings w;
  TensorSource src = folder.open(w);
  const TensorEntry* s = src.find("scalar");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->shape.empty());
  EXPECT_EQ(s->numel, 1u);
  EXPECT_EQ(s->nbytes, 4u);
  EXPECT_EQ(src.find("empty")->nbytes, 0u);
  EXPECT_EQ(src.find("empty")->numel, 0u);
  EXPECT_EQ(src.find("big_empty")->numel, 0u);
  EXPECT_TRUE(src.read_all(*src.find("empty")).empty());
  EXPECT_EQ(src.find("packed")->nbytes, 12u);
  EXPECT_EQ(src.find("packed")->numel, 24u);
  EXPECT_EQ(src.find("packed")->dtype, DType::F4);
}

TEST(SourceSafetensors, UnalignedOffsetWarns) {
  StFile f;
  f.add("a.bias", "U8", {3}).add("b.weight", "BF16", {2, 2}).add("c.weight", "F32", {2});
  SingleFolder folder(f);
  Warnings w;
  TensorSource src = folder.open(w);
  EXPECT_EQ(w.count("W_ST_MISALIGNED"), 2u);  // BF16 at data+3, F32 at data+11
  ASSERT_FALSE(w.summary().empty());
  EXPECT_NE(w.summary()[0].find("model.safetensors"), std::string::npos);
  auto b = src.read_all(*src.find("b.weight"));
  EXPECT_EQ(b[0], StFile::pattern(3));
}

TEST(SourceSafetensors, MetadataNotStringMapWarns) {
  StFile f;
  f.metadata_raw = R"({"format":"pt","step":3})";
  f.add("w", "U8", {2});
  SingleFolder folder(f);
  Warnings w;
  folder.open(w);
  EXPECT_EQ(w.count("W_ST_METADATA_TYPE"), 1u);
}

TEST(SourceSafetensors, FileShorterThanPrefix) {
  StFile f;
  f.add("w", "U8", {2});
  f.truncate_to = 5;
  SingleFolder(f).expect("E_ST_TRUNCATED", {"model.safetensors", "header length", "5 bytes"});
}

TEST(SourceSafetensors, HeaderLengthPastEof) {
  StFile f;
  f.add("w", "U8", {2});
  f.header_len_override = 4000;
  SingleFolder(f).expect("E_ST_TRUNCATED", {"model.safetensors", "4008 bytes"});
}

TEST(SourceSafetensors, TruncatedDataIsOutOfBounds) {
  StFile f;
  f.add("a", "BF16", {4}).add("model.layers.0.w", "BF16", {8});
  f.truncate_to = static_cast<int64_t>(f.bytes().size()) - 3;
  SingleFolder(f).expect("E_ST_OUT_OF_BOUNDS",
                         {"model.safetensors", "model.layers.0.w", "data_offsets", "end 24"});
}

TEST(SourceSafetensors, HeaderTooLarge) {
  StFile f;
  f.add("w", "U8", {2});
  f.header_len_override = (100ll << 20) + 1;
  SingleFolder(f).expect("E_ST_HEADER_TOO_LARGE", {"model.safetensors", "104857601"});
}

TEST(SourceSafetensors, HeaderNotUtf8) {
  StFile f;
  f.add("bad\xff name", "U8", {2});
  SingleFolder(f).expect("E_ST_HEADER_NOT_UTF8", {"model.safetensors", "header", "header byte 5"});
}

TEST(SourceSafetensors, HeaderEncodedSurrogateIsNotUtf8) {
  StFile f;
  f.add("w\xed\xa0\x80", "U8", {2});
  SingleFolder(f).expect("E_ST_HEADER_NOT_UTF8", {"model.safetensors"});
}

TEST(SourceSafetensors, HeaderNotJson) {
  StFile f;
  f.header_override = "{\"w\": {\"dtype\": \"U8\",";
  SingleFolder(f).expect("E_ST_HEADER_NOT_JSON", {"model.safetensors", "header"});
}

TEST(SourceSafetensors, HeaderTopLevelNotObject) {
  StFile f;
  f.header_override = "[1, 2]  ";
  SingleFolder(f).expect("E_ST_HEADER_NOT_JSON", {"model.safetensors", "array"});
}

TEST(SourceSafetensors, DuplicateTensorKey) {
  StFile f;
  f.add("model.norm.weight", "U8", {2}).add("model.norm.weight", "U8", {2});
  SingleFolder(f).expect("E_ST_DUPLICATE_KEY", {"model.safetensors", "model.norm.weight"});
}

TEST(SourceSafetensors, DuplicateFieldInEntry) {
  StFile f;
  f.raw("w", R"({"dtype":"U8","shape":[2],"dtype":"I8","data_offsets":[0,2]})");
  f.data_len = 2;
  SingleFolder(f).expect("E_ST_DUPLICATE_KEY", {"model.safetensors", "tensor 'w'", "field 'dtype'"});
}

TEST(SourceSafetensors, EntryMissingDtype) {
  StFile f;
  f.raw("w", R"({"shape":[2],"data_offsets":[0,2]})");
  f.data_len = 2;
  SingleFolder(f).expect("E_ST_BAD_ENTRY", {"model.safetensors", "tensor 'w'", "field 'dtype'"});
}

TEST(SourceSafetensors, EntryNegativeDimension) {
  StFile f;
  f.raw("w", R"({"dtype":"U8","shape":[-2],"data_offsets":[0,2]})");
  f.data_len = 2;
  SingleFolder(f).expect("E_ST_BAD_ENTRY", {"model.safetensors", "tensor 'w'", "field 'shape'", "[-2]"});
}

TEST(SourceSafetensors, EntryFractionalDimension) {
  StFile f;
  f.raw("w", R"({"dtype":"U8","shape":[1.5],"data_offsets":[0,2]})");
  f.data_len = 2;
  SingleFolder(f).expect("E_ST_BAD_ENTRY", {"model.safetensors", "tensor 'w'", "field 'shape'"});
}

TEST(SourceSafetensors, EntryOffsetsNotPair) {
  StFile f;
  f.raw("w", R"({"dtype":"U8","shape":[2],"data_offsets":[0,1,2]})");
  f.data_len = 2;
  SingleFolder(f).expect("E_ST_BAD_ENTRY", {"model.safetensors", "tensor 'w'", "field 'data_offsets'"});
}

TEST(SourceSafetensors, EntryNotObject) {
  StFile f;
  f.raw("w", R"("U8")");
  SingleFolder(f).expect("E_ST_BAD_ENTRY", {"model.safetensors", "tensor 'w'"});
}

TEST(SourceSafetensors, UnknownDtype) {
  StFile f;
  f.add("w", "F12", {2});
  SingleFolder(f).expect("E_ST_DTYPE_UNKNOWN", {"model.safetensors", "tensor 'w'", "field 'dtype'", "'F12'"});
}

TEST(SourceSafetensors, ShapeOverflow) {
  StFile f;
  f.raw("w", R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]})");
  f.data_len = 0;
  SingleFolder(f).expect("E_ST_SHAPE_OVERFLOW", {"model.safetensors", "tensor 'w'", "field 'shape'"});
}

TEST(SourceSafetensors, ByteSizeOverflow) {
  StFile f;
  f.raw("w", R"({"dtype":"F32","shape":[4611686018427387905],"data_offsets":[0,0]})");
  f.data_len = 0;
  SingleFolder(f).expect("E_ST_SHAPE_OVERFLOW", {"model.safetensors", "tensor 'w'"});
}

TEST(SourceSafetensors, OffsetsReversed) {
  StFile f;
  f.raw("w", R"({"dtype":"U8","shape":[2],"data_offsets":[4,2]})");
  f.data_len = 4;
  SingleFolder(f).expect("E_ST_OFFSETS_INVALID",
                         {"model.safetensors", "tensor 'w'", "data_offsets", "[4, 2]"});
}

TEST(SourceSafetensors, SizeMismatchNamesExpectedAndFound) {
  StFile f;
  f.add("model.layers.0.mlp.gate.weight", "BF16", {32, 64});
  f.entries[0].nbytes = 4094;
  SingleFolder(f).expect(
      "E_ST_SIZE_MISMATCH",
      {"E_ST_SIZE_MISMATCH: model.safetensors: tensor 'model.layers.0.mlp.gate.weight': field "
       "'data_offsets': expected 4096 bytes (BF16 [32, 64]), found 4094 bytes"});
}

TEST(SourceSafetensors, F4OddElementCount) {
  StFile f;
  f.add("packed", "F4", {3, 3});
  f.entries[0].nbytes = 5;
  SingleFolder(f).expect("E_ST_SIZE_MISMATCH", {"model.safetensors", "tensor 'packed'", "9 elements"});
}

TEST(SourceSafetensors, F6SizeChecked) {
  StFile f;
  f.add("six", "F6_E2M3", {4});  // 4 × 6 bits = 3 bytes
  f.entries[0].nbytes = 4;
  SingleFolder(f).expect("E_ST_SIZE_MISMATCH", {"tensor 'six'", "expected 3 bytes"});
}

TEST(SourceSafetensors, EndPastDataSection) {
  StFile f;
  f.raw("w", R"({"dtype":"U8","shape":[4],"data_offsets":[0,4]})");
  f.data_len = 3;
  SingleFolder(f).expect("E_ST_OUT_OF_BOUNDS", {"model.safetensors", "tensor 'w'", "end <= 3"});
}

TEST(SourceSafetensors, OverlappingRanges) {
  StFile f;
  f.raw("a", R"({"dtype":"U8","shape":[4],"data_offsets":[0,4]})");
  f.raw("b", R"({"dtype":"U8","shape":[4],"data_offsets":[2,6]})");
  f.data_len = 6;
  SingleFolder(f).expect("E_ST_OVERLAP", {"model.safetensors", "tensor 'b'", "tensor 'a'", "[2, 6]"});
}

TEST(SourceSafetensors, GapBetweenTensors) {
  StFile f;
  f.raw("a", R"({"dtype":"U8","shape":[4],"data_offsets":[0,4]})");
  f.raw("b", R"({"dtype":"U8","shape":[4],"data_offsets":[8,12]})");
  f.data_len = 12;
  SingleFolder(f).expect("E_ST_HOLE", {"model.safetensors", "tensor 'b'", "4 unused bytes"});
}

TEST(SourceSafetensors, TrailingBytes) {
  StFile f;
  f.add("a", "U8", {4});
  f.data_len = 6;
  SingleFolder(f).expect("E_ST_HOLE", {"model.safetensors", "tensor 'a'", "2 trailing bytes"});
}

// The memory entry point (the fuzzer's) agrees with the file path.
TEST(SourceSafetensors, MemoryEntryPoint) {
  StFile f;
  f.add("x", "F16", {3}).add("y", "I64", {});
  const std::string bytes = f.bytes();
  Warnings w;
  SafetensorsHeader h = parse_safetensors_bytes(bytes, bytes.size(), "mem.safetensors", w);
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.tensors[0].name, "x");
  EXPECT_EQ(h.data_len, 14u);
  EXPECT_EQ(h.data_start % 8, 0u);
  expect_error([&] { parse_safetensors_bytes(bytes, bytes.size() + 1, "mem.safetensors", w); }, "E_ST_HOLE",
               {"mem.safetensors"});
}

}  // namespace
}  // namespace bloomery::testing
