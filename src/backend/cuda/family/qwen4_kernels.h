// Launchers of the qwen4_exp family kernels (hyper-connection read/write, PLE gate, QSA block indexer): raw
// device pointers and sizes only, so the .cu files stay free of fmt/nlohmann. Host glue with the shape checks
// is in qwen4_ops.cc. Every launcher checks its launch (BLOOMERY_CUDA_CHECK_LAUNCH) and runs on `s`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/dequant.h"

namespace bloomery::cuda {

// u[t, d] = (Σ_s σ(m[t, s, d]) · xn[t, s, d]) / n;  m, xn [T, n·D].
void hc_read_mix(float* u, const float* m, const float* xn, int64_t T, int n, int64_t D, cudaStream_t s);
// The read's up product and mix in one pass for decode rows: u[t, d] = (Σ_s σ(m[t, s, d]) · xn[t, s, d]) / n
// with m = a · upᵀ (up [n·D, K] stored, a [T, K]), each m summed as the split-K GEMV sums a row (gemv.cu).
// The kernel takes up to kGemvMaxRows rows; it applies for T = 1 (where it was measured faster), n ≤ 4,
// 16-byte units along K and a 16-byte aligned a.
bool hc_up_mix_applies(const DeviceWeight& up, const float* a, int64_t T, int n);
void hc_up_mix(float* u, const float* a, const DeviceWeight& up, const float* xn, int64_t T, int n, int64_t D,
               cudaStream_t s);
// X[t, s, d] += inj[t, s] · y[t, d];  X [T, n·D], inj [T, n], y [T, D]. Rounded as the CPU op (no FMA).
void hc_inject(float* X, const float* y, const float* inj, int64_t T, int n, int64_t D, cudaStream_t s);
// hc_inject, then xn = RMSNorm of each D-stream of X (w: D or n·D weights, `kind` as rms_norm's) in one
// pass, the same bits as the two launches (the norm's thread count and reduction order).
void hc_inject_norm(float* X, const float* y, const float* inj, float* xn, const float* w, float eps,
                    int kind, int64_t T, int n, int64_t D, bool w_per_group, cudaStream_t s);
// G[t, s, :] = σ(ĝ) · v[t, :], g = <kn[t,s], qn[t,s]>/sqrt(D), ĝ = sign(g)·sqrt(max(|g|, 1e-6)).
void ple_gate(float* G, const float* kn, const float* qn, const float* v, int64_t T, int n, int64_t D,
              cudaStream_t s);

// Pools blocks b0 … b0+nblk−1 of raw [cap, d] (c tokens each) into blocks [*, d]: f32 mean in token order,
// zero-centred RMSNorm (Σx² in f64, as the CPU op), then NeoX RoPE over the first rot dims with the per-block
// cos/sin tables cs, sn [nblk, rot/2] (computed by the host with the CPU op's libm calls, so every block key
// is bit-identical to the CPU backend's). Every operation is rounded as the CPU op rounds it (no FMA).
void qsa_pool_blocks(float* blocks, const float* raw, const float* k_norm, const float* cs, const float* sn,
                     int64_t b0, int64_t nblk, int d, int c, int rot, float eps, cudaStream_t s);

// scores[t, b] = (Σ_h relu(qi[t, h, :] · blocks[b, :])) · inv for t < T, b < nb(t) = (q_first + t + 1) / c
// (other entries untouched); row stride ld. Each dot runs in the CPU op's order without FMA (bit-identical).
void qsa_block_scores(float* scores, int64_t ld, const float* qi, const float* blocks, int64_t T, int Hi,
                      int d, int64_t q_first, int c, float inv, cudaStream_t s);
// allowed[t, :S] for t < T (query position q_first + t): the tokens of the top-k blocks by scores (k =
// min(block_topk, nb(t)); stable: the lower block index wins exact ties) and the open tail; 0 elsewhere.
// ties (device int) += the number of queries whose k-th and (k+1)-th scores are equal.
void qsa_select_blocks(float* allowed, int64_t S, const float* scores, int64_t ld, int64_t T, int64_t q_first,
                       int c, int block_topk, int* ties, cudaStream_t s);

}  // namespace bloomery::cuda
