// Roofline accounting for `bloomery bench` (see bench_bytes.h).
#include "tools/bench_bytes.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <regex>
#include <vector>

#include "formats/classify.h"
#ifdef BLOOMERY_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace bloomery::tools {
namespace {

int64_t cfg(const nlohmann::json& c, const char* key, int64_t def) {
  return c.contains(key) && c[key].is_number_integer() ? c[key].get<int64_t>() : def;
}

// The layer index of a "…layers.<i>.…" name, or -1.
int64_t layer_of(const std::string& name) {
  static const std::regex re(R"(layers\.(\d+)\.)");
  std::smatch m;
  return std::regex_search(name, m, re) ? std::stoll(m[1]) : -1;
}

// qwen3_next: full attention with a KV cache of kv_bytes a value, GDN with f32 recurrent and conv state (per
// sequence).
uint64_t qwen3_next_state(const nlohmann::json& c, int64_t depth, int kv_bytes) {
  const int64_t Hkv = cfg(c, "num_key_value_heads", 0), hd = cfg(c, "head_dim", 0);
  const int64_t Hv = cfg(c, "linear_num_value_heads", 0), dk = cfg(c, "linear_key_head_dim", 0),
                dv = cfg(c, "linear_value_head_dim", 0), Hk = cfg(c, "linear_num_key_heads", 0),
                ck = cfg(c, "linear_conv_kernel_dim", 4);
  uint64_t b = 0;
  for (const auto& t : c["layer_types"]) {
    if (t == "full_attention") {
      b += static_cast<uint64_t>(depth + 1) * Hkv * hd * 2 * kv_bytes;  // K and V read
    } else {
      b += static_cast<uint64_t>(Hv) * dk * dv * 4 * 2;                      // recurrent state read + written
      b += static_cast<uint64_t>(2 * Hk * dk + Hv * dv) * (ck - 1) * 4 * 2;  // conv state
    }
  }
  return b;
}

// qwen4_exp (models.md §3.10, as the engine keeps it: f32 caches): per GDN layer the recurrent and conv
// state read + written; per QSA layer the K and V rows the sparse selection attends (every visible token
// while the complete blocks fit the budget, else block_topk·compress + the tail), the pooled indexer keys
// scored, and the [1, S] selection mask written and read; per PLE layer its dilated conv history.
uint64_t qwen4_exp_state(const nlohmann::json& c, int64_t depth, int kv_bytes) {
  const int64_t Hkv = cfg(c, "num_key_value_heads", 0), hd = cfg(c, "head_dim", 0);
  const int64_t Hv = cfg(c, "linear_num_value_heads", 0), dk = cfg(c, "linear_key_head_dim", 0),
                dv = cfg(c, "linear_value_head_dim", 0), Hk = cfg(c, "linear_num_key_heads", 0),
                ck = cfg(c, "linear_conv_kernel_dim", 4);
  const int64_t dI = cfg(c, "indexer_head_dim", 0), budget = cfg(c, "indexer_budget", 0),
                ratio = std::max<int64_t>(1, cfg(c, "indexer_compress_ratio", 1));
  const int64_t D = cfg(c, "hidden_size", 0), n = cfg(c, "hc_count", 4),
                pk = cfg(c, "ple_conv_kernel_size", 4), ng = cfg(c, "ngram_size", 3);
  const int64_t S = depth + 1, nb = S / ratio, block_topk = budget / ratio;
  const int64_t attended = nb <= block_topk ? S : block_topk * ratio + S % ratio;
  uint64_t b = 0;
  for (const auto& t : c["layer_types"]) {
    if (t == "linear_attention") {
      b += static_cast<uint64_t>(Hv) * dk * dv * 4 * 2;
      b += static_cast<uint64_t>(2 * Hk * dk + Hv * dv) * (ck - 1) * 4 * 2;
    } else {
      b += static_cast<uint64_t>(attended + 1) * Hkv * hd * 2 *
           kv_bytes;                                         // K, V read (+ this token's written)
      b += static_cast<uint64_t>(nb + 1) * dI * 4 + dI * 4;  // block keys scored, raw key written
      b += static_cast<uint64_t>(S) * 4 * 2;                 // selection mask written and read
    }
  }
  if (c.contains("ple_layer_ids") && c["ple_layer_ids"].is_array())
    b += c["ple_layer_ids"].size() * static_cast<uint64_t>(n * D * (pk - 1) * ng) * 4 * 2;
  return b;
}

}  // namespace

std::vector<WeightCost> weight_costs(const LoadedModel& lm) {
  std::vector<WeightCost> out;
  // A TP rank: its jobs' read bytes are its slices' (the whole tensor's for a replicated one).
  if (lm.config.tp_size > 1) {
    for (const WeightJob& j : lm.jobs) {
      uint64_t n = 1;
      for (int64_t x : j.shape) n *= static_cast<uint64_t>(x);
      const uint64_t rows = j.shape.empty() ? 1 : static_cast<uint64_t>(j.shape[0]);
      out.push_back({j.name, j.record->module, rows, j.read_bytes, n * 4});
    }
    return out;
  }
  for (const WeightRecord& r : lm.checkpoint.weights) {
    if (r.skipped) continue;
    out.push_back({r.name, r.module, r.rows(), r.stored_bytes(), r.rows() * r.cols() * 4});
  }
  return out;
}

namespace {

// The head counts of one TP rank's share of the recurrent state and KV cache (models.md §2.7, §3.12).
nlohmann::json rank_heads(const nlohmann::json& c, int tp) {
  if (tp <= 1) return c;
  nlohmann::json r = c;
  for (const char* k : {"linear_num_key_heads", "linear_num_value_heads"})
    if (r.contains(k) && r[k].is_number_integer()) r[k] = r[k].get<int64_t>() / tp;
  const int64_t hkv = cfg(c, "num_key_value_heads", 0);
  if (hkv > 0) r["num_key_value_heads"] = hkv % tp == 0 ? hkv / tp : 1;
  return r;
}

}  // namespace

DecodeBytes decode_bytes(const std::vector<WeightCost>& weights, const std::string& family,
                         const nlohmann::json& config, const std::string& backend, int64_t depth,
                         int64_t conc, int tp_size, int kv_bytes) {
  const nlohmann::json c = rank_heads(config, tp_size);
  const int64_t L = cfg(c, "num_hidden_layers", 0);
  const int64_t top_k = cfg(c, "num_experts_per_tok", 1);
  const int64_t ple_rows = (cfg(c, "ngram_size", 3) - 1) * cfg(c, "heads_per_ngram", 8);
  DecodeBytes b;
  std::map<std::string, std::pair<uint64_t, int>> containers;  // container → (bytes of all experts, experts)
  for (const WeightCost& r : weights) {
    if (r.name.rfind("mtp.", 0) == 0) continue;    // Qwen draft layer
    if (L > 0 && layer_of(r.name) >= L) continue;  // GLM NextN layer sits at index num_hidden_layers
    const uint64_t bytes = backend == "cpu" ? r.f32 : r.stored;
    std::string container, proj;
    int e = 0;
    if (parse_expert_module(r.module, &container, &e, &proj)) {
      auto& slot = containers[container];
      slot.first += bytes;
      slot.second = std::max(slot.second, e + 1);
    } else if (r.name.find("embed_tokens") != std::string::npos && r.rows > 0) {
      b.dense += bytes / r.rows * conc;  // a gather reads one row per sequence
    } else if (r.name.find("ngram_embedding") != std::string::npos && r.rows > 0) {
      b.dense += r.stored / r.rows * ple_rows * conc;  // the PLE table: G hashed rows per token, as stored
    } else {
      b.dense += bytes;
    }
  }
  for (const auto& [name, s] : containers) {
    if (s.second <= 0) continue;
    const double E = s.second, k = std::min<double>(top_k, E);
    const double U = E * (1.0 - std::pow(1.0 - k / E, static_cast<double>(conc)));
    b.unique_experts = U;
    b.experts += static_cast<uint64_t>(std::llround(static_cast<double>(s.first) / E * U));
  }
  if (c.contains("layer_types") && c["layer_types"].is_array()) {
    if (family == "qwen3_next") {
      b.state = qwen3_next_state(c, depth, kv_bytes) * conc;
      b.state_known = true;
    } else if (family == "qwen4_exp") {
      b.state = qwen4_exp_state(c, depth, kv_bytes) * conc;
      b.state_known = true;
    }
  }
  return b;
}

DecodeBytes verify_bytes(const std::vector<WeightCost>& weights, const std::string& family,
                         const nlohmann::json& config, const std::string& backend, int64_t depth,
                         int64_t rows, int tp_size, int kv_bytes) {
  DecodeBytes b = decode_bytes(weights, family, config, backend, depth, rows, tp_size, kv_bytes);
  b.state = decode_bytes(weights, family, config, backend, depth, 1, tp_size, kv_bytes).state;
  return b;
}

double copy_bandwidth(const std::string& backend) {
  using Clock = std::chrono::steady_clock;
  if (backend == "cuda") {
#ifdef BLOOMERY_HAVE_CUDA
    const size_t bytes = size_t{2} << 30;  // 2 GiB each way: far beyond every cache
    void *a = nullptr, *d = nullptr;
    if (cudaMalloc(&a, bytes) != cudaSuccess) return 0.0;
    if (cudaMalloc(&d, bytes) != cudaSuccess) {
      cudaFree(a);
      return 0.0;
    }
    double best = 0.0;
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    bool ok = cudaMemset(a, 1, bytes) == cudaSuccess && cudaEventCreate(&e0) == cudaSuccess &&
              cudaEventCreate(&e1) == cudaSuccess &&
              cudaMemcpy(d, a, bytes, cudaMemcpyDeviceToDevice) == cudaSuccess;  // warm-up
    for (int trial = 0; ok && trial < 5; ++trial) {  // best of five runs of 4 copies
      const int iters = 4;
      ok = cudaEventRecord(e0) == cudaSuccess;
      for (int i = 0; ok && i < iters; ++i)
        ok = cudaMemcpyAsync(d, a, bytes, cudaMemcpyDeviceToDevice) == cudaSuccess;
      float ms = 0;
      ok = ok && cudaEventRecord(e1) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess &&
           cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess;
      if (ok && ms > 0) best = std::max(best, 2.0 * bytes * iters / (ms * 1e-3));
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(d);
    return best;
#else
    return 0.0;
#endif
  }
  const size_t bytes = size_t{256} << 20;
  std::vector<char> a(bytes, 1), d(bytes);
  std::memcpy(d.data(), a.data(), bytes);
  double best = 0.0;
  for (int trial = 0; trial < 3; ++trial) {
    auto t0 = Clock::now();
    std::memcpy(d.data(), a.data(), bytes);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (s > 0) best = std::max(best, 2.0 * bytes / s);
  }
  volatile char sink = d[bytes / 2];
  (void)sink;
  return best;
}

}  // namespace bloomery::tools
