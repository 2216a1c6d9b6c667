// glm5_next KDA recurrences; the chunked form mirrors transformers' chunk_kimi_delta_attention step by step.
#include "backend/cpu/kda.h"

#include <algorithm>
#include <cmath>
#include <vector>
#include "backend/backend.h"
#include "backend/cpu/cpu_family_ops.h"

namespace bloomery::cpu {

void kda_l2norm_rows(float* x, int64_t rows, int d, float eps, float scale) {
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * d;
    float ss = 0;
    for (int i = 0; i < d; ++i) ss += xr[i] * xr[i];
    const float nrm = std::sqrt(ss + eps);
    for (int i = 0; i < d; ++i) xr[i] = xr[i] / nrm * scale;
  }
}

void kda_gate(const float* f, const float* dt_bias, const float* A_log, int64_t T, int H, int dk,
              bool has_lower_bound, float lower_bound, float* g) {
  for (int64_t t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) {
      const float rate = std::exp(A_log[h]);
      for (int d = 0; d < dk; ++d) {
        const int64_t i = (t * H + h) * dk + d;
        const float x = f[i] + dt_bias[h * dk + d];
        if (has_lower_bound) {
          g[i] = lower_bound * (1.0f / (1.0f + std::exp(-(rate * x))));
        } else {
          const float sp = x > 20.0f ? x : std::log(1.0f + std::exp(x));
          g[i] = -rate * sp;
        }
      }
    }
}

void kda_recurrent(const KdaShape& s, const float* q, const float* k, const float* v, const float* g,
                   const float* beta, float* state, float* out) {
  const int H = s.H, dk = s.dk, dv = s.dv;
  std::vector<float> kv(dv);
  for (int64_t t = 0; t < s.T; ++t)
    for (int h = 0; h < H; ++h) {
      float* S = state + static_cast<int64_t>(h) * dk * dv;
      const float* qt = q + (t * H + h) * dk;
      const float* kt = k + (t * H + h) * dk;
      const float* vt = v + (t * H + h) * dv;
      const float* gt = g + (t * H + h) * dk;
      const float b = beta[t * H + h];
      for (int i = 0; i < dk; ++i) {
        const float dec = std::exp(gt[i]);
        for (int j = 0; j < dv; ++j) S[i * dv + j] *= dec;
      }
      std::fill(kv.begin(), kv.end(), 0.0f);
      for (int i = 0; i < dk; ++i)
        for (int j = 0; j < dv; ++j) kv[j] += S[i * dv + j] * kt[i];
      for (int j = 0; j < dv; ++j) kv[j] = (vt[j] - kv[j]) * b;
      for (int i = 0; i < dk; ++i)
        for (int j = 0; j < dv; ++j) S[i * dv + j] += kt[i] * kv[j];
      float* ot = out + (t * H + h) * dv;
      for (int j = 0; j < dv; ++j) {
        float acc = 0;
        for (int i = 0; i < dk; ++i) acc += S[i * dv + j] * qt[i];
        ot[j] = acc;
      }
    }
}

void kda_chunked(const KdaShape& s, const float* q, const float* k, const float* v, const float* g,
                 const float* beta, float* state, float* out, int C) {
  const int H = s.H, dk = s.dk, dv = s.dv;
  const int64_t T = s.T;
  std::vector<float> Q(C * dk), K(C * dk), V(C * dv), KB(C * dk), VB(C * dv), G(C * dk), B(C);
  std::vector<float> A(C * C), U(C * dv), W(C * dk), Vn(C * dv), decay(static_cast<size_t>(C) * C * dk);
  for (int h = 0; h < H; ++h) {
    float* S = state + static_cast<int64_t>(h) * dk * dv;
    for (int64_t c0 = 0; c0 < T; c0 += C) {
      const int n = static_cast<int>(std::min<int64_t>(C, T - c0));
      // Load the chunk (zero padding past T, as the reference pads), cumulative log-decay per channel.
      for (int i = 0; i < C; ++i) {
        const bool in = i < n;
        const int64_t t = c0 + i;
        B[i] = in ? beta[t * H + h] : 0.0f;
        for (int d = 0; d < dk; ++d) {
          Q[i * dk + d] = in ? q[(t * H + h) * dk + d] : 0.0f;
          K[i * dk + d] = in ? k[(t * H + h) * dk + d] : 0.0f;
          const float gi = in ? g[(t * H + h) * dk + d] : 0.0f;
          G[i * dk + d] = (i > 0 ? G[(i - 1) * dk + d] : 0.0f) + gi;
          KB[i * dk + d] = K[i * dk + d] * B[i];
        }
        for (int e = 0; e < dv; ++e) {
          V[i * dv + e] = in ? v[(t * H + h) * dv + e] : 0.0f;
          VB[i * dv + e] = V[i * dv + e] * B[i];
        }
      }
      for (int i = 0; i < C; ++i)
        for (int j = 0; j <= i; ++j)
          for (int d = 0; d < dk; ++d)
            decay[(static_cast<size_t>(i) * C + j) * dk + d] = std::exp(G[i * dk + d] - G[j * dk + d]);
      // A = -(strictly lower) k_beta_i . k_j . decay, then the forward substitution that yields (I + A')^-1.
      std::fill(A.begin(), A.end(), 0.0f);
      for (int i = 0; i < C; ++i)
        for (int j = 0; j < i; ++j) {
          float acc = 0;
          for (int d = 0; d < dk; ++d)
            acc += KB[i * dk + d] * K[j * dk + d] * decay[(static_cast<size_t>(i) * C + j) * dk + d];
          A[i * C + j] = -acc;
        }
      for (int i = 1; i < C; ++i) {
        std::vector<float> row(A.begin() + i * C, A.begin() + i * C + i);
        for (int j = 0; j < i; ++j) {
          float acc = 0;
          for (int m = 0; m < i; ++m) acc += row[m] * A[m * C + j];
          A[i * C + j] = row[j] + acc;
        }
      }
      for (int i = 0; i < C; ++i) A[i * C + i] += 1.0f;
      // U = A v_beta; W = A (k_beta * exp(G)).
      for (int i = 0; i < C; ++i) {
        for (int e = 0; e < dv; ++e) {
          float acc = 0;
          for (int j = 0; j < C; ++j) acc += A[i * C + j] * VB[j * dv + e];
          U[i * dv + e] = acc;
        }
        for (int d = 0; d < dk; ++d) {
          float acc = 0;
          for (int j = 0; j < C; ++j) acc += A[i * C + j] * KB[j * dk + d] * std::exp(G[j * dk + d]);
          W[i * dk + d] = acc;
        }
      }
      // v_new = U - W S
      for (int i = 0; i < C; ++i)
        for (int e = 0; e < dv; ++e) {
          float acc = 0;
          for (int d = 0; d < dk; ++d) acc += W[i * dk + d] * S[d * dv + e];
          Vn[i * dv + e] = U[i * dv + e] - acc;
        }
      // out_i = (q_i * exp(G_i)) S + sum_{j<=i} (q_i . k_j . decay_ij) v_new_j
      for (int i = 0; i < n; ++i) {
        float* o = out + ((c0 + i) * H + h) * dv;
        for (int e = 0; e < dv; ++e) {
          float acc = 0;
          for (int d = 0; d < dk; ++d) acc += Q[i * dk + d] * std::exp(G[i * dk + d]) * S[d * dv + e];
          o[e] = acc;
        }
        for (int j = 0; j <= i; ++j) {
          float a = 0;
          for (int d = 0; d < dk; ++d)
            a += Q[i * dk + d] * K[j * dk + d] * decay[(static_cast<size_t>(i) * C + j) * dk + d];
          for (int e = 0; e < dv; ++e) o[e] += a * Vn[j * dv + e];
        }
      }
      // S = S * exp(G_last) + (k * exp(G_last - G))^T v_new
      const float* Gl = &G[(C - 1) * dk];
      for (int d = 0; d < dk; ++d) {
        const float dec = std::exp(Gl[d]);
        for (int e = 0; e < dv; ++e) {
          float acc = 0;
          for (int i = 0; i < C; ++i) acc += K[i * dk + d] * std::exp(Gl[d] - G[i * dk + d]) * Vn[i * dv + e];
          S[d * dv + e] = S[d * dv + e] * dec + acc;
        }
      }
    }
  }
}

}  // namespace bloomery::cpu

// ---- CpuFamilyOps overrides ----

namespace bloomery::cpu {

void CpuFamilyOps::kda_gate(Tensor& g, const Tensor& f, const Weight& dt_bias, const Weight& A_log,
                            bool has_lower, float lower) {
  const int64_t H = A_log.numel(), T = f.rows(), dk = f.cols() / (H ? H : 1);
  if (g.numel() != f.numel() || dt_bias.numel() != H * dk || H * dk != f.cols())
    backend_shape_error(
        "kda_gate", "f [T, H*dk], dt_bias [H*dk], A_log [H]",
        f.shape_str() + ", " + shape_string(dt_bias.shape()) + ", " + shape_string(A_log.shape()));
  cpu::kda_gate(f.f32(), dt_bias.dense().f32(), A_log.dense().f32(), T, static_cast<int>(H),
                static_cast<int>(dk), has_lower, lower, g.f32());
}

void CpuFamilyOps::kda_rule(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                            const Tensor& beta, Tensor& state, bool chunked) {
  KdaShape s;
  s.T = q.dim(0);
  s.H = static_cast<int>(q.dim(1));
  s.dk = static_cast<int>(q.dim(2));
  s.dv = static_cast<int>(v.dim(-1));
  if (k.numel() != q.numel() || g.numel() != q.numel() || v.numel() != s.T * s.H * s.dv ||
      beta.numel() != s.T * s.H || state.numel() != static_cast<int64_t>(s.H) * s.dk * s.dv ||
      out.numel() != v.numel())
    backend_shape_error(
        "kda_rule", "q, k, g [T, H, dk]; v, out [T, H, dv]; beta [T, H]; state [H, dk, dv]",
        q.shape_str() + ", " + v.shape_str() + ", " + beta.shape_str() + ", " + state.shape_str());
  std::vector<float> qn(q.f32(), q.f32() + q.numel()), kn(k.f32(), k.f32() + k.numel());
  kda_l2norm_rows(qn.data(), s.T * s.H, s.dk, 1e-6f, 1.0f / std::sqrt(static_cast<float>(s.dk)));
  kda_l2norm_rows(kn.data(), s.T * s.H, s.dk, 1e-6f, 1.0f);
  // Heads are independent: run each head's slice on its own worker.
  pool().parallel_for(s.H, [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h) {
      KdaShape one = s;
      one.H = 1;
      std::vector<float> qh(s.T * s.dk), kh(s.T * s.dk), gh(s.T * s.dk), vh(s.T * s.dv), bh(s.T),
          oh(s.T * s.dv);
      for (int64_t t = 0; t < s.T; ++t) {
        const int64_t r = t * s.H + h;
        std::copy_n(qn.data() + r * s.dk, s.dk, qh.data() + t * s.dk);
        std::copy_n(kn.data() + r * s.dk, s.dk, kh.data() + t * s.dk);
        std::copy_n(g.f32() + r * s.dk, s.dk, gh.data() + t * s.dk);
        std::copy_n(v.f32() + r * s.dv, s.dv, vh.data() + t * s.dv);
        bh[t] = beta.f32()[r];
      }
      float* st = state.f32() + h * s.dk * s.dv;
      if (chunked)
        kda_chunked(one, qh.data(), kh.data(), vh.data(), gh.data(), bh.data(), st, oh.data());
      else
        kda_recurrent(one, qh.data(), kh.data(), vh.data(), gh.data(), bh.data(), st, oh.data());
      for (int64_t t = 0; t < s.T; ++t)
        std::copy_n(oh.data() + t * s.dv, s.dv, out.f32() + (t * s.H + h) * s.dv);
    }
  });
}

}  // namespace bloomery::cpu
