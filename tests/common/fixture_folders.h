// The fixture model folders (tests/fixtures/models/<family>-<layout>) for tests that run over all of them.
// BLOOMERY_SOURCE_DIR in the environment wins over the build's source path, so a test binary carried to the
// GPU machine finds the repository copy there.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <vector>

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

}  // namespace bloomery::testing_fixtures
