// glm5_next MLA + DSA indexer; follows transformers' Glm5NextTextIndexer / Glm5NextTextAttention per query.
#include "backend/cpu/mla_dsa.h"

#include <algorithm>
#include <cmath>

#include "backend/backend.h"
#include "backend/cpu/cache_element.h"
#include "backend/cpu/cpu_family_ops.h"
#include "backend/cpu/qsa.h"

namespace bloomery::cpu {

void dsa_indexer_append(const DsaIndexerConfig& c, DsaIndexerState& st, const float* k, const float* gs) {
  const int d = c.head_dim, P = c.pool;
  st.k.insert(st.k.end(), k, k + d);
  st.gs.insert(st.gs.end(), gs, gs + d);
  ++st.tokens;
  if (st.tokens % P != 0) return;
  const int64_t first = st.tokens - P;
  // Per channel, a softmax over the pool's members of (gs + ape) weights their keys.
  for (int j = 0; j < d; ++j) {
    float mx = -INFINITY;
    for (int m = 0; m < P; ++m) mx = std::max(mx, st.gs[(first + m) * d + j] + c.ape[m * d + j]);
    float sum = 0, acc = 0;
    std::vector<float> e(P);
    for (int m = 0; m < P; ++m) sum += (e[m] = std::exp(st.gs[(first + m) * d + j] + c.ape[m * d + j] - mx));
    for (int m = 0; m < P; ++m) acc += (e[m] / sum) * st.k[(first + m) * d + j];
    st.pools.push_back(acc);
  }
}

void dsa_indexer_select(const DsaIndexerConfig& c, const DsaIndexerState& st, const float* qi,
                        const float* wts, int64_t t, DsaSelection& sel) {
  const int d = c.head_dim, P = c.pool;
  const int64_t visible = t + 1;
  const int64_t np = visible / P;  // pools whose last member is <= t
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<float> scores(np);
  for (int64_t p = 0; p < np; ++p) {
    const float* kp = &st.pools[p * d];
    float total = 0;
    for (int h = 0; h < c.n_heads; ++h) {
      float dot = 0;
      for (int j = 0; j < d; ++j) dot += qi[h * d + j] * kp[j];
      total += wts[h] * std::max(dot * scale, 0.0f);
    }
    scores[p] = total;
  }
  bool tie = false;
  const auto top = stable_topk(scores, std::min<int64_t>(c.topk / P, np), &tie);
  sel.tie = tie;
  sel.tokens.clear();
  for (int64_t p : top)
    for (int m = 0; m < P; ++m) sel.tokens.push_back(p * P + m);
  for (int64_t x = np * P; x < visible; ++x) sel.tokens.push_back(x);
}

}  // namespace bloomery::cpu

// ---- CpuFamilyOps overrides ----

namespace bloomery::cpu {

void CpuFamilyOps::dsa_index_append(Tensor& keys, Tensor& gates, Tensor& pools, const Tensor& k,
                                    const Tensor& gs, int64_t pos0, const Weight& ape) {
  const int64_t T = k.rows(), d = k.cols(), P = ape.rows();
  if (gs.numel() != k.numel() || keys.cols() != d || gates.cols() != d || pools.cols() != d ||
      pos0 + T > keys.rows() || ape.cols() != d)
    backend_shape_error("dsa_index_append", "k, gs [T, dI]; keys/gates [cap, dI]; ape [P, dI]",
                        k.shape_str() + ", " + keys.shape_str() + ", " + shape_string(ape.shape()));
  std::copy(k.f32(), k.f32() + T * d, keys.f32() + pos0 * d);
  std::copy(gs.f32(), gs.f32() + T * d, gates.f32() + pos0 * d);
  DsaIndexerConfig cfg;
  cfg.head_dim = static_cast<int>(d);
  cfg.pool = static_cast<int>(P);
  cfg.ape = ape.dense().f32();
  for (int64_t end = pos0 + 1; end <= pos0 + T; ++end) {
    if (end % P != 0) continue;
    const int64_t first = end - P;
    DsaIndexerState st;  // one pool's members only
    for (int64_t m = 0; m < P; ++m)
      dsa_indexer_append(cfg, st, keys.f32() + (first + m) * d, gates.f32() + (first + m) * d);
    std::copy(st.pools.begin(), st.pools.end(), pools.f32() + (first / P) * d);
  }
}

int64_t CpuFamilyOps::dsa_index_select(Tensor& allowed, const Tensor& qi, const Tensor& wts,
                                       const Tensor& pools, int64_t q0, int pool, int topk) {
  const int64_t T = qi.dim(0), Hi = qi.dim(1), d = qi.dim(2), S = allowed.cols();
  if (allowed.rows() != T || S < q0 + T || wts.numel() != T * Hi || pools.cols() != d)
    backend_shape_error("dsa_index_select", "allowed [T, >=q0+T], wts [T, Hi]",
                        allowed.shape_str() + ", " + wts.shape_str());
  DsaIndexerConfig cfg;
  cfg.n_heads = static_cast<int>(Hi);
  cfg.head_dim = static_cast<int>(d);
  cfg.pool = pool;
  cfg.topk = topk;
  DsaIndexerState st;
  st.pools.assign(pools.f32(), pools.f32() + ((q0 + T) / pool) * d);
  std::fill(allowed.f32(), allowed.f32() + T * S, 0.0f);
  int64_t ties = 0;
  DsaSelection sel;
  for (int64_t t = 0; t < T; ++t) {
    dsa_indexer_select(cfg, st, qi.f32() + t * Hi * d, wts.f32() + t * Hi, q0 + t, sel);
    ties += sel.tie ? 1 : 0;
    for (int64_t p : sel.tokens) allowed.f32()[t * S + p] = 1.0f;
  }
  return ties;
}

namespace {

template <typename C>
void mla_attend(ThreadPool& pool, float* O, const float* Q, const C* lat, const float* A, const float* Wkv,
                int64_t T, int64_t H, int64_t dq, int64_t dv, int64_t L, int64_t S, int64_t q0, float scale) {
  pool.parallel_for(T * H, [&](int64_t i0, int64_t i1) {
    std::vector<float> qt(L), oc(L), p;
    std::vector<int64_t> sel;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i / H, h = i % H;
      sel.clear();
      for (int64_t j = 0; j <= q0 + t; ++j)
        if (A[t * S + j] != 0.0f) sel.push_back(j);
      const float* Wuk = Wkv + h * (dq + dv) * L;
      const float* Wuv = Wuk + dq * L;
      const float* qh = Q + (t * H + h) * dq;
      std::fill(qt.begin(), qt.end(), 0.0f);
      for (int64_t a = 0; a < dq; ++a)
        for (int64_t l = 0; l < L; ++l) qt[l] += qh[a] * Wuk[a * L + l];
      p.assign(sel.size(), 0.0f);
      float mx = -INFINITY;
      for (size_t j = 0; j < sel.size(); ++j) {
        const C* ct = lat + sel[j] * L;
        float dot = 0;
        for (int64_t l = 0; l < L; ++l) dot += qt[l] * cache_at(ct, l);
        p[j] = dot * scale;
        mx = std::max(mx, p[j]);
      }
      float sum = 0;
      for (float& x : p) sum += (x = std::exp(x - mx));
      std::fill(oc.begin(), oc.end(), 0.0f);
      for (size_t j = 0; j < sel.size(); ++j) {
        const C* ct = lat + sel[j] * L;
        for (int64_t l = 0; l < L; ++l) oc[l] += (p[j] / sum) * cache_at(ct, l);
      }
      float* oh = O + (t * H + h) * dv;
      for (int64_t a = 0; a < dv; ++a) {
        float acc = 0;
        for (int64_t l = 0; l < L; ++l) acc += Wuv[a * L + l] * oc[l];
        oh[a] = sel.empty() ? 0.0f : acc;
      }
    }
  });
}

}  // namespace

void CpuFamilyOps::mla_attention(Tensor& out, const Tensor& q, const Tensor& latent, const Weight& kv_b,
                                 int64_t q0, float scale, const Tensor& allowed) {
  const int64_t T = q.dim(0), H = q.dim(1), dq = q.dim(2), L = latent.cols(), S = allowed.cols();
  const int64_t dv = out.numel() / (T * H);
  if (kv_b.rows() != H * (dq + dv) || kv_b.cols() != L || allowed.rows() != T || latent.rows() < S ||
      S < q0 + T || latent.type() == ElemType::I32)
    backend_shape_error("mla_attention", "kv_b [H*(dqk+dv), L], allowed [T, S], latent [>=S, L] f32 or bf16",
                        shape_string(kv_b.shape()) + ", " + allowed.shape_str() + ", " + latent.shape_str());
  const float* Wkv = kv_b.dense().f32();
  if (latent.type() == ElemType::BF16)
    mla_attend(pool(), out.f32(), q.f32(), latent.bf16(), allowed.f32(), Wkv, T, H, dq, dv, L, S, q0, scale);
  else
    mla_attend(pool(), out.f32(), q.f32(), latent.f32(), allowed.f32(), Wkv, T, H, dq, dv, L, S, q0, scale);
}

}  // namespace bloomery::cpu
