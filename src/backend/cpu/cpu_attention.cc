// Rotary embedding (partial, NeoX or interleaved, M-RoPE sections) and GQA softmax attention with a causal
// mask and an optional sparse "allowed" mask.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cache_element.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/op_checks.h"

namespace bloomery::cpu {

void CpuBackend::rope(Tensor& x, std::span<const int64_t> pos, const RopeSpec& rope) {
  BLOOMERY_NEED(x.ndim() == 3 && x.dim(0) == static_cast<int64_t>(pos.size()), "rope",
                "x [T, H, hd] with T = " + std::to_string(pos.size()), x.shape_str());
  const int64_t T = x.dim(0), H = x.dim(1), hd = x.dim(2);
  const int rot = rope.rot_dim;
  BLOOMERY_NEED(rot > 0 && rot % 2 == 0 && rot <= hd, "rope", "an even rot_dim <= " + std::to_string(hd),
                std::to_string(rot));
  const int half = rot / 2;
  // inv_freq[i] = 1 / theta^(2i/rot), computed in f32 as transformers does.
  std::vector<float> inv_freq(half);
  for (int i = 0; i < half; ++i)
    inv_freq[i] =
        1.0f / std::pow(static_cast<float>(rope.theta), static_cast<float>(2 * i) / static_cast<float>(rot));
  std::vector<float> c(half), s(half);
  for (int64_t t = 0; t < T; ++t) {
    // Text positions: every M-RoPE row equals the token position, so sections do not change the angles.
    for (int i = 0; i < half; ++i) {
      const float a = static_cast<float>(pos[t]) * inv_freq[i];
      c[i] = std::cos(a);
      s[i] = std::sin(a);
    }
    for (int64_t h = 0; h < H; ++h) {
      float* v = x.f32() + (t * H + h) * hd;
      if (!rope.interleaved) {
        for (int i = 0; i < half; ++i) {
          const float a = v[i], b = v[i + half];
          v[i] = a * c[i] - b * s[i];
          v[i + half] = b * c[i] + a * s[i];
        }
      } else {
        for (int i = 0; i < half; ++i) {
          const float a = v[2 * i], b = v[2 * i + 1];
          v[2 * i] = a * c[i] - b * s[i];
          v[2 * i + 1] = b * c[i] + a * s[i];
        }
      }
    }
  }
}

namespace {

template <typename KV>
void attend(ThreadPool& pool, float* O, const float* Q, const KV* K, const KV* V, const float* A, int64_t T,
            int64_t Hq, int64_t d, int64_t S, int64_t Hkv, int64_t dv, int64_t q0, float scale) {
  const int64_t group = Hq / Hkv;
  pool.parallel_for(T * Hq, [&](int64_t i0, int64_t i1) {
    std::vector<float> p(S);
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i / Hq, h = i % Hq, kh = h / group;
      const float* qv = Q + (t * Hq + h) * d;
      const int64_t last = q0 + t;  // causal: keys 0..last
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j <= last; ++j) {
        if (A && A[t * S + j] == 0.0f) {
          p[j] = -std::numeric_limits<float>::infinity();
          continue;
        }
        const KV* kv = K + (j * Hkv + kh) * d;
        float sdot = 0.0f;
        for (int64_t e = 0; e < d; ++e) sdot += qv[e] * cache_at(kv, e);
        p[j] = sdot * scale;
        mx = std::max(mx, p[j]);
      }
      float* o = O + (t * Hq + h) * dv;
      std::fill(o, o + dv, 0.0f);
      if (mx == -std::numeric_limits<float>::infinity()) continue;
      float sum = 0.0f;
      for (int64_t j = 0; j <= last; ++j) {
        p[j] = std::exp(p[j] - mx);
        sum += p[j];
      }
      const float inv = 1.0f / sum;
      for (int64_t j = 0; j <= last; ++j) {
        if (p[j] == 0.0f) continue;
        const float w = p[j] * inv;
        const KV* vv = V + (j * Hkv + kh) * dv;
        for (int64_t e = 0; e < dv; ++e) o[e] += w * cache_at(vv, e);
      }
    }
  });
}

}  // namespace

void CpuBackend::attention(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, int64_t q0,
                           float scale, const Tensor* allowed) {
  check_attention_args(out, q, k, v, q0, allowed);
  const int64_t T = q.dim(0), Hq = q.dim(1), d = q.dim(2);
  const int64_t S = k.dim(0), Hkv = k.dim(1), dv = v.dim(2);
  const float* A = allowed ? allowed->f32() : nullptr;
  if (k.type() == ElemType::BF16)
    attend(*owned_pool_, out.f32(), q.f32(), k.bf16(), v.bf16(), A, T, Hq, d, S, Hkv, dv, q0, scale);
  else
    attend(*owned_pool_, out.f32(), q.f32(), k.f32(), v.f32(), A, T, Hq, d, S, Hkv, dv, q0, scale);
}

}  // namespace bloomery::cpu
