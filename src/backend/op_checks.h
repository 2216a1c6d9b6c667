// Argument checks of backend ops that every backend shares, so the CPU reference and the CUDA backend refuse
// exactly the same calls with the same E_BACKEND_SHAPE messages (backend.h documents each op's shapes).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>

#include "backend/backend.h"

namespace bloomery {

// matmul_rows: x [T, K] against rows [row0, row0 + n) of w, out of T·n elements.
inline void check_matmul_args(const Tensor& out, const Tensor& x, const Weight& w, int64_t row0, int64_t n) {
  const int64_t K = w.cols(), T = x.rows();
  BLOOMERY_NEED(x.cols() == K, "matmul", "x [T, " + std::to_string(K) + "] for " + w.name(), x.shape_str());
  BLOOMERY_NEED(row0 >= 0 && n >= 0 && row0 + n <= w.rows(), "matmul",
                "rows within " + shape_string(w.shape()), std::to_string(row0) + "+" + std::to_string(n));
  BLOOMERY_NEED(out.numel() == T * n, "matmul",
                "out of [" + std::to_string(T) + ", " + std::to_string(n) + "] elements for " + w.name(),
                out.shape_str());
}

// gather_rows: out [ids, table cols]; every id a row of the table (E_TOKEN_RANGE names the table).
inline void check_gather_rows_args(const Tensor& out, const Weight& table, std::span<const int64_t> ids) {
  const int64_t D = table.cols();
  BLOOMERY_NEED(out.rows() == static_cast<int64_t>(ids.size()) && out.cols() == D, "gather_rows",
                "[" + std::to_string(ids.size()) + ", " + std::to_string(D) + "]", out.shape_str());
  for (int64_t id : ids)
    if (id < 0 || id >= table.rows())
      raise("E_TOKEN_RANGE", Where{"", table.name(), "row"}, "a row below " + std::to_string(table.rows()),
            std::to_string(id));
}

// causal_conv1d: w [C, 1, K], state [C, (K−1)·dilation], a separate out [T, C].
inline void check_causal_conv1d_args(const Tensor& out, const Tensor& x, const Weight& w, const Tensor& state,
                                     int dilation) {
  const int64_t T = x.rows(), C = x.cols(), K = w.cols();
  BLOOMERY_NEED(w.rows() == C, "causal_conv1d", "w [" + std::to_string(C) + ", 1, K]",
                shape_string(w.shape()));
  BLOOMERY_NEED(dilation >= 1, "causal_conv1d", "dilation >= 1", std::to_string(dilation));
  const int64_t P = (K - 1) * dilation;
  BLOOMERY_NEED(state.numel() == C * P, "causal_conv1d",
                "state [" + std::to_string(C) + ", " + std::to_string(P) + "]", state.shape_str());
  BLOOMERY_NEED(out.numel() == T * C && out.f32() != x.f32(), "causal_conv1d", "a separate out [T, C]",
                out.shape_str());
}

// gdn_gates: a, b, g, beta [T, Hv] with Hv = A_log.numel() = dt_bias.numel(). Returns T.
inline int64_t check_gdn_gates_args(const Tensor& g, const Tensor& beta, const Tensor& a, const Tensor& b,
                                    const Weight& A_log, const Weight& dt_bias) {
  const int64_t Hv = A_log.numel(), T = a.numel() / std::max<int64_t>(1, Hv);
  BLOOMERY_NEED(dt_bias.numel() == Hv && a.numel() == T * Hv && b.numel() == T * Hv && g.numel() == T * Hv &&
                    beta.numel() == T * Hv,
                "gdn_gates", "a, b, g, beta [T, " + std::to_string(Hv) + "]",
                a.shape_str() + " " + b.shape_str());
  return T;
}

// gated_delta_rule: q, k [T, Hk, dk], v [T, Hv, dv] (Hv a multiple of Hk), g, beta [T, Hv], state [Hv, dk,
// dv], out [T, Hv, dv]. Returns the dimensions.
struct GdnShape {
  int64_t T, Hk, Hv, dk, dv;
};
inline GdnShape check_gated_delta_args(const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& g, const Tensor& beta, const Tensor& state) {
  BLOOMERY_NEED(q.ndim() == 3 && k.shape() == q.shape() && v.ndim() == 3 && v.dim(0) == q.dim(0),
                "gated_delta_rule", "q, k [T, Hk, dk], v [T, Hv, dv]",
                q.shape_str() + " " + k.shape_str() + " " + v.shape_str());
  const GdnShape d{q.dim(0), q.dim(1), v.dim(1), q.dim(2), v.dim(2)};
  BLOOMERY_NEED(d.Hk > 0 && d.Hv % d.Hk == 0, "gated_delta_rule", "Hv a multiple of Hk",
                std::to_string(d.Hv));
  BLOOMERY_NEED(g.numel() == d.T * d.Hv && beta.numel() == d.T * d.Hv, "gated_delta_rule", "g, beta [T, Hv]",
                g.shape_str() + " " + beta.shape_str());
  BLOOMERY_NEED(state.numel() == d.Hv * d.dk * d.dv, "gated_delta_rule", "state [Hv, dk, dv]",
                state.shape_str());
  BLOOMERY_NEED(out.numel() == d.T * d.Hv * d.dv, "gated_delta_rule", "out [T, Hv, dv]", out.shape_str());
  return d;
}

// rms_norm: x viewed as [R, C] in groups of `group` channels (0 = C); w null for Unweighted, else `group`
// weights shared by every group or C weights (each group its own slice). Returns the group size and whether
// the weight is per group.
struct RmsNormShape {
  int64_t group;
  bool per_group;
};
inline RmsNormShape check_rms_norm_args(const Tensor& out, const Tensor& x, const Weight* w, NormKind kind,
                                        int64_t group) {
  const int64_t C = x.cols();
  if (group <= 0) group = C;
  BLOOMERY_NEED(out.numel() == x.numel(), "rms_norm", x.shape_str(), out.shape_str());
  BLOOMERY_NEED(C % group == 0, "rms_norm", "cols divisible by group " + std::to_string(group),
                x.shape_str());
  if (kind == NormKind::Unweighted) {
    BLOOMERY_NEED(w == nullptr, "rms_norm", "no weight for Unweighted", w ? w->name() : "");
    return {group, false};
  }
  BLOOMERY_NEED(w && (w->numel() == group || w->numel() == C), "rms_norm",
                std::to_string(group) + " or " + std::to_string(C) + " weights",
                w ? shape_string(w->shape()) : "none");
  return {group, w->numel() == C && C != group};
}

// attention: q [T, Hq, d], k [S, Hkv, d], v [S, Hkv, dv] with Hq a multiple of Hkv, out [T, Hq, dv], the T
// queries at key index q0 … q0+T−1 within the S keys, allowed [T, S] when given.
inline void check_attention_args(const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                                 int64_t q0, const Tensor* allowed) {
  BLOOMERY_NEED(q.ndim() == 3 && k.ndim() == 3 && v.ndim() == 3, "attention", "q, k, v of rank 3",
                q.shape_str() + " " + k.shape_str() + " " + v.shape_str());
  const int64_t T = q.dim(0), Hq = q.dim(1), d = q.dim(2);
  const int64_t S = k.dim(0), Hkv = k.dim(1), dv = v.dim(2);
  BLOOMERY_NEED(k.dim(2) == d && v.dim(0) == S && v.dim(1) == Hkv && Hkv > 0 && Hq % Hkv == 0, "attention",
                "k [S, Hkv, d], v [S, Hkv, dv], Hq % Hkv == 0",
                q.shape_str() + " " + k.shape_str() + " " + v.shape_str());
  BLOOMERY_NEED(out.numel() == T * Hq * dv, "attention", "out [T, Hq, dv]", out.shape_str());
  BLOOMERY_NEED(q0 >= 0 && q0 + T <= S, "attention", "queries within the keys",
                std::to_string(q0) + "+" + std::to_string(T));
  if (allowed) BLOOMERY_NEED(allowed->numel() == T * S, "attention", "allowed [T, S]", allowed->shape_str());
  // The caches are f32 or BF16 (-ctk/-ctv), K and V alike; queries, mask and output are f32.
  BLOOMERY_NEED(k.type() == v.type() && k.type() != ElemType::I32, "attention",
                "k and v both f32 or both bf16",
                std::string(elem_name(k.type())) + " and " + elem_name(v.type()));
  BLOOMERY_NEED(q.type() == ElemType::F32 && out.type() == ElemType::F32, "attention", "f32 q and out",
                std::string(elem_name(q.type())) + " and " + elem_name(out.type()));
}

// copy(dst, src): the same element type, or f32 <-> bf16 (rounded to nearest even / widened exactly).
inline void check_copy_types(const Tensor& dst, const Tensor& src) {
  const bool same = dst.type() == src.type();
  const bool widen_or_round = (dst.type() == ElemType::BF16 && src.type() == ElemType::F32) ||
                              (dst.type() == ElemType::F32 && src.type() == ElemType::BF16);
  BLOOMERY_NEED(same || widen_or_round, "copy", "the same element type, or f32 <-> bf16",
                std::string(elem_name(src.type())) + " -> " + elem_name(dst.type()));
}

}  // namespace bloomery
