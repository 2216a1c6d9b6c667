// CudaBackend glm5_next family ops (mHC, KDA, DSA indexer, NoPE MLA over the latent cache, sigmoid router):
// shape checks, scratch and the launches of the kernels in glm_{mhc,kda,dsa,mla,router}.cu (declared in
// glm_kernels.h). The DSA top-k reuses qwen4_exp's stable select (qwen4_kernels.h). Tie counts go through
// tie_counter / read_ties (cuda_backend.cc), as qsa_index_select's do.
#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/family/glm_kernels.h"
#include "backend/cuda/family/qwen4_kernels.h"
#include "backend/cuda/op_args.h"

namespace bloomery::cuda {
namespace {

// Scores of at most this many (query, pool) pairs are held at once; longer prompts run in query chunks.
constexpr int64_t kMaxScoreFloats = int64_t{1} << 24;  // 64 MiB
// Latent rows of q̃ and of the attention average held at once (T·H·L floats each).
constexpr int64_t kMaxLatentFloats = int64_t{1} << 24;

std::string num(int64_t v) {
  return std::to_string(v);
}

}  // namespace

// ---- mHC
// ---------------------------------------------------------------------------------------------------

void CudaBackend::mhc_pre(Tensor& h, Tensor& post, Tensor& comb, const Tensor& X, const Weight& fn,
                          const Weight& base, const Weight& scale, const MhcSpec& spec) {
  const int64_t T = h.rows(), D = h.cols(), n = spec.n;
  BLOOMERY_NEED(
      n >= 1 && n <= kMhcMaxStreams && X.numel() == T * n * D && post.numel() == T * n &&
          comb.numel() == T * n * n && fn.numel() == (2 + n) * n * n * D && base.numel() == (2 + n) * n &&
          scale.numel() == 3,
      "mhc_pre", "X [T, n*D], post [T, n], comb [T, n, n], fn [(2+n)n, n*D] with n <= 8",
      X.shape_str() + ", " + post.shape_str() + ", " + comb.shape_str() + ", " + shape_string(fn.shape()));
  const DeviceWeight& dw = device_weight(fn, "mhc_pre");
  BLOOMERY_NEED(dw.rows == static_cast<uint64_t>((2 + n) * n), "mhc_pre", "fn [(2+n)n, n*D]",
                shape_string(fn.shape()));
  cuda::mhc_pre(h.f32(), post.f32(), comb.f32(), X.f32(), dw, param_f32(base, "mhc_pre"),
                param_f32(scale, "mhc_pre"), T, static_cast<int>(n), D, spec.norm_eps, spec.hc_eps,
                spec.sinkhorn_iters, stream_);
}

void CudaBackend::mhc_post(Tensor& X, const Tensor& y, const Tensor& post, const Tensor& comb) {
  const int64_t T = y.rows(), D = y.cols(), n = post.cols();
  BLOOMERY_NEED(post.rows() == T && X.numel() == T * n * D && comb.numel() == T * n * n, "mhc_post",
                "X [T, n*D], post [T, n], comb [T, n, n] for y " + y.shape_str(),
                X.shape_str() + ", " + post.shape_str() + ", " + comb.shape_str());
  cuda::mhc_post(X.f32(), y.f32(), post.f32(), comb.f32(), T, static_cast<int>(n), D, stream_);
}

void CudaBackend::stream_mean(Tensor& out, const Tensor& X, int n) {
  const int64_t T = out.rows(), D = out.cols();
  BLOOMERY_NEED(n >= 1 && X.numel() == T * n * D, "stream_mean", "X [T, n*D] for out " + out.shape_str(),
                X.shape_str());
  cuda::stream_mean(out.f32(), X.f32(), T, n, D, stream_);
}

// ---- KDA
// ---------------------------------------------------------------------------------------------------

void CudaBackend::kda_gate(Tensor& g, const Tensor& f, const Weight& dt_bias, const Weight& A_log,
                           bool has_lower, float lower) {
  const int64_t H = A_log.numel(), T = f.rows(), dk = H ? f.cols() / H : 0;
  BLOOMERY_NEED(H > 0 && g.numel() == f.numel() && dt_bias.numel() == H * dk && H * dk == f.cols(),
                "kda_gate", "f [T, H*dk], dt_bias [H*dk], A_log [H]",
                f.shape_str() + ", " + shape_string(dt_bias.shape()) + ", " + shape_string(A_log.shape()));
  cuda::kda_gate(g.f32(), f.f32(), param_f32(dt_bias, "kda_gate"), param_f32(A_log, "kda_gate"), T, H, dk,
                 has_lower, lower, stream_);
}

void CudaBackend::kda_rule(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                           const Tensor& beta, Tensor& state, bool chunked) {
  BLOOMERY_NEED(q.ndim() == 3, "kda_rule", "q [T, H, dk]", q.shape_str());
  const int64_t T = q.dim(0), H = q.dim(1), dk = q.dim(2), dv = v.dim(-1);
  BLOOMERY_NEED(k.numel() == q.numel() && g.numel() == q.numel() && v.numel() == T * H * dv &&
                    beta.numel() == T * H && state.numel() == H * dk * dv && out.numel() == v.numel(),
                "kda_rule", "q, k, g [T, H, dk]; v, out [T, H, dv]; beta [T, H]; state [H, dk, dv]",
                q.shape_str() + ", " + v.shape_str() + ", " + beta.shape_str() + ", " + state.shape_str());
  BLOOMERY_NEED(dk <= kKdaMaxDk && dv <= kKdaMaxDk, "kda_rule", "dk, dv <= 128",
                "dk " + num(dk) + ", dv " + num(dv));
  // The chunked prompt form runs the token recurrence on the card (same math; equal to the CPU's chunked
  // form to f32 rounding).
  (void)chunked;
  cuda::kda_rule_steps(out.f32(), q.f32(), k.f32(), v.f32(), g.f32(), beta.f32(), state.f32(), T, H, dk, dv,
                       stream_);
}

// ---- DSA indexer
// ---------------------------------------------------------------------------------------------

void CudaBackend::dsa_index_append(Tensor& keys, Tensor& gates, Tensor& pools, const Tensor& k,
                                   const Tensor& gs, int64_t pos0, const Weight& ape) {
  const int64_t T = k.rows(), d = k.cols(), P = ape.rows();
  BLOOMERY_NEED(
      P >= 1 && gs.numel() == k.numel() && keys.cols() == d && gates.cols() == d && pools.cols() == d &&
          pos0 >= 0 && pos0 + T <= keys.rows() && pos0 + T <= gates.rows() && ape.numel() == P * d,
      "dsa_index_append",
      "k, gs [T, dI]; keys/gates [cap, dI] holding positions up to " + num(pos0 + T) + "; ape [P, dI]",
      k.shape_str() + ", " + keys.shape_str() + ", " + shape_string(ape.shape()));
  if (T == 0) return;
  BLOOMERY_CUDA_CHECK(cudaMemcpyAsync(keys.f32() + pos0 * d, k.f32(), T * d * sizeof(float),
                                      cudaMemcpyDeviceToDevice, stream_),
                      "dsa_index_append keys " + k.shape_str());
  BLOOMERY_CUDA_CHECK(cudaMemcpyAsync(gates.f32() + pos0 * d, gs.f32(), T * d * sizeof(float),
                                      cudaMemcpyDeviceToDevice, stream_),
                      "dsa_index_append gates " + gs.shape_str());
  const int64_t p0 = pos0 / P, p1 = (pos0 + T) / P;  // pools whose last token is in this call
  if (p1 <= p0) return;
  BLOOMERY_NEED(p1 - 1 < pools.rows(), "dsa_index_append", "room for pool " + num(p1 - 1), pools.shape_str());
  cuda::dsa_pool(pools.f32(), keys.f32(), gates.f32(), param_f32(ape, "dsa_index_append"), p0, p1 - p0,
                 static_cast<int>(d), static_cast<int>(P), stream_);
}

int64_t CudaBackend::dsa_index_select(Tensor& allowed, const Tensor& qi, const Tensor& wts,
                                      const Tensor& pools, int64_t q0, int pool, int topk) {
  BLOOMERY_NEED(qi.ndim() == 3, "dsa_index_select", "qi [T, Hi, dI]", qi.shape_str());
  const int64_t T = qi.dim(0), Hi = qi.dim(1), d = qi.dim(2), S = allowed.cols();
  BLOOMERY_NEED(allowed.rows() == T && S >= q0 + T && q0 >= 0 && wts.numel() == T * Hi && pools.cols() == d,
                "dsa_index_select", "allowed [" + num(T) + ", >=" + num(q0 + T) + "], wts [T, Hi]",
                allowed.shape_str() + ", " + wts.shape_str());
  BLOOMERY_NEED(pool >= 1 && topk >= 0 && Hi <= kDsaMaxHeads, "dsa_index_select",
                "pool >= 1, topk >= 0, index heads <= 64",
                "pool " + num(pool) + ", topk " + num(topk) + ", heads " + num(Hi));
  const int64_t np_max = (q0 + T) / pool;
  BLOOMERY_NEED(pools.rows() >= np_max, "dsa_index_select", "pools [>=" + num(np_max) + ", dI]",
                pools.shape_str());
  if (T == 0) return 0;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));  // as the CPU op
  const int64_t tc =
      std::clamp<int64_t>(kMaxScoreFloats / std::max<int64_t>(np_max, 1), 1, std::min<int64_t>(T, 65535));
  auto scores = pool_.get(static_cast<size_t>(std::max<int64_t>(tc * np_max, 1)) * sizeof(float),
                          "dsa_index_select scores [" + num(tc) + ", " + num(np_max) + "]");
  std::shared_ptr<void> hold;
  int* ties = tie_counter(hold, "dsa_index_select");
  float* sc = static_cast<float*>(scores.get());
  for (int64_t t0 = 0; t0 < T; t0 += tc) {
    const int64_t n = std::min(tc, T - t0);
    cuda::dsa_pool_scores(sc, np_max, qi.f32() + t0 * Hi * d, wts.f32() + t0 * Hi, pools.f32(), n,
                          static_cast<int>(Hi), static_cast<int>(d), q0 + t0, pool, scale, stream_);
    cuda::qsa_select_blocks(allowed.f32() + t0 * S, S, sc, np_max, n, q0 + t0, pool, topk / pool, ties,
                            stream_);
  }
  return read_ties(ties, "dsa_index_select");
}

// ---- MLA
// -----------------------------------------------------------------------------------------------------

void CudaBackend::mla_attention(Tensor& out, const Tensor& q, const Tensor& latent, const Weight& kv_b,
                                int64_t q0, float scale, const Tensor& allowed) {
  BLOOMERY_NEED(q.ndim() == 3, "mla_attention", "q [T, H, dqk]", q.shape_str());
  const int64_t T = q.dim(0), H = q.dim(1), dq = q.dim(2), L = latent.cols(), S = allowed.cols();
  const int64_t dv = T * H != 0 ? out.numel() / (T * H) : 0;
  BLOOMERY_NEED(kv_b.rows() == H * (dq + dv) && kv_b.cols() == L && allowed.rows() == T &&
                    latent.rows() >= S && S >= q0 + T && q0 >= 0 && L <= kMlaMaxLatent,
                "mla_attention", "kv_b [H*(dqk+dv), L], allowed [T, S], latent [>=S, L <= 1024]",
                shape_string(kv_b.shape()) + ", " + allowed.shape_str() + ", " + latent.shape_str());
  if (T == 0) return;
  const DeviceWeight& dw = device_weight(kv_b, "mla_attention");
  // q̃ and the latent average of a chunk of tokens at a time (bounded scratch for long prompts).
  const int64_t tc = std::clamp<int64_t>(kMaxLatentFloats / std::max<int64_t>(H * L, 1), 1, T);
  auto qt = pool_.get(static_cast<size_t>(tc * H * L) * sizeof(float), "mla_attention q̃");
  auto oc = pool_.get(static_cast<size_t>(tc * H * L) * sizeof(float), "mla_attention latent average");
  float* qtp = static_cast<float*>(qt.get());
  float* ocp = static_cast<float*>(oc.get());
  for (int64_t t0 = 0; t0 < T; t0 += tc) {
    const int64_t n = std::min(tc, T - t0);
    cuda::mla_absorb_q(qtp, q.f32() + t0 * H * dq, dw, n, H, dq, dv, L, stream_);
    cuda::mla_latent_attention(ocp, qtp, latent.bytes_ptr(), latent.type() == ElemType::BF16,
                               allowed.f32() + t0 * S, n, H, L, S, q0 + t0, scale, stream_);
    cuda::mla_project_v(out.f32() + t0 * H * dv, ocp, dw, n, H, dq, dv, L, stream_);
  }
}

// ---- sigmoid router
// ------------------------------------------------------------------------------------------

int64_t CudaBackend::route_sigmoid_topk(Tensor& ids, Tensor& weights, const Tensor& logits,
                                        const Weight* bias, const SigmoidRouterSpec& spec) {
  const int64_t T = logits.rows(), E = logits.cols(), k = spec.top_k;
  BLOOMERY_NEED(ids.numel() == T * k && weights.numel() == T * k && (!bias || bias->numel() == E) && k >= 0 &&
                    k <= E && spec.n_group >= 1 && E % spec.n_group == 0 && ids.type() == ElemType::I32,
                "route_sigmoid_topk", "ids (I32) / weights [T, k], bias [E], E divisible by n_group",
                ids.shape_str() + ", " + weights.shape_str() + ", " + logits.shape_str());
  if (T == 0) return 0;
  std::shared_ptr<void> hold;
  int* ties = tie_counter(hold, "route_sigmoid_topk");
  cuda::route_sigmoid_topk(ids.i32(), weights.f32(), logits.f32(),
                           bias ? param_f32(*bias, "route_sigmoid_topk") : nullptr, T, E, static_cast<int>(k),
                           spec.n_group, spec.topk_group, spec.renormalize, spec.routed_scaling, ties,
                           stream_);
  return read_ties(ties, "route_sigmoid_topk");
}

}  // namespace bloomery::cuda
