// CudaBackend linear-attention ops: shape checks and launches of the causal conv1d, the GDN gates and the
// gated delta rule (kernels in conv1d.cu, gated_delta.cu (step form) and gated_delta_chunk.cu (chunked)).
#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/op_args.h"
#include "backend/op_checks.h"

namespace bloomery::cuda {

// ---- linear attention
// ----------------------------------------------------------------------------------------

void CudaBackend::causal_conv1d(Tensor& out, const Tensor& x, const Weight& w, Tensor& state, int dilation,
                                Act act) {
  OpScope op_scope(op_times_, stream_, "conv1d");
  check_causal_conv1d_args(out, x, w, state, dilation);
  const int64_t T = x.rows(), C = x.cols(), K = w.cols();
  cuda::causal_conv1d(out.out_f32({&x, &state}), x.f32(), param_f32(w, "causal_conv1d"), state.f32(), T, C, K,
                      dilation, act_code(act), stream_);
}

void CudaBackend::gdn_gates(Tensor& g, Tensor& beta, const Tensor& a, const Tensor& b, const Weight& A_log,
                            const Weight& dt_bias) {
  OpScope op_scope(op_times_, stream_, "gdn gates");
  const int64_t Hv = A_log.numel(), T = check_gdn_gates_args(g, beta, a, b, A_log, dt_bias);
  cuda::gdn_gates(g.out_f32({&a, &b}), beta.out_f32({&a, &b}), a.f32(), b.f32(),
                  param_f32(A_log, "gdn_gates"), param_f32(dt_bias, "gdn_gates"), T, Hv, stream_);
}

void CudaBackend::gated_delta_rule(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& g, const Tensor& beta, Tensor& state, bool l2norm_qk,
                                   bool chunked) {
  OpScope op_scope(op_times_, stream_, "gated delta rule");
  const GdnShape d = check_gated_delta_args(out, q, k, v, g, beta, state);
  const int64_t T = d.T, Hk = d.Hk, dk = d.dk, Hv = d.Hv, dv = d.dv;
  BLOOMERY_NEED(dk >= 1 && dk <= kGdnMaxDk && dv >= 1 && dv <= kGdnMaxDv, "gated_delta_rule",
                "dk, dv in 1..128 (CUDA kernels)", q.shape_str() + " " + v.shape_str());
  if (T == 0 || Hv == 0) return;
  if (!chunked) {
    cuda::gated_delta_rule(out.out_f32({&q, &k, &v, &g, &beta, &state}), q.f32(), k.f32(), v.f32(), g.f32(),
                           beta.f32(), state.f32(), T, Hk, Hv, dk, dv, l2norm_qk, stream_);
    return;
  }
  // The chunked form's per-chunk records (W, U, Qe, Kdᵀ, Attn) live in a workspace of at most ~64 MiB: long
  // prompts run slab by slab (the state carries between slabs), short ones in one.
  const int64_t chunks = (T + kGdnChunk - 1) / kGdnChunk;
  const int64_t per_chunk = cuda::gdn_chunk_ws_floats(dk, dv) * Hv;
  const int64_t ws_chunks = std::clamp<int64_t>((int64_t{64} << 20) / 4 / per_chunk, 1, chunks);
  // From the pool without alloc's zero fill: every record is written before it is read.
  const auto ws =
      pool_.get(static_cast<size_t>(ws_chunks * per_chunk) * sizeof(float), "gdn chunk workspace");
  cuda::gated_delta_rule_chunked(out.out_f32({&q, &k, &v, &g, &beta, &state}), q.f32(), k.f32(), v.f32(),
                                 g.f32(), beta.f32(), state.f32(), static_cast<float*>(ws.get()), ws_chunks,
                                 T, Hk, Hv, dk, dv, l2norm_qk, stream_);
}

void CudaBackend::gdn_step_gated(Tensor& out, const Tensor& c, const Tensor& z, const Tensor& a,
                                 const Tensor& b, const Weight& A_log, const Weight& dt_bias,
                                 const Weight& norm, Tensor& state, int64_t Hk, int64_t dk, float eps,
                                 Act gate_act) {
  const int64_t T = c.rows(), Hv = A_log.numel(), dv = norm.numel(), kd = Hk * dk, vd = Hv * dv;
  if (!block_ops_ || !gdn_step_gated_)
    return Backend::gdn_step_gated(out, c, z, a, b, A_log, dt_bias, norm, state, Hk, dk, eps, gate_act);
  OpScope op_scope(op_times_, stream_, "gdn step + gated norm");
  BLOOMERY_NEED(dk >= 1 && dk <= kGdnMaxDk && dv >= 1 && dv <= kGdnMaxDv && Hk >= 1 && Hv % Hk == 0,
                "gdn_step_gated", "dk, dv in 1..128 and Hv a multiple of Hk",
                "Hk " + std::to_string(Hk) + " dk " + std::to_string(dk) + " Hv " + std::to_string(Hv) +
                    " dv " + std::to_string(dv));
  BLOOMERY_NEED(c.cols() == 2 * kd + vd && z.numel() == T * vd && out.numel() == T * vd &&
                    a.numel() == T * Hv && b.numel() == T * Hv && dt_bias.numel() == Hv &&
                    state.numel() == Hv * dk * dv,
                "gdn_step_gated",
                "c [T, " + std::to_string(2 * kd + vd) + "], z and out [T, " + std::to_string(vd) +
                    "], a, b [T, " + std::to_string(Hv) + "], state [" + std::to_string(Hv) + ", " +
                    std::to_string(dk) + ", " + std::to_string(dv) + "]",
                c.shape_str() + " " + z.shape_str() + " " + out.shape_str() + " " + a.shape_str() + " " +
                    b.shape_str() + " " + state.shape_str());
  if (T == 0) return;
  cuda::gdn_step_gated(out.out_f32({&c, &z, &a, &b, &state}), c.f32(), z.f32(), a.f32(), b.f32(),
                       param_f32(A_log, "gdn_step_gated"), param_f32(dt_bias, "gdn_step_gated"),
                       param_f32(norm, "gdn_step_gated"), state.f32(), T, Hk, Hv, dk, dv, eps,
                       act_code(gate_act), stream_);
}

}  // namespace bloomery::cuda
