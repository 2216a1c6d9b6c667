// qwen4_exp PLE: follows transformers' Qwen4ExpTextNGramEmbedding / Qwen4ExpTextPLELayer, f32 math.
#include "backend/cpu/ple.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/hyper_connections.h"

namespace bloomery::cpu {

namespace {
constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kPrime1 = 10007;

bool is_prime(int64_t v) {
  if (v < 2) return false;
  if (v % 2 == 0) return v == 2;
  for (int64_t d = 3; d * d <= v; d += 2)
    if (v % d == 0) return false;
  return true;
}

void matvec(const float* W, const float* x, int out, int in, float* y) {
  for (int o = 0; o < out; ++o) {
    const float* row = W + static_cast<int64_t>(o) * in;
    double acc = 0;
    for (int i = 0; i < in; ++i) acc += static_cast<double>(row[i]) * x[i];
    y[o] = static_cast<float>(acc);
  }
}
}  // namespace

uint64_t splitmix64(uint64_t v) {
  v += kGamma;
  v = (v ^ (v >> 30)) * 0xBF58476D1CE4E5B9ull;
  v = (v ^ (v >> 27)) * 0x94D049BB133111EBull;
  return v ^ (v >> 31);
}

PleHash make_ple_hash(int64_t vocab, int ngram_size, int heads_per_ngram, int64_t ngram_vocab_base,
                      int64_t divisor, int64_t seed, int ple_index, int64_t eos) {
  PleHash h;
  h.ngram_size = ngram_size;
  h.heads_per_ngram = heads_per_ngram;
  h.eos = eos;
  const uint64_t max_long = (uint64_t{1} << 63) - 1;
  const uint64_t mult_max = max_long / static_cast<uint64_t>(vocab > 1 ? vocab : 1);
  const uint64_t half = mult_max / 2 > 0 ? mult_max / 2 : 1;
  const uint64_t base_seed = static_cast<uint64_t>(seed) + kPrime1 * static_cast<uint64_t>(ple_index);
  for (int q = 0; q < ngram_size; ++q)
    h.multipliers.push_back(
        static_cast<int64_t>(2 * (splitmix64(base_seed + kGamma * static_cast<uint64_t>(q + 1)) % half) + 1));
  const int G = (ngram_size - 1) * heads_per_ngram;
  // Head j of layer p uses the (p*G + j + 1)-th prime >= base; consecutive heads continue the same prime
  // walk.
  int64_t prime = ngram_vocab_base - 1;
  for (int i = 0; i < ple_index * G; ++i) {
    ++prime;
    while (!is_prime(prime)) ++prime;
  }
  int64_t total = 0;
  for (int j = 0; j < G; ++j) {
    ++prime;
    while (!is_prime(prime)) ++prime;
    h.head_sizes.push_back(prime);
    h.head_offsets.push_back(total);
    total += prime;
  }
  h.padded_rows = (total + divisor - 1) / divisor * divisor;
  return h;
}

PleContext ple_context_start(const PleHash& h) {
  return PleContext{std::vector<int64_t>(h.ngram_size - 1, h.eos)};
}

void ple_rows_and_advance(const PleHash& h, PleContext& ctx, int64_t tok, int64_t* rows) {
  const int c = h.ngram_size - 1;
  // tok_s is the id s positions back, replaced by EOS when any EOS lies in positions t-s .. t-1.
  std::vector<int64_t> shifted(h.ngram_size);
  shifted[0] = tok;
  bool eos_seen = false;
  for (int s = 1; s <= c; ++s) {
    const int64_t id = ctx.prev[c - s];
    eos_seen = eos_seen || id == h.eos;
    shifted[s] = eos_seen ? h.eos : id;
  }
  int j = 0;
  for (int order = 2; order <= h.ngram_size; ++order) {
    int64_t mixed = shifted[0] * h.multipliers[0];
    for (int q = 1; q < order; ++q) mixed ^= shifted[q] * h.multipliers[q];
    for (int jj = 0; jj < h.heads_per_ngram; ++jj, ++j) {
      int64_t r = mixed % h.head_sizes[j];
      if (r < 0) r += h.head_sizes[j];  // torch.remainder takes the divisor's sign
      rows[j] = r + h.head_offsets[j];
    }
  }
  for (int i = 0; i + 1 < c; ++i) ctx.prev[i] = ctx.prev[i + 1];
  if (c > 0) ctx.prev[c - 1] = tok;
}

PleConvState ple_conv_start(const PleWeights& w) {
  return PleConvState{std::vector<float>(static_cast<size_t>((w.K - 1) * w.dilation) * w.n * w.D, 0.0f)};
}

void ple_forward_token(const PleWeights& w, const float* e, const float* X, PleConvState& conv, float* out) {
  const int n = w.n, D = w.D, nD = n * D;
  std::vector<float> key(nD), kn(nD), value(D), qn(nD), G(nD), Gn(nD);
  matvec(w.key_proj, e, nD, w.E, key.data());
  grouped_rmsnorm1p(key.data(), w.norm_key, n, D, w.eps, kn.data());
  matvec(w.value_proj, e, D, w.E, value.data());
  grouped_rmsnorm1p(X, w.norm_query, n, D, w.eps, qn.data());
  for (int s = 0; s < n; ++s) {
    double dot = 0;
    for (int d = 0; d < D; ++d) dot += static_cast<double>(kn[s * D + d]) * qn[s * D + d];
    float g = static_cast<float>(dot) / std::sqrt(static_cast<float>(D));
    const float sign = g > 0 ? 1.0f : (g < 0 ? -1.0f : 0.0f);
    g = std::sqrt(std::max(std::fabs(g), 1e-6f)) * sign;
    const float gate = 1.0f / (1.0f + std::exp(-g));
    for (int d = 0; d < D; ++d) G[s * D + d] = gate * value[d];
  }
  grouped_rmsnorm1p(G.data(), w.norm_conv, n, D, w.eps, Gn.data());
  const int hist_rows = (w.K - 1) * w.dilation;
  for (int c = 0; c < nD; ++c) {
    // tap j reads Gn at t - (K-1-j)*dilation; the newest tap is the current row.
    float acc = w.conv[static_cast<int64_t>(c) * w.K + (w.K - 1)] * Gn[c];
    for (int j = 0; j < w.K - 1; ++j) {
      const int back = (w.K - 1 - j) * w.dilation;  // rows back from t
      acc += w.conv[static_cast<int64_t>(c) * w.K + j] *
             conv.hist[static_cast<size_t>(hist_rows - back) * nD + c];
    }
    out[c] = G[c] + acc / (1.0f + std::exp(-acc));
  }
  if (hist_rows > 0) {
    std::memmove(conv.hist.data(), conv.hist.data() + nD,
                 sizeof(float) * static_cast<size_t>(hist_rows - 1) * nD);
    std::memcpy(conv.hist.data() + static_cast<size_t>(hist_rows - 1) * nD, Gn.data(), sizeof(float) * nD);
  }
}

}  // namespace bloomery::cpu

// ---- CpuFamilyOps overrides
// ----------------------------------------------------------------------------------
#include "backend/backend.h"
#include "backend/cpu/cpu_family_ops.h"

namespace bloomery::cpu {

void CpuFamilyOps::ple_gate(Tensor& G, const Tensor& kn, const Tensor& qn, const Tensor& v) {
  const int64_t T = v.rows(), D = v.cols();
  const int64_t n = G.numel() / (T * D);
  if (G.numel() != T * n * D || kn.numel() != G.numel() || qn.numel() != G.numel())
    backend_shape_error("ple_gate", "G, kn, qn [T, n*D] for v " + v.shape_str(),
                        G.shape_str() + ", " + kn.shape_str() + ", " + qn.shape_str());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t s = 0; s < n; ++s) {
      const float* k = kn.f32() + (t * n + s) * D;
      const float* q = qn.f32() + (t * n + s) * D;
      float dot = 0;
      for (int64_t d = 0; d < D; ++d) dot += k[d] * q[d];
      float g = dot / std::sqrt(static_cast<float>(D));
      const float sign = g > 0 ? 1.0f : (g < 0 ? -1.0f : 0.0f);
      g = std::sqrt(std::max(std::fabs(g), 1e-6f)) * sign;
      const float gate = 1.0f / (1.0f + std::exp(-g));
      float* out = G.f32() + (t * n + s) * D;
      for (int64_t d = 0; d < D; ++d) out[d] = gate * v.f32()[t * D + d];
    }
}

}  // namespace bloomery::cpu
