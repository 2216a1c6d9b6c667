#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/dtype.h"
#include "core/error.h"
#include "core/file.h"

namespace bloomery {
namespace {

TEST(DType, RoundTripsEveryName) {
  for (int i = 0; i <= static_cast<int>(DType::F4); ++i) {
    auto t = static_cast<DType>(i);
    auto back = dtype_from_string(dtype_name(t));
    ASSERT_TRUE(back.has_value()) << dtype_name(t);
    EXPECT_EQ(*back, t);
  }
  EXPECT_FALSE(dtype_from_string("F8_E4M3FN").has_value());
  EXPECT_FALSE(dtype_from_string("bf16").has_value());
}

TEST(DType, BytesForSubByteTypes) {
  EXPECT_EQ(dtype_bytes_for(DType::F4, 32), 16u);
  EXPECT_FALSE(dtype_bytes_for(DType::F4, 3).has_value());
  EXPECT_EQ(dtype_bytes_for(DType::F6_E2M3, 4), 3u);
  EXPECT_FALSE(dtype_bytes_for(DType::F6_E2M3, 2).has_value());
  EXPECT_EQ(dtype_bytes_for(DType::BF16, 10), 20u);
  EXPECT_FALSE(dtype_bytes_for(DType::F64, uint64_t{1} << 62).has_value());
  EXPECT_EQ(dtype_bytes_for(DType::U8, uint64_t{1} << 62), uint64_t{1} << 62);
}

TEST(Error, MessageNamesEveryPart) {
  try {
    raise("E_ST_SIZE_MISMATCH", {"model.safetensors", "a.weight", "data_offsets"}, "32 bytes", "30 bytes");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.id(), "E_ST_SIZE_MISMATCH");
    EXPECT_STREQ(
        e.what(),
        "E_ST_SIZE_MISMATCH: model.safetensors: tensor 'a.weight': field 'data_offsets': expected 32 "
        "bytes, found 30 bytes");
  }
}

TEST(Warnings, CountsAndKeepsFirst) {
  Warnings w;
  w.add("W_X", {"f", "t1", {}}, "first");
  w.add("W_X", {"f", "t2", {}}, "second");
  w.add("W_Y", {}, "other");
  EXPECT_EQ(w.count("W_X"), 2u);
  EXPECT_EQ(w.total(), 3u);
  auto s = w.summary();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0], "W_X (2 times), first: f: tensor 't1': first");
}

TEST(File, ReadsRangesAndRefusesPastEnd) {
  auto path = std::filesystem::temp_directory_path() / "bloomery_file_test.bin";
  {
    std::ofstream out(path, std::ios::binary);
    out << "0123456789";
  }
  File f(path);
  EXPECT_EQ(f.size(), 10u);
  char buf[4];
  f.read(3, 4, buf);
  EXPECT_EQ(std::string(buf, 4), "3456");
  EXPECT_THROW(f.read(8, 4, buf), Error);
  std::filesystem::remove(path);
  EXPECT_THROW(File{path}, Error);
}

}  // namespace
}  // namespace bloomery
