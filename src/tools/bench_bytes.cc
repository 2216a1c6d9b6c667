// Roofline accounting for `bloomery bench` (see bench_bytes.h).
#include "tools/bench_bytes.h"

#include <algorithm>
#include <chrono>
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

}  // namespace

DecodeBytes decode_bytes(const LoadedModel& lm, const std::string& backend, int64_t depth) {
  const nlohmann::json& c = lm.config.text;
  const int64_t L = cfg(c, "num_hidden_layers", 0);
  const int64_t top_k = cfg(c, "num_experts_per_tok", 1);
  DecodeBytes b;
  std::map<std::string, std::pair<uint64_t, int>> containers;  // container → (bytes of all experts, experts)
  for (const WeightRecord& r : lm.checkpoint.weights) {
    if (r.skipped) continue;
    if (r.name.rfind("mtp.", 0) == 0) continue;    // Qwen draft layer
    if (L > 0 && layer_of(r.name) >= L) continue;  // GLM NextN layer sits at index num_hidden_layers
    const uint64_t bytes = backend == "cpu" ? r.rows() * r.cols() * 4 : r.stored_bytes();
    std::string container, proj;
    int e = 0;
    if (parse_expert_module(r.module, &container, &e, &proj)) {
      auto& slot = containers[container];
      slot.first += bytes;
      slot.second = std::max(slot.second, e + 1);
    } else if (r.name.find("embed_tokens") != std::string::npos && r.rows() > 0) {
      b.dense += bytes / r.rows();  // a gather reads one row
    } else {
      b.dense += bytes;
    }
  }
  for (const auto& [name, s] : containers)
    b.experts += s.second > 0 ? s.first / s.second * std::min<int64_t>(top_k, s.second) : 0;
  // State: qwen3_next-style schedules (full attention with an f32 KV cache, GDN with f32 recurrent state).
  if (lm.model->info().family == "qwen3_next" && c.contains("layer_types") && c["layer_types"].is_array()) {
    const int64_t Hkv = cfg(c, "num_key_value_heads", 0), hd = cfg(c, "head_dim", 0);
    const int64_t Hv = cfg(c, "linear_num_value_heads", 0), dk = cfg(c, "linear_key_head_dim", 0),
                  dv = cfg(c, "linear_value_head_dim", 0), Hk = cfg(c, "linear_num_key_heads", 0),
                  ck = cfg(c, "linear_conv_kernel_dim", 4);
    for (const auto& t : c["layer_types"]) {
      if (t == "full_attention") {
        b.state += static_cast<uint64_t>(depth + 1) * Hkv * hd * 2 * 4;  // K and V read, f32
      } else {
        b.state += static_cast<uint64_t>(Hv) * dk * dv * 4 * 2;  // recurrent state read + written
        b.state += static_cast<uint64_t>(2 * Hk * dk + Hv * dv) * (ck - 1) * 4 * 2;  // conv state
      }
    }
    b.state_known = true;
  }
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
    cudaMemset(a, 1, bytes);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaMemcpy(d, a, bytes, cudaMemcpyDeviceToDevice);  // warm-up
    const int iters = 10;
    cudaEventRecord(e0);
    for (int i = 0; i < iters; ++i) cudaMemcpyAsync(d, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(d);
    return ms > 0 ? 2.0 * bytes * iters / (ms * 1e-3) : 0.0;
#else
    return 0.0;
#endif
  }
  const size_t bytes = size_t{256} << 20;
  std::vector<char> a(bytes, 1), d(bytes);
  std::memcpy(d.data(), a.data(), bytes);
  const int iters = 4;
  auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) std::memcpy(d.data(), a.data(), bytes);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  volatile char sink = d[bytes / 2];
  (void)sink;
  return s > 0 ? 2.0 * bytes * iters / s : 0.0;
}

}  // namespace bloomery::tools
