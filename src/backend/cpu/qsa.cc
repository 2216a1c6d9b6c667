// qwen4_exp QSA indexer and sparse attention; mirrors transformers' Qwen4ExpTextQSAIndexer per query.
#include "backend/cpu/qsa.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/backend.h"
#include "backend/cpu/cpu_family_ops.h"
#include "backend/cpu/hyper_connections.h"

namespace bloomery::cpu {

void rope_neox(float* x, int rot, int64_t pos, float theta) {
  const int half = rot / 2;
  for (int i = 0; i < half; ++i) {
    const float inv_freq = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(rot));
    const float ang = static_cast<float>(pos) * inv_freq;
    const float c = std::cos(ang), s = std::sin(ang);
    const float a = x[i], b = x[i + half];
    x[i] = a * c - b * s;
    x[i + half] = b * c + a * s;
  }
}

void qsa_indexer_append(const QsaIndexerConfig& c, QsaIndexerState& st, const float* kraw) {
  const int d = c.head_dim;
  st.raw.insert(st.raw.end(), kraw, kraw + d);
  ++st.tokens;
  if (st.tokens % c.compress != 0) return;
  const int64_t first = st.tokens - c.compress;
  std::vector<float> mean(d, 0.0f), normed(d);
  for (int j = 0; j < d; ++j) {
    float acc = 0;
    for (int m = 0; m < c.compress; ++m) acc += st.raw[(first + m) * d + j];
    mean[j] = acc / static_cast<float>(c.compress);
  }
  grouped_rmsnorm1p(mean.data(), c.k_layernorm, 1, d, c.eps, normed.data());
  rope_neox(normed.data(), c.rot, first, c.theta);  // a block is rotated at its first token's position
  st.blocks.insert(st.blocks.end(), normed.begin(), normed.end());
}

std::vector<int64_t> stable_topk(const std::vector<float>& scores, int64_t k, bool* tie) {
  std::vector<int64_t> idx(scores.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
  k = std::min<int64_t>(k, static_cast<int64_t>(idx.size()));
  if (tie) *tie = k > 0 && k < static_cast<int64_t>(idx.size()) && scores[idx[k - 1]] == scores[idx[k]];
  idx.resize(k);
  return idx;
}

void qsa_indexer_select(const QsaIndexerConfig& c, const QsaIndexerState& st, const float* qi, int64_t t,
                        QsaSelection& sel) {
  const int d = c.head_dim;
  const int64_t visible = t + 1;
  const int64_t nb = visible / c.compress;
  std::vector<float> scores(nb);
  const float inv = 1.0f / std::sqrt(static_cast<float>(d));
  for (int64_t b = 0; b < nb; ++b) {
    const float* kb = &st.blocks[b * d];
    float total = 0;
    for (int h = 0; h < c.n_heads; ++h) {
      float dot = 0;
      for (int j = 0; j < d; ++j) dot += qi[h * d + j] * kb[j];
      total += std::max(dot, 0.0f);
    }
    scores[b] = total * inv;
  }
  bool tie = false;
  const auto top = stable_topk(scores, std::min<int64_t>(c.block_topk, nb), &tie);
  sel.tie = tie;
  sel.tokens.clear();
  for (int64_t b : top)
    for (int m = 0; m < c.compress; ++m) sel.tokens.push_back(b * c.compress + m);
  for (int64_t p = nb * c.compress; p < visible; ++p) sel.tokens.push_back(p);
}

void sparse_gated_gqa(const float* q, const float* K, const float* V, const std::vector<int64_t>& sel,
                      const float* gate, int H, int Hkv, int hd, float* out) {
  const int group = H / Hkv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> p(sel.size());
  for (int h = 0; h < H; ++h) {
    const int kvh = h / group;
    const float* qh = q + h * hd;
    float mx = -INFINITY;
    for (size_t i = 0; i < sel.size(); ++i) {
      const float* kt = K + (sel[i] * Hkv + kvh) * hd;
      float dot = 0;
      for (int j = 0; j < hd; ++j) dot += qh[j] * kt[j];
      p[i] = dot * scale;
      mx = std::max(mx, p[i]);
    }
    float sum = 0;
    for (float& x : p) sum += (x = std::exp(x - mx));
    float* oh = out + h * hd;
    std::fill(oh, oh + hd, 0.0f);
    for (size_t i = 0; i < sel.size(); ++i) {
      const float* vt = V + (sel[i] * Hkv + kvh) * hd;
      const float w = p[i] / sum;
      for (int j = 0; j < hd; ++j) oh[j] += w * vt[j];
    }
    if (gate)
      for (int j = 0; j < hd; ++j) oh[j] *= 1.0f / (1.0f + std::exp(-gate[h * hd + j]));
  }
}

}  // namespace bloomery::cpu

// ---- CpuFamilyOps overrides ----

namespace bloomery::cpu {

void CpuFamilyOps::qsa_index_append(Tensor& raw, Tensor& blocks, const Tensor& kraw, int64_t pos0,
                                    const Weight& k_norm, const QsaIndexSpec& spec) {
  const int64_t T = kraw.rows(), d = kraw.cols(), c = spec.compress;
  if (raw.cols() != d || blocks.cols() != d || pos0 + T > raw.rows() || k_norm.numel() != d)
    backend_shape_error(
        "qsa_index_append",
        "raw/blocks [cap, " + std::to_string(d) + "] holding positions up to " + std::to_string(pos0 + T),
        raw.shape_str() + ", " + blocks.shape_str());
  std::copy(kraw.f32(), kraw.f32() + T * d, raw.f32() + pos0 * d);
  std::vector<float> mean(d);
  for (int64_t end = pos0 + 1; end <= pos0 + T; ++end) {
    if (end % c != 0) continue;
    const int64_t first = end - c, b = first / c;
    if (b >= blocks.rows())
      backend_shape_error("qsa_index_append", "room for block " + std::to_string(b), blocks.shape_str());
    for (int64_t j = 0; j < d; ++j) {
      float acc = 0;
      for (int64_t m = 0; m < c; ++m) acc += raw.f32()[(first + m) * d + j];
      mean[j] = acc / static_cast<float>(c);
    }
    float* kb = blocks.f32() + b * d;
    grouped_rmsnorm1p(mean.data(), k_norm.dense().f32(), 1, static_cast<int>(d), spec.eps, kb);
    rope_neox(kb, spec.rot_dim, first + spec.pos_offset, static_cast<float>(spec.theta));
  }
}

int64_t CpuFamilyOps::qsa_index_select(Tensor& allowed, const Tensor& qi, const Tensor& blocks, int64_t q0,
                                       const QsaIndexSpec& spec) {
  const int64_t T = qi.dim(0), Hi = qi.dim(1), d = qi.dim(2), S = allowed.cols();
  if (allowed.rows() != T || S < q0 + T || blocks.cols() != d)
    backend_shape_error("qsa_index_select",
                        "allowed [" + std::to_string(T) + ", >=" + std::to_string(q0 + T) + "]",
                        allowed.shape_str());
  QsaIndexerConfig cfg;
  cfg.n_heads = static_cast<int>(Hi);
  cfg.head_dim = static_cast<int>(d);
  cfg.compress = spec.compress;
  cfg.block_topk = spec.block_topk;
  QsaIndexerState st;  // only the pooled blocks are read by the selection
  const int64_t nblocks = (q0 + T) / spec.compress;
  st.blocks.assign(blocks.f32(), blocks.f32() + nblocks * d);
  int64_t ties = 0;
  std::fill(allowed.f32(), allowed.f32() + T * S, 0.0f);
  QsaSelection sel;
  for (int64_t t = 0; t < T; ++t) {
    qsa_indexer_select(cfg, st, qi.f32() + t * Hi * d, q0 + t, sel);
    ties += sel.tie ? 1 : 0;
    for (int64_t p : sel.tokens) allowed.f32()[t * S + p] = 1.0f;
  }
  return ties;
}

}  // namespace bloomery::cpu
