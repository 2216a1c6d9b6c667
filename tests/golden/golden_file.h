// Reads a goldens.safetensors file (F32 and I64 tensors) for the golden tests; independent of the engine's
// TensorSource so that a bug there cannot hide in both sides of a comparison.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace bloomery::test {

struct GoldenTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<float> f32;
  std::vector<int64_t> i64;
};

inline std::map<std::string, GoldenTensor> read_goldens(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  f.read(header.data(), static_cast<std::streamsize>(n));
  auto j = nlohmann::json::parse(header);
  std::vector<char> data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::map<std::string, GoldenTensor> out;
  for (auto& [name, v] : j.items()) {
    if (name == "__metadata__") continue;
    GoldenTensor t;
    t.dtype = v["dtype"].get<std::string>();
    t.shape = v["shape"].get<std::vector<int64_t>>();
    const uint64_t b = v["data_offsets"][0].get<uint64_t>(), e = v["data_offsets"][1].get<uint64_t>();
    if (e > data.size() || b > e) throw std::runtime_error("bad offsets for " + name);
    if (t.dtype == "F32") {
      t.f32.resize((e - b) / 4);
      std::memcpy(t.f32.data(), data.data() + b, e - b);
    } else if (t.dtype == "I64") {
      t.i64.resize((e - b) / 8);
      std::memcpy(t.i64.data(), data.data() + b, e - b);
    } else {
      throw std::runtime_error("unexpected dtype " + t.dtype + " for " + name);
    }
    out[name] = std::move(t);
  }
  return out;
}

// The f32 reference's top-2 margin (top-1 logit minus the runner-up) at each of the `n` greedy tokens of
// prompt `p`: the golden's greedy{p}.margin, or from its greedy{p}.logits rows.
inline std::vector<double> reference_margins(const std::map<std::string, GoldenTensor>& golden,
                                             const std::string& p, size_t n) {
  if (auto it = golden.find("greedy" + p + ".margin"); it != golden.end())
    return std::vector<double>(it->second.f32.begin(), it->second.f32.end());
  const auto& rows = golden.at("greedy" + p + ".logits").f32;
  const size_t V = rows.size() / n;
  std::vector<double> m(n);
  for (size_t j = 0; j < n; ++j) {
    double a = -INFINITY, b = -INFINITY;  // the largest and the runner-up
    for (size_t v = 0; v < V; ++v) {
      const double x = rows[j * V + v];
      if (x > a)
        b = a, a = x;
      else if (x > b)
        b = x;
    }
    m[j] = a - b;
  }
  return m;
}

}  // namespace bloomery::test
