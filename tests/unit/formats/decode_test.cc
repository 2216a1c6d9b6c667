// Bit-exact agreement of the C++ decoders with the Python reference (issue 2 part 5): runs
// reference/formats/make_decode_cases.py into a temporary folder, decodes every case through TensorSource and
// decode_weight, and compares f32 bits (NaN patterns included) with the Python dequantisation stored beside
// it.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "formats/decode.h"
#include "formats/weight_decode.h"

namespace bloomery {
namespace {

namespace fs = std::filesystem;

struct CaseSet {
  fs::path dir;
  nlohmann::json cases;
  std::string error;
  ~CaseSet() {
    std::error_code ec;
    if (!dir.empty()) fs::remove_all(dir, ec);
  }
};

// Generated once per test process (ctest runs each test in its own process, so each gets its own folder).
const CaseSet& case_set() {
  static CaseSet set = [] {
    CaseSet s;
    char tmpl[] = "/tmp/bloomery_decode_cases_XXXXXX";
    if (!mkdtemp(tmpl)) {
      s.error = "mkdtemp failed";
      return s;
    }
    s.dir = tmpl;
    const std::string cmd = std::string("/usr/bin/python3 ") + BLOOMERY_SOURCE_DIR +
                            "/reference/formats/make_decode_cases.py " + s.dir.string() + " > " +
                            (s.dir / "log.txt").string() + " 2>&1";
    if (std::system(cmd.c_str()) != 0) {
      std::ifstream log(s.dir / "log.txt");
      s.error = "make_decode_cases.py failed: " + std::string(std::istreambuf_iterator<char>(log), {});
      return s;
    }
    std::ifstream in(s.dir / "cases.json");
    s.cases = nlohmann::json::parse(in)["cases"];
    return s;
  }();
  return set;
}

struct OpenCase {
  TensorSource src;
  WeightRecord rec;
  std::vector<float> expected;
};

OpenCase open_case(const nlohmann::json& c, Warnings& warnings) {
  const fs::path folder = case_set().dir / c["name"].get<std::string>();
  OpenCase oc{TensorSource::open(folder, warnings), {}, {}};
  WeightRecord& rec = oc.rec;
  rec.name = c["name"];
  EXPECT_TRUE(format_from_name(c["format"].get<std::string>(), &rec.format)) << c["format"];
  rec.shape = c["shape"].get<std::vector<uint64_t>>();
  rec.block_n = c["block"][0];
  rec.block_k = c["block"][1];
  rec.scale_encoding = c["scale_encoding"] == "NvFp4Csf" ? ScaleEncoding::NvFp4Csf : ScaleEncoding::Plain;
  auto find = [&](const nlohmann::json& name) {
    const TensorEntry* t = oc.src.find(name.get<std::string>());
    EXPECT_NE(t, nullptr) << name;
    return t;
  };
  const nlohmann::json& roles = c["roles"];
  if (roles["main"].is_array())
    for (const auto& n : roles["main"]) rec.main.push_back(find(n));
  else
    rec.main.push_back(find(roles["main"]));
  if (roles.contains("block_scale")) rec.block_scale = find(roles["block_scale"]);
  if (roles.contains("global_scale")) rec.global_scale = find(roles["global_scale"]);
  if (roles.contains("input_scale")) rec.input_scale = find(roles["input_scale"]);
  if (roles.contains("csf_fixed")) rec.csf_fixed = find(roles["csf_fixed"]);
  if (roles.contains("csf_exceptions")) rec.csf_exceptions = find(roles["csf_exceptions"]);
  const TensorEntry* e = find(nlohmann::json("expected"));
  oc.expected.resize(e->numel);
  oc.src.read(*e, 0, e->nbytes, oc.expected.data());
  return oc;
}

// First differing float, printed with its bits, or "" when the arrays are bit-identical.
std::string first_difference(const float* got, const float* want, size_t n, uint64_t cols) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t a, b;
    std::memcpy(&a, got + i, 4);
    std::memcpy(&b, want + i, 4);
    if (a != b)
      return fmt::format("element [{}, {}]: C++ {} (0x{:08X}), Python {} (0x{:08X})", i / cols, i % cols,
                         got[i], a, want[i], b);
  }
  return "";
}

TEST(DecodeCases, GeneratorRuns) {
  ASSERT_EQ(case_set().error, "");
  EXPECT_GE(case_set().cases.size(), 20u);
}

TEST(DecodeCases, EveryFormatHasACase) {
  ASSERT_EQ(case_set().error, "");
  std::set<std::string> seen;
  bool csf1d = false, csf2d = false;
  for (const auto& c : case_set().cases) {
    seen.insert(c["format"].get<std::string>());
    csf1d |= c["name"] == "csf_nvfp4_1d";
    csf2d |= c["name"] == "csf_nvfp4_2d";
  }
  for (size_t i = 0; i < size_t(FormatId::kCount); ++i)
    EXPECT_TRUE(seen.count(std::string(format_name(FormatId(i))))) << format_name(FormatId(i));
  EXPECT_TRUE(csf1d && csf2d);
}

bool is_error_case(const nlohmann::json& c) {
  return c.contains("error") && !c["error"].is_null();
}

TEST(DecodeCases, MutatedWeightsRaiseTheirIds) {
  ASSERT_EQ(case_set().error, "");
  int n = 0;
  for (const auto& c : case_set().cases) {
    if (!is_error_case(c)) continue;
    SCOPED_TRACE(c["name"].get<std::string>());
    Warnings warnings;
    OpenCase oc = open_case(c, warnings);
    std::string id = "no error";
    try {
      decode_weight(oc.src, oc.rec, warnings);
    } catch (const Error& e) {
      id = e.id();
    }
    EXPECT_EQ(id, c["error"].get<std::string>());
    ++n;
  }
  EXPECT_GE(n, 10);
}

TEST(DecodeCases, WholeWeightsMatchPythonBitExactly) {
  ASSERT_EQ(case_set().error, "");
  for (const auto& c : case_set().cases) {
    if (is_error_case(c)) continue;
    SCOPED_TRACE(c["name"].get<std::string>());
    Warnings warnings;
    OpenCase oc = open_case(c, warnings);
    const std::vector<float> got = decode_weight(oc.src, oc.rec, warnings);
    ASSERT_EQ(got.size(), oc.expected.size());
    EXPECT_EQ(first_difference(got.data(), oc.expected.data(), got.size(), oc.rec.cols()), "");
    std::set<std::string> want_warnings;
    for (const auto& w : c["warnings"]) want_warnings.insert(w.get<std::string>());
    for (const char* id : {"W_NVFP4_SCALE_ZERO", "W_NVFP4_SCALE_NEGATIVE"})
      EXPECT_EQ(warnings.count(id) > 0, want_warnings.count(id) > 0) << id;
  }
}

TEST(DecodeCases, RowWindowsMatchPythonBitExactly) {
  ASSERT_EQ(case_set().error, "");
  for (const auto& c : case_set().cases) {
    if (is_error_case(c)) continue;
    SCOPED_TRACE(c["name"].get<std::string>());
    Warnings warnings;
    OpenCase oc = open_case(c, warnings);
    const uint64_t R = oc.rec.rows(), K = oc.rec.cols();
    // Windows that start mid-tile, mid-slab and mid-shard, single rows, and the last rows.
    const std::vector<std::pair<uint64_t, uint64_t>> windows = {
        {0, 1}, {1, std::min<uint64_t>(R - 1, 5)}, {R / 2, R - R / 2}, {R - 1, 1}, {3, R > 20 ? 17 : R - 3}};
    for (auto [r0, n] : windows) {
      if (r0 + n > R || n == 0) continue;
      SCOPED_TRACE(fmt::format("rows [{}, {})", r0, r0 + n));
      const std::vector<float> got = decode_weight_rows(oc.src, oc.rec, r0, n, warnings);
      EXPECT_EQ(first_difference(got.data(), oc.expected.data() + r0 * K, n * K, K), "");
    }
  }
}

TEST(DecodeCases, PythonSelfTestPasses) {
  const std::string cmd =
      std::string("/usr/bin/python3 ") + BLOOMERY_SOURCE_DIR + "/reference/formats/selftest.py";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
}

}  // namespace
}  // namespace bloomery
