// Slice-then-decode equals decode-then-slice, bit for bit, for every stored format the fixtures carry (BF16,
// NVFP4, NVFP4 with CSF scales, MXFP8, FP8 per-tensor) and a synthetic FP8 block weight (32×32 tiles,
// ragged last tile); misaligned cuts are refused by name (E_TP_CUT).
#include "formats/weight_slice.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "formats/classify.h"
#include "formats/elements.h"
#include "formats/weight_decode.h"

namespace bloomery {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> fixture_folders() {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(BLOOMERY_SOURCE_DIR) / "tests/fixtures/models", ec))
    if (e.is_directory()) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// The cut's elements of a decoded [R, K] weight.
std::vector<float> slice_of(const std::vector<float>& w, uint64_t K, const TensorCut& cut) {
  std::vector<float> out;
  const uint64_t R = w.size() / K;
  if (cut.axis == TensorCut::Axis::Rows) {
    for (const auto& [b, e] : cut.ranges) out.insert(out.end(), w.begin() + b * K, w.begin() + e * K);
  } else {
    const auto [c0, c1] = cut.ranges[0];
    for (uint64_t r = 0; r < R; ++r) out.insert(out.end(), w.begin() + r * K + c0, w.begin() + r * K + c1);
  }
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::string label(const WeightRecord& r) {
  return std::string(format_name(r.format)) + (r.scale_encoding == ScaleEncoding::NvFp4Csf ? "+CSF" : "");
}

// The cuts a rank of a TP = 2 plan would take where the units allow, plus a two-range row cut (GDN-style).
std::vector<TensorCut> legal_cuts(const WeightRecord& r) {
  const CutUnits u = cut_units(r);
  const uint64_t R = r.rows(), K = r.cols();
  std::vector<TensorCut> cuts;
  if (R >= 2 && (R / 2) % u.row == 0) cuts.push_back(TensorCut::rows({{R / 2, R}}));
  if (R >= 3 * u.row) cuts.push_back(TensorCut::rows({{0, u.row}, {2 * u.row, R}}));
  if (K >= 2 && (K / 2) % u.col == 0 && r.main.size() == 1) cuts.push_back(TensorCut::cols(K / 2, K));
  return cuts;
}

TEST(WeightSlice, EveryFixtureWeightSlicesLikeItsDecode) {
  const std::vector<fs::path> folders = fixture_folders();
  if (folders.empty()) GTEST_SKIP() << "no fixture folders";
  std::set<std::string> covered;  // "<format> rows" / "<format> cols"
  for (const fs::path& folder : folders) {
    SCOPED_TRACE(folder.filename().string());
    Warnings warnings;
    const TensorSource src = TensorSource::open(folder, warnings);
    const ResolvedCheckpoint ck = resolve_checkpoint(src, warnings);
    for (const WeightRecord& r : ck.weights) {
      if (r.kind != RecordKind::Weight || r.skipped || r.shape.size() < 2) continue;
      const std::vector<float> whole = decode_weight(src, r, warnings);
      for (const TensorCut& cut : legal_cuts(r)) {
        SCOPED_TRACE(r.name);
        const std::vector<float> got = decode_weight_slice(src, r, cut, warnings);
        ASSERT_TRUE(same_bits(got, slice_of(whole, r.cols(), cut)));
        covered.insert(label(r) + (cut.axis == TensorCut::Axis::Rows ? " rows" : " cols"));
      }
    }
  }
  for (const char* want :
       {"BF16 rows", "BF16 cols", "NVFP4 rows", "NVFP4 cols", "NVFP4+CSF rows", "NVFP4+CSF cols",
        "MXFP8 rows", "MXFP8 cols", "FP8_TENSOR rows", "FP8_TENSOR cols"})
    EXPECT_TRUE(covered.count(want)) << "no fixture weight exercised " << want;
}

// A one-file folder holding an FP8 block weight [80, 96] with 32×32 F32 tiles (the last tile row ragged).
struct Fp8BlockFolder {
  fs::path dir;
  Fp8BlockFolder() {
    char tmpl[] = "/tmp/bloomery_slice_XXXXXX";
    dir = ::mkdtemp(tmpl);
    std::mt19937 rng(20261201);
    std::vector<uint8_t> w(80 * 96);
    for (uint8_t& b : w) {
      b = static_cast<uint8_t>(rng() & 0xff);
      if ((b & 0x7f) == 0x7f) b ^= 1;  // no E4M3 NaN codes
    }
    std::vector<float> s(3 * 3);
    for (float& x : s) x = 0.25f + float(rng() % 1000) / 512.0f;
    nlohmann::json h;
    h["w.weight"] = {{"dtype", "F8_E4M3"}, {"shape", {80, 96}}, {"data_offsets", {0, w.size()}}};
    h["w.weight_scale_inv"] = {
        {"dtype", "F32"}, {"shape", {3, 3}}, {"data_offsets", {w.size(), w.size() + s.size() * 4}}};
    std::string hs = h.dump();
    while (hs.size() % 8) hs += ' ';
    std::ofstream f(dir / "model.safetensors", std::ios::binary);
    const uint64_t n = hs.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << hs;
    f.write(reinterpret_cast<const char*>(w.data()), std::streamsize(w.size()));
    f.write(reinterpret_cast<const char*>(s.data()), std::streamsize(s.size() * 4));
    std::ofstream(dir / "config.json") << "{}";
  }
  ~Fp8BlockFolder() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

TEST(WeightSlice, Fp8BlockTilesSliceLikeTheirDecode) {
  Fp8BlockFolder folder;
  Warnings warnings;
  const TensorSource src = TensorSource::open(folder.dir, warnings);
  WeightRecord r;
  r.name = "w.weight";
  r.module = "w";
  r.format = FormatId::FP8_BLOCK;
  r.shape = {80, 96};
  r.main = {src.find("w.weight")};
  r.block_scale = src.find("w.weight_scale_inv");
  r.block_n = r.block_k = 32;
  ASSERT_TRUE(r.main[0] && r.block_scale);
  const std::vector<float> whole = decode_weight(src, r, warnings);
  for (const TensorCut& cut : {TensorCut::rows({{32, 64}}), TensorCut::rows({{0, 32}, {64, 80}}),
                               TensorCut::cols(32, 96), TensorCut::cols(0, 32), TensorCut::cols(64, 96)})
    EXPECT_TRUE(same_bits(decode_weight_slice(src, r, cut, warnings), slice_of(whole, 96, cut)));
  for (const TensorCut& bad : {TensorCut::rows({{0, 16}}), TensorCut::cols(16, 48)}) {
    try {
      decode_weight_slice(src, r, bad, warnings);
      ADD_FAILURE() << "a cut across FP8 tiles was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.id(), "E_TP_CUT");
      EXPECT_NE(std::string(e.what()).find("w.weight"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("32"), std::string::npos) << e.what();
    }
  }
}

TEST(WeightSlice, Nvfp4ColumnCutInsideAScaleBlockIsRefusedByName) {
  const fs::path folder = fs::path(BLOOMERY_SOURCE_DIR) / "tests/fixtures/models/qwen3_next-modelopt-mixed";
  if (!fs::exists(folder)) GTEST_SKIP() << "no fixture";
  Warnings warnings;
  const TensorSource src = TensorSource::open(folder, warnings);
  const ResolvedCheckpoint ck = resolve_checkpoint(src, warnings);
  const WeightRecord* nv = nullptr;
  for (const WeightRecord& r : ck.weights)
    if (r.format == FormatId::NVFP4 && r.kind == RecordKind::Weight) nv = &r;
  ASSERT_NE(nv, nullptr);
  try {
    check_cut(*nv, TensorCut::cols(0, 8));
    FAIL() << "an NVFP4 cut of 8 columns was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.id(), "E_TP_CUT");
    EXPECT_NE(std::string(e.what()).find(nv->name), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("16"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace bloomery
