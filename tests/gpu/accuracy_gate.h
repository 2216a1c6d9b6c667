// The CUDA accuracy gate (docs/accuracy.md, "The CUDA gate"; issue 15): the bands a fixture folder's engine
// logits are held to, calibrated by transformers' own BF16 forward against its f32 forward on the goldens'
// teacher-forced inputs (tests/fixtures/calibration/bf16_noise.json, written by
// reference/fixtures/bf16_noise.py). Without a calibration for the folder the bands stay the fixed ones
// below, which are never looser.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace bloomery::test {

// KL(p_ref ‖ p_got) of one logits row, in nats (f64 log-softmax).
double kl_row(const float* ref, const float* got, int64_t V) {
  double mr = ref[0], mg = got[0];
  for (int64_t i = 1; i < V; ++i) mr = std::max<double>(mr, ref[i]), mg = std::max<double>(mg, got[i]);
  double zr = 0, zg = 0;
  for (int64_t i = 0; i < V; ++i) zr += std::exp(ref[i] - mr), zg += std::exp(got[i] - mg);
  const double lr = mr + std::log(zr), lg = mg + std::log(zg);
  double kl = 0;
  for (int64_t i = 0; i < V; ++i) {
    const double a = ref[i] - lr, b = got[i] - lg;
    kl += std::exp(a) * (a - b);
  }
  return std::max(kl, 0.0);
}

struct Agreement {
  int64_t rows = 0, top1 = 0;
  double kl_sum = 0, kl_max = 0;
  void add(const float* ref, const float* got, int64_t V) {
    ++rows;
    top1 +=
        std::max_element(ref, ref + V) - ref == std::max_element(got, got + V) - got;  // lowest id on ties
    const double k = kl_row(ref, got, V);
    kl_sum += k;
    kl_max = std::max(kl_max, k);
  }
  double top1_rate() const { return rows ? double(top1) / rows : 0.0; }
  double mean_kl() const { return rows ? kl_sum / rows : 0.0; }
};

// The fixed bands (the gate before the calibration): top-1 agreement and mean KL(reference ‖ engine) in nats,
// and every greedy token identical.
constexpr double kFixedMinTop1 = 0.99;
constexpr double kFixedMaxMeanKl = 1e-3;

// One folder's entry of bf16_noise.json: KL(f32 ‖ bf16) per position, top-1 agreement of the two forwards,
// and the largest |logit_f32 − logit_bf16| over every position and token.
struct Bf16Noise {
  int64_t positions = 0;
  double mean_kl = 0, max_kl = 0, top1 = 0, max_abs_dlogit = 0;
  std::string versions;  // "torch …, transformers …" that measured it
};

// The entry `section` ("models" or "trained") / `folder` of the file at `path`; nullopt when the file or the
// entry is absent. A file or entry that is there but malformed throws std::runtime_error (never a silent
// fallback).
inline std::optional<Bf16Noise> read_bf16_noise(const std::filesystem::path& path, const std::string& section,
                                                const std::string& folder) {
  if (!std::filesystem::exists(path)) return std::nullopt;
  const std::string where = path.string() + " [" + section + "][" + folder + "]";
  try {
    std::ifstream f(path);
    const nlohmann::json j = nlohmann::json::parse(f);
    if (!j.contains(section) || !j.at(section).contains(folder)) return std::nullopt;
    const nlohmann::json& e = j.at(section).at(folder);
    Bf16Noise n;
    n.positions = e.at("positions").get<int64_t>();
    n.mean_kl = e.at("mean_kl").get<double>();
    n.max_kl = e.at("max_kl").get<double>();
    n.top1 = e.at("top1").get<double>();
    n.max_abs_dlogit = e.at("max_abs_dlogit").get<double>();
    n.versions = "torch " + j.at("torch").get<std::string>() + ", transformers " +
                 j.at("transformers").get<std::string>();
    const bool sane = n.positions > 0 && std::isfinite(n.mean_kl) && n.mean_kl >= 0 &&
                      std::isfinite(n.max_kl) && n.max_kl >= n.mean_kl && n.top1 >= 0 && n.top1 <= 1 &&
                      std::isfinite(n.max_abs_dlogit) && n.max_abs_dlogit >= 0;
    if (!sane) throw std::runtime_error("values out of range");
    return n;
  } catch (const std::exception& x) {
    throw std::runtime_error(where + ": " + x.what());
  }
}

struct Gate {
  double max_mean_kl = kFixedMaxMeanKl;
  double min_top1 = kFixedMinTop1;
  // Free-running greedy: tokens must be identical up to the first one whose f32 reference top-2 margin is
  // below delta; none: all of them.
  std::optional<double> delta;
  std::string line;  // one line saying where the bands come from
};

// Calibrated: mean KL ≤ max(1e-3, 2 × the BF16 forward's mean KL); top-1 ≥ its top-1 − 1 point; δ = 2 × its
// largest logit error ε (a logit error ≤ ε moves a top-2 margin by ≤ 2ε, so only a margin below 2ε may flip
// at the BF16 forward's precision).
inline Gate gate_for(const std::optional<Bf16Noise>& n, const std::string& folder, const std::string& file) {
  Gate g;
  char buf[512];
  if (!n) {
    std::snprintf(
        buf, sizeof buf,
        "%s gate: no BF16 calibration (%s absent or without the folder): fixed bands mean KL <= %.3g, "
        "top-1 >= %.4f, every greedy token identical",
        folder.c_str(), file.c_str(), g.max_mean_kl, g.min_top1);
    g.line = buf;
    return g;
  }
  g.max_mean_kl = std::max(kFixedMaxMeanKl, 2 * n->mean_kl);
  g.min_top1 = n->top1 - 0.01;
  g.delta = 2 * n->max_abs_dlogit;
  std::snprintf(
      buf, sizeof buf,
      "%s gate: BF16 calibration (%s; %lld positions, KL(f32||bf16) mean %.3g max %.3g, top-1 %.4f, "
      "max |dlogit| %.3g): mean KL <= %.3g, top-1 >= %.4f, greedy identical up to a reference margin "
      "< delta = %.3g",
      folder.c_str(), n->versions.c_str(), static_cast<long long>(n->positions), n->mean_kl, n->max_kl,
      n->top1, n->max_abs_dlogit, g.max_mean_kl, g.min_top1, *g.delta);
  g.line = buf;
  return g;
}

}  // namespace bloomery::test
