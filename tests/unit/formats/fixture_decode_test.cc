// Every weight of the tiny fixture checkpoints (tests/fixtures/models/*: bf16, ModelOpt mixed, CSF container)
// decoded through TensorSource → resolve_checkpoint → decode_weight, compared bit-exactly with
// reference/formats/dequantize_folder.py's decode of the same files.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <set>

#include "formats/classify.h"
#include "formats/weight_decode.h"

namespace bloomery {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> fixture_folders() {
  std::vector<fs::path> out;
  const fs::path root = fs::path(BLOOMERY_SOURCE_DIR) / "tests/fixtures/models";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec))
    if (e.is_directory()) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(FixtureDecode, EveryWeightMatchesPythonBitExactly) {
  const std::vector<fs::path> folders = fixture_folders();
  if (folders.empty()) GTEST_SKIP() << "no fixture folders under tests/fixtures/models";
  char tmpl[] = "/tmp/bloomery_fixture_decode_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const fs::path tmp = tmpl;
  struct RemoveOnExit {  // also when an ASSERT leaves the test early
    fs::path dir;
    ~RemoveOnExit() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{tmp};
  for (const fs::path& folder : folders) {
    SCOPED_TRACE(folder.filename().string());
    // The Python decode of every main tensor, in a one-file folder TensorSource can open.
    const fs::path out_dir = tmp / folder.filename();
    fs::create_directories(out_dir);
    std::FILE* cfg = std::fopen((out_dir / "config.json").c_str(), "w");
    ASSERT_NE(cfg, nullptr);
    std::fputs("{}", cfg);
    std::fclose(cfg);
    const std::string cmd = std::string("/usr/bin/python3 ") + BLOOMERY_SOURCE_DIR +
                            "/reference/formats/dequantize_folder.py " + folder.string() + " " +
                            (out_dir / "model.safetensors").string() + " > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    Warnings warnings;
    const TensorSource expected = TensorSource::open(out_dir, warnings);
    const TensorSource src = TensorSource::open(folder, warnings);
    const ResolvedCheckpoint ck = resolve_checkpoint(src, warnings);

    std::set<std::string> matched, skipped;
    std::set<FormatId> formats;
    for (const WeightRecord& rec : ck.weights) {
      if (rec.skipped)
        for (const TensorEntry* t : rec.main) skipped.insert(t->name);
      if (rec.kind != RecordKind::Weight || rec.skipped) continue;
      SCOPED_TRACE(rec.name);
      std::vector<float> want;
      bool complete = true;
      for (const TensorEntry* t : rec.main) {
        const TensorEntry* e = expected.find(t->name);
        if (!e) {
          complete = false;
          break;
        }
        const size_t at = want.size();
        want.resize(at + e->numel);
        expected.read(*e, 0, e->nbytes, want.data() + at);
        matched.insert(t->name);
      }
      ASSERT_TRUE(complete) << "the Python decoder has no value for a main tensor";
      const std::vector<float> got = decode_weight(src, rec, warnings);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << format_name(rec.format);
      formats.insert(rec.format);
    }
    // Every weight the Python side decoded was a record's main tensor here (or a skipped vision tensor).
    for (const TensorEntry& e : expected.tensors())
      EXPECT_TRUE(matched.count(e.name) || skipped.count(e.name)) << e.name << " was not decoded";
    std::string seen;
    for (FormatId f : formats) seen += std::string(format_name(f)) + " ";
    std::printf("%s: %zu weights bit-exact (%s)\n", folder.filename().c_str(), matched.size(), seen.c_str());
  }
}

}  // namespace
}  // namespace bloomery
