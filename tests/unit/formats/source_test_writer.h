// Test helpers for TensorSource: a tiny safetensors writer (bytes built in memory) and model-folder builders.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace bloomery::testing {

namespace fs = std::filesystem;

// Bits per element of the dtype strings the writer lays out automatically.
inline uint64_t st_bits(const std::string& dtype) {
  static const std::map<std::string, uint64_t> bits = {
      {"BOOL", 8}, {"U8", 8},      {"I8", 8},      {"U16", 16},    {"I16", 16},    {"U32", 32},
      {"I32", 32}, {"U64", 64},    {"I64", 64},    {"F16", 16},    {"BF16", 16},   {"F32", 32},
      {"F64", 64}, {"F8_E4M3", 8}, {"F8_E5M2", 8}, {"F8_E8M0", 8}, {"F6_E2M3", 6}, {"F4", 4}};
  auto it = bits.find(dtype);
  return it == bits.end() ? 8 : it->second;
}

// One header entry. Auto entries get consecutive data_offsets sized from dtype × shape (or `nbytes` when
// set); a `raw` entry is written verbatim as the value's JSON and takes no bytes.
struct StEntry {
  std::string name;
  std::string dtype = "U8";
  std::vector<uint64_t> shape;
  int64_t nbytes = -1;
  std::string raw;
};

// A safetensors file under construction. Data bytes follow a pattern so reads can be checked.
struct StFile {
  std::vector<StEntry> entries;
  std::string metadata_raw;          // value of __metadata__, verbatim; empty = no key
  std::string header_override;       // when set, the header JSON verbatim (entries ignored)
  int64_t data_len = -1;             // data section length; -1 = what the auto entries need
  bool pad_header = true;            // pad the JSON with spaces so data starts 8-aligned
  int64_t header_len_override = -1;  // value written in the u64 prefix
  int64_t truncate_to = -1;          // cut the finished file to this many bytes

  StFile& add(std::string name, std::string dtype, std::vector<uint64_t> shape) {
    entries.push_back({std::move(name), std::move(dtype), std::move(shape), -1, {}});
    return *this;
  }
  StFile& raw(std::string name, std::string value_json) {
    entries.push_back({std::move(name), {}, {}, -1, std::move(value_json)});
    return *this;
  }

  static uint8_t pattern(uint64_t i) { return static_cast<uint8_t>((i * 131 + 7) & 0xff); }

  std::string header() const {
    if (!header_override.empty()) return header_override;
    std::string h = "{";
    bool first = true;
    auto sep = [&] {
      if (!first) h += ",";
      first = false;
    };
    if (!metadata_raw.empty()) {
      sep();
      h += "\"__metadata__\":" + metadata_raw;
    }
    uint64_t cursor = 0;
    for (const StEntry& e : entries) {
      sep();
      h += "\"" + e.name + "\":";
      if (!e.raw.empty()) {
        h += e.raw;
        continue;
      }
      uint64_t numel = 1;
      std::string shape = "[";
      for (size_t i = 0; i < e.shape.size(); ++i) {
        numel *= e.shape[i];
        shape += (i ? "," : "") + std::to_string(e.shape[i]);
      }
      shape += "]";
      const uint64_t n = e.nbytes >= 0 ? static_cast<uint64_t>(e.nbytes) : numel * st_bits(e.dtype) / 8;
      h += "{\"dtype\":\"" + e.dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
           std::to_string(cursor) + "," + std::to_string(cursor + n) + "]}";
      cursor += n;
    }
    return h + "}";
  }

  uint64_t auto_data_len() const {
    uint64_t cursor = 0;
    for (const StEntry& e : entries) {
      if (!e.raw.empty()) continue;
      uint64_t numel = 1;
      for (uint64_t d : e.shape) numel *= d;
      cursor += e.nbytes >= 0 ? static_cast<uint64_t>(e.nbytes) : numel * st_bits(e.dtype) / 8;
    }
    return cursor;
  }

  std::string bytes() const {
    std::string h = header();
    if (pad_header && header_override.empty())
      while ((8 + h.size()) % 8) h += ' ';
    const uint64_t n = header_len_override >= 0 ? static_cast<uint64_t>(header_len_override) : h.size();
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    out += h;
    const uint64_t len = data_len >= 0 ? static_cast<uint64_t>(data_len) : auto_data_len();
    for (uint64_t i = 0; i < len; ++i) out += static_cast<char>(pattern(i));
    if (truncate_to >= 0) out.resize(static_cast<size_t>(truncate_to));
    return out;
  }
};

// A fresh directory under the system temp dir, removed with everything in it at scope end.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "bloomery-src-XXXXXX").string();
    char* p = ::mkdtemp(tmpl.data());
    if (!p) throw std::runtime_error("mkdtemp failed");
    path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& rel) const { return path_ / rel; }

 private:
  fs::path path_;
};

inline void write_file(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + path.string());
}

inline void write_json(const fs::path& path, const nlohmann::json& j) {
  write_file(path, j.dump(2));
}

inline nlohmann::json plain_config() {
  return {{"model_type", "qwen3_next"}, {"architectures", {"Qwen3NextForCausalLM"}}, {"hidden_size", 64}};
}

// Runs `f` and checks it throws bloomery::Error with `id` and a message holding every string in `parts`.
inline void expect_error(const std::function<void()>& f, const std::string& id,
                         const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.id(), id) << e.what();
    const std::string msg = e.what();
    for (const std::string& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    return;
  }
  ADD_FAILURE() << "expected " << id << ", nothing thrown";
}

}  // namespace bloomery::testing
