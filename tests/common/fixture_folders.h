// The fixture model folders (tests/fixtures/models/<family>-<layout>) for tests that run over all of them.
// BLOOMERY_SOURCE_DIR in the environment wins over the build's source path, so a test binary carried to the
// GPU machine finds the repository copy there.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace bloomery::testing_fixtures {

inline std::filesystem::path models_root() {
  const char* env = std::getenv("BLOOMERY_SOURCE_DIR");
  return std::filesystem::path(env && *env ? env : BLOOMERY_SOURCE_DIR) / "tests/fixtures/models";
}

// Every folder holding a checkpoint (config.json, or a CSF container's manifest.json), sorted by name.
inline std::vector<std::filesystem::path> fixture_folders() {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(models_root()))
    if (e.is_directory() && (std::filesystem::exists(e.path() / "config.json") ||
                             std::filesystem::exists(e.path() / "manifest.json")))
      out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// The folder names, for parameterised tests; {"none"} when there are none (the test then skips by name).
inline std::vector<std::string> fixture_names() {
  std::vector<std::string> out;
  if (std::filesystem::is_directory(models_root()))
    for (const auto& p : fixture_folders()) out.push_back(p.filename().string());
  if (out.empty()) out.push_back("none");
  return out;
}

// gtest parameter names from folder names ("qwen4_exp-bf16" -> "qwen4_exp_bf16").
inline std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param;
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

}  // namespace bloomery::testing_fixtures
