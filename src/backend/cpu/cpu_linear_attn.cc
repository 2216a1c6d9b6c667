// Causal depthwise conv1d with carried state, and the gated delta rule (GDN) in its recurrent (decode) and
// chunked (prompt) forms, f32 state, following transformers' torch_{recurrent,chunk}_gated_delta_rule.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/op_checks.h"

namespace bloomery::cpu {

void CpuBackend::causal_conv1d(Tensor& out, const Tensor& x, const Weight& w, Tensor& state, int dilation,
                               Act act) {
  check_causal_conv1d_args(out, x, w, state, dilation);
  const int64_t T = x.rows(), C = x.cols(), K = w.cols(), P = (K - 1) * dilation;
  const float *X = x.f32(), *W = w.dense().f32();
  float *S = state.f32(), *O = out.f32();
  owned_pool_->parallel_for(C, [&](int64_t c0, int64_t c1) {
    std::vector<float> ext(P + T);
    for (int64_t c = c0; c < c1; ++c) {
      for (int64_t i = 0; i < P; ++i) ext[i] = S[c * P + i];
      for (int64_t t = 0; t < T; ++t) ext[P + t] = X[t * C + c];
      const float* wc = W + c * K;
      for (int64_t t = 0; t < T; ++t) {
        float acc = 0.0f;
        for (int64_t j = 0; j < K; ++j) acc += wc[j] * ext[P + t - (K - 1 - j) * dilation];
        O[t * C + c] = act_apply(act, acc);
      }
      for (int64_t i = 0; i < P; ++i) S[c * P + i] = ext[T + i];
    }
  });
}

void CpuBackend::gdn_gates(Tensor& g, Tensor& beta, const Tensor& a, const Tensor& b, const Weight& A_log,
                           const Weight& dt_bias) {
  const int64_t Hv = A_log.numel(), T = check_gdn_gates_args(g, beta, a, b, A_log, dt_bias);
  const float *A = A_log.dense().f32(), *Db = dt_bias.dense().f32();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < Hv; ++h) {
      const int64_t i = t * Hv + h;
      g.f32()[i] = -std::exp(A[h]) * act_apply(Act::Softplus, a.f32()[i] + Db[h]);
      beta.f32()[i] = act_apply(Act::Sigmoid, b.f32()[i]);
    }
}

namespace {

struct GdnDims {
  int64_t T, Hk, Hv, dk, dv;
};

// q, k of value head h at token t, normalised and scaled into qb/kb (dk each).
void load_qk(const GdnDims& d, const float* Q, const float* K, int64_t t, int64_t kh, bool l2, float* qb,
             float* kb) {
  const float* q = Q + (t * d.Hk + kh) * d.dk;
  const float* k = K + (t * d.Hk + kh) * d.dk;
  float qs = 1.0f, ks = 1.0f;
  if (l2) {
    float sq = 0.0f, sk = 0.0f;
    for (int64_t i = 0; i < d.dk; ++i) {
      sq += q[i] * q[i];
      sk += k[i] * k[i];
    }
    qs = 1.0f / std::sqrt(sq + 1e-6f);
    ks = 1.0f / std::sqrt(sk + 1e-6f);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.dk));
  for (int64_t i = 0; i < d.dk; ++i) {
    qb[i] = (q[i] * qs) * scale;
    kb[i] = k[i] * ks;
  }
}

void gdn_recurrent_head(const GdnDims& d, int64_t h, const float* Q, const float* K, const float* V,
                        const float* G, const float* B, float* S, float* O, bool l2) {
  const int64_t kh = h / (d.Hv / d.Hk);
  std::vector<float> q(d.dk), k(d.dk), mem(d.dv);
  for (int64_t t = 0; t < d.T; ++t) {
    load_qk(d, Q, K, t, kh, l2, q.data(), k.data());
    const float* v = V + (t * d.Hv + h) * d.dv;
    const float decay = std::exp(G[t * d.Hv + h]);
    const float beta = B[t * d.Hv + h];
    for (int64_t i = 0; i < d.dk * d.dv; ++i) S[i] *= decay;
    std::fill(mem.begin(), mem.end(), 0.0f);
    for (int64_t a = 0; a < d.dk; ++a)
      for (int64_t b = 0; b < d.dv; ++b) mem[b] += S[a * d.dv + b] * k[a];
    for (int64_t b = 0; b < d.dv; ++b) mem[b] = (v[b] - mem[b]) * beta;  // delta
    for (int64_t a = 0; a < d.dk; ++a)
      for (int64_t b = 0; b < d.dv; ++b) S[a * d.dv + b] += k[a] * mem[b];
    float* o = O + (t * d.Hv + h) * d.dv;
    std::fill(o, o + d.dv, 0.0f);
    for (int64_t a = 0; a < d.dk; ++a)
      for (int64_t b = 0; b < d.dv; ++b) o[b] += S[a * d.dv + b] * q[a];
  }
}

// One head, chunks of `C` tokens: the UT transform (unit lower triangular solve), then the inter-chunk scan.
void gdn_chunked_head(const GdnDims& d, int64_t h, const float* Q, const float* K, const float* V,
                      const float* G, const float* B, float* S, float* O, bool l2, int64_t C) {
  const int64_t kh = h / (d.Hv / d.Hk), dk = d.dk, dv = d.dv;
  std::vector<float> q(C * dk), k(C * dk), vb(C * dv), kbd(C * dk), cum(C), ut(C * C), attn(C * C),
      vnew(C * dv);
  for (int64_t c0 = 0; c0 < d.T; c0 += C) {
    const int64_t L = std::min(C, d.T - c0);
    float acc = 0.0f;
    for (int64_t i = 0; i < L; ++i) {
      const int64_t t = c0 + i;
      load_qk(d, Q, K, t, kh, l2, q.data() + i * dk, k.data() + i * dk);
      acc += G[t * d.Hv + h];
      cum[i] = acc;
      const float beta = B[t * d.Hv + h];
      const float* v = V + (t * d.Hv + h) * dv;
      for (int64_t b = 0; b < dv; ++b) vb[i * dv + b] = v[b] * beta;
      const float e = std::exp(cum[i]);
      for (int64_t a = 0; a < dk; ++a) kbd[i * dk + a] = (k[i * dk + a] * beta) * e;
    }
    // ut[i][j] = (β_i k_i · k_j) Γ_ij and attn[i][j] = (q_i · k_j) Γ_ij for j ≤ i.
    for (int64_t i = 0; i < L; ++i) {
      const float beta = B[(c0 + i) * d.Hv + h];
      for (int64_t j = 0; j <= i; ++j) {
        float skk = 0.0f, sqk = 0.0f;
        for (int64_t a = 0; a < dk; ++a) {
          skk += (k[i * dk + a] * beta) * k[j * dk + a];
          sqk += q[i * dk + a] * k[j * dk + a];
        }
        const float gamma = std::exp(cum[i] - cum[j]);
        ut[i * C + j] = skk * gamma;
        attn[i * C + j] = sqk * gamma;
      }
    }
    // Forward substitution with the unit lower matrix I + strict_lower(ut): rows of vb and kbd in place.
    for (int64_t i = 1; i < L; ++i)
      for (int64_t j = 0; j < i; ++j) {
        const float l = ut[i * C + j];
        for (int64_t b = 0; b < dv; ++b) vb[i * dv + b] -= l * vb[j * dv + b];
        for (int64_t a = 0; a < dk; ++a) kbd[i * dk + a] -= l * kbd[j * dk + a];
      }
    // v_new = U − W S
    for (int64_t i = 0; i < L; ++i)
      for (int64_t b = 0; b < dv; ++b) {
        float s = 0.0f;
        for (int64_t a = 0; a < dk; ++a) s += kbd[i * dk + a] * S[a * dv + b];
        vnew[i * dv + b] = vb[i * dv + b] - s;
      }
    // out = (q ⊙ e^γ) S + attn v_new
    for (int64_t i = 0; i < L; ++i) {
      float* o = O + ((c0 + i) * d.Hv + h) * dv;
      const float e = std::exp(cum[i]);
      for (int64_t b = 0; b < dv; ++b) {
        float s = 0.0f;
        for (int64_t a = 0; a < dk; ++a) s += (q[i * dk + a] * e) * S[a * dv + b];
        float s2 = 0.0f;
        for (int64_t j = 0; j <= i; ++j) s2 += attn[i * C + j] * vnew[j * dv + b];
        o[b] = s + s2;
      }
    }
    // S ← e^{γ_last} S + (k ⊙ e^{γ_last − γ})ᵀ v_new
    const float last = cum[L - 1], chunk_decay = std::exp(last);
    for (int64_t i = 0; i < dk * dv; ++i) S[i] *= chunk_decay;
    for (int64_t i = 0; i < L; ++i) {
      const float e = std::exp(last - cum[i]);
      for (int64_t a = 0; a < dk; ++a) {
        const float ka = k[i * dk + a] * e;
        for (int64_t b = 0; b < dv; ++b) S[a * dv + b] += ka * vnew[i * dv + b];
      }
    }
  }
}

}  // namespace

void CpuBackend::gated_delta_rule(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& g, const Tensor& beta, Tensor& state, bool l2norm_qk,
                                  bool chunked) {
  const GdnShape s = check_gated_delta_args(out, q, k, v, g, beta, state);
  GdnDims d{s.T, s.Hk, s.Hv, s.dk, s.dv};
  const float *Q = q.f32(), *K = k.f32(), *V = v.f32(), *G = g.f32(), *Bt = beta.f32();
  float *S = state.f32(), *O = out.f32();
  owned_pool_->parallel_for(d.Hv, [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h) {
      float* Sh = S + h * d.dk * d.dv;
      if (chunked)
        gdn_chunked_head(d, h, Q, K, V, G, Bt, Sh, O, l2norm_qk, 64);
      else
        gdn_recurrent_head(d, h, Q, K, V, G, Bt, Sh, O, l2norm_qk);
    }
  });
}

}  // namespace bloomery::cpu
