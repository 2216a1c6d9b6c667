// Launchers of the CUDA backend's kernels: raw device pointers and sizes only, so .cu files stay free of
// fmt/nlohmann (nvcc chokes on fmt 9). Host glue with shape checks lives in cuda_backend*.cc. Every launcher
// checks its launch with BLOOMERY_CUDA_CHECK_LAUNCH naming the kernel and its shape. All run on `stream`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "backend/cuda/dequant.h"

namespace bloomery::cuda {

// Activation codes, equal to bloomery::Act's values (None, Silu, Sigmoid, Softplus, Relu).
enum ActCode : int { kActNone = 0, kActSilu = 1, kActSigmoid = 2, kActSoftplus = 3, kActRelu = 4 };

// ---- gemv / gemm (y[T, n] = x[T, K] · W[row0 : row0+n, K]ᵀ, W in its stored format) ----------------------
// Decode GEMV: 1 ≤ T ≤ 8 rows share one pass over the weight. K = w.cols.
constexpr int kGemvMaxRows = 8;
// The elementwise tail of a product (Backend::Epilogue): y = post · act(pre · y), each step rounded as the
// separate scale / activate kernels round it.
// With row_scale (device, one per row of x) each row is then scaled, and with accumulate added to y instead
// of stored (Backend::Epilogue), rounded as scale_rows and add round them; only the split-K kernel has those
// two.
struct Epilogue {
  float pre = 1.0f;
  int act = kActNone;
  float post = 1.0f;
  const float* row_scale = nullptr;
  bool accumulate = false;
  bool none() const { return pre == 1.0f && act == kActNone && post == 1.0f && !row_scale && !accumulate; }
  bool elementwise_only() const { return !row_scale && !accumulate; }
};
// The split-K kernel applies `e` as it stores; the other GEMV paths run epilogue() after (elementwise only).
void gemv(const DeviceWeight& w, int64_t row0, int64_t n, const float* x, int T, float* y, cudaStream_t s,
          const Epilogue& e = {});
// Products of one x[T, K] (T ≤ 8) in as few launches as their weight widths allow (one per width, up to four
// products each): the same blocks as one gemv() each, so the same bits. gemv_group_applies: every weight
// takes the split-K kernel (unit path, 16-byte aligned x, variant 2); otherwise the caller runs gemv() per
// product.
struct GemvProduct {
  DeviceWeight w;
  float* y = nullptr;
  Epilogue e;
};
bool gemv_group_applies(std::span<const GemvProduct> ps, const float* x, int T);
// The weight reads in 16-byte units along K (K a multiple of the unit, FP8 tiles a multiple of 16 wide): the
// condition of every unit kernel (the split-K GEMV, the hyper-connection read's fused up product).
bool unit_path(const DeviceWeight& w);
void gemv_group(std::span<const GemvProduct> ps, const float* x, int T, cudaStream_t s);
// y[i] = e(y[i]) for i < n, in place (products whose kernel has no epilogue of its own: GEMM, old GEMV).
void epilogue(float* y, int64_t n, const Epilogue& e, cudaStream_t s);
// The GEMV kernel in use (gemv.cu: 1 = a warp per row, 2 = split-K with loads ahead, the default;
// BLOOMERY_CUDA_GEMV picks it at start, set_gemv_variant between steps for A/B measurements).
int gemv_variant();
void set_gemv_variant(int v);
// Variant 2 with several weight rows per warp (3-8 rows of x): each x element loaded once for all of the
// warp's weight rows (on unless BLOOMERY_CUDA_GEMV_X_ONCE=0; the same sums in the same order either way).
bool gemv_x_once();
void set_gemv_x_once(bool on);
// Tests only (launch sweeps): the split-K kernel's weight rows per warp (1 or 4) and split-K ways (1, 2, 4 or
// 8) in gemv() and gemv_group(), 0 for the heuristic's choice of either; the tensor-core and variant-1
// kernels ignore it. Any other value throws (E_CUDA). Set between steps, reset with (0, 0).
void set_gemv_launch_override(int rows_per_warp, int split_k);
// Variant 2's BF16 products on the tensor cores (gemv/gemv_tc.cu: mma.sync with x split into bf16 hi + lo,
// ~16 bits of each activation kept; K a multiple of 32, x 16-byte aligned) for 2-8 rows of x; on unless
// BLOOMERY_CUDA_GEMV_TC=0 at start (docs/performance.md: C = 4 decode 173.8 -> 209.4 tok/s on the H200),
// set_gemv_tc between steps for A/B measurements.
bool gemv_tc();
void set_gemv_tc(bool on);
// Variant 2's one-row products (K a multiple of 128) on the one-row kernel (gemv/gemv_row.cuh: a warp reads
// 128-element chunks, x 512 contiguous bytes a load), one switch per stored kind: the FP8 family (on unless
// BLOOMERY_CUDA_GEMV_FP8_ROW=0 at start) and BF16 (on unless BLOOMERY_CUDA_GEMV_BF16_ROW=0); the setters
// between steps for A/B measurements. One weight row a warp, one row of x a launch (2-8 rows of x take the
// tensor-core GEMV by default; R = 2/4 rows a warp and 2-4 rows of x were measured slower or not better on an
// H100, docs/performance.md). A launch override with weight rows per warp set (tests) takes the split-K
// kernel instead; one with only the split-K ways set applies to this kernel.
bool gemv_fp8_row();
void set_gemv_fp8_row(bool on);
bool gemv_bf16_row();
void set_gemv_bf16_row(bool on);
// Programmatic dependent launch of the kernels (misc/pdl.cuh; on unless BLOOMERY_CUDA_PDL=0, set_pdl between
// steps for A/B measurements).
bool pdl_enabled();
void set_pdl(bool on);
// Prompt GEMM: any T; tensor cores (mma.sync BF16, split hi+lo activations by default, f32 accumulate) with
// weight tiles dequantised from the stored format in shared memory; SIMT fallback (gemm/tc_gemm.cu, gemm.cu).
void gemm(const DeviceWeight& w, int64_t row0, int64_t n, const float* x, int64_t T, float* y,
          cudaStream_t s);
// BF16-stored weights go through cuBLASLt (gemm/lt_gemm.cc) unless switched off (BLOOMERY_CUDA_GEMM_LIB=0 at
// start, or set_gemm_library between calls for A/B measurements); lt_gemm.cc says why it is the default.
bool gemm_library();
void set_gemm_library(bool on);
// out[i, :] = W[ids[i], :] decoded to f32 (any stored format); ids on the card.
void gather_rows(const DeviceWeight& w, const int64_t* ids, int64_t count, float* out, cudaStream_t s);

// ---- elementwise -----------------------------------------------------------------------------------------
enum class Binary : int { Add, Mul, AddScaled, SigmoidMul };
void fill(float* p, int64_t n, float v, cudaStream_t s);
// BF16 tensors (KV caches, -ctk/-ctv) hold the raw bits as uint16: p[i] = v rounded to nearest even.
void fill_bf16(uint16_t* p, int64_t n, float v, cudaStream_t s);
// dst[i] = src[i] rounded to BF16, nearest even (NaN stays NaN): f32 rows into a BF16 cache.
void round_to_bf16(uint16_t* dst, const float* src, int64_t n, cudaStream_t s);
// dst[i] = src[i] widened to f32 exactly.
void widen_bf16(float* dst, const uint16_t* src, int64_t n, cudaStream_t s);
void binary(Binary op, float* out, const float* a, const float* b, float scalar, int64_t n, cudaStream_t s);
void scale(float* out, const float* x, float sc, int64_t n, cudaStream_t s);
void activate(float* out, const float* x, int act, int64_t n, cudaStream_t s);
void scale_rows(float* out, const float* x, const float* sc, int64_t R, int64_t C, cudaStream_t s);
void swiglu(float* out, const float* gate, const float* up, float limit, int64_t n, cudaStream_t s);
// dst[r, d0 + c] = src[r, s0 + c] for c < n; row strides ds / ss (column slice copies, both ways).
void copy_cols(float* dst, int64_t ds, int64_t d0, const float* src, int64_t ss, int64_t s0, int64_t R,
               int64_t n, cudaStream_t s);
// out[p][r, c] = src[r, c0[p] + c] for the columns c0[p] … c0[p + 1] (the last up to `total`): src's first
// `total` columns cut into `count` contiguous outputs in one launch.
constexpr int kSplitMax = 4;
struct SplitCols {
  float* out[kSplitMax];
  int64_t c0[kSplitMax];
  int64_t total = 0;
  int count = 0;
};
void split_cols(const SplitCols& a, const float* src, int64_t ss, int64_t R, cudaStream_t s);

// ---- norms -----------------------------------------------------------------------------------------------
// Threads per group of the norm kernels (a fused kernel that must reduce as they do takes the same).
int rms_norm_threads(int64_t group);
// kind: 0 Plain, 1 OnePlus, 2 Unweighted (NormKind order). w_per_group: w has C elements (slice per group).
void rms_norm(float* out, const float* x, const float* w, float eps, int kind, int64_t groups, int64_t group,
              int64_t groups_per_row, bool w_per_group, cudaStream_t s);
void rms_norm_gated(float* out, const float* x, const float* z, const float* w, float eps, int act,
                    int64_t groups, int64_t group, cudaStream_t s);
void layer_norm(float* out, const float* x, const float* w, const float* b, float eps, int64_t R, int64_t C,
                cudaStream_t s);

// ---- positional ------------------------------------------------------------------------------------------
// inv_freq[rot/2] on the card, computed by the host in f32 as the CPU backend does.
void rope(float* x, const int64_t* pos, const float* inv_freq, int64_t T, int64_t H, int64_t hd, int rot,
          bool interleaved, cudaStream_t s);

// ---- attention -------------------------------------------------------------------------------------------
// part: scratch of attention_part_floats(T, Hq, dv) floats for split-KV decode (null: never split).
// k, v: the caches, f32 or (kv_bf16) BF16 both; every kernel widens BF16 K/V exactly as it loads them and
// keeps its f32 arithmetic, so a BF16 cache costs only its own rounding and halves the bytes read.
void attention(float* out, const float* q, const void* k, const void* v, bool kv_bf16, const float* allowed,
               int64_t T, int64_t Hq, int64_t d, int64_t S, int64_t Hkv, int64_t dv, int64_t q0, float scale,
               float* part, cudaStream_t s);
int attention_part_floats(int64_t T, int64_t Hq, int64_t dv);

// ---- mixture of experts ----------------------------------------------------------------------------------
// The routed-expert decode kernels in use (moe/moe_decode.cu: 1 = rows per lane group with every element
// fully scaled, 2 = raw units loaded ahead with the scales on partial sums, 3 = NVFP4 experts on the tensor
// cores, moe/moe_decode_tc.cu, other formats as 2, the default; BLOOMERY_CUDA_MOE_DECODE=1|2|3 picks it at
// start, set_moe_decode_variant between steps for A/B runs).
int moe_decode_variant();
void set_moe_decode_variant(int v);
// Softmax top-k routing: one warp per token with the logits in registers when E <= 1024 and k <= 32 (on
// unless BLOOMERY_CUDA_ROUTER_WARP=0, set_router_warp between steps for A/B runs), else one block per token.
bool router_warp();
void set_router_warp(bool on);
void route_softmax_topk(int32_t* ids, float* weights, const float* logits, int64_t T, int64_t E, int k,
                        bool renormalize, cudaStream_t s);
// xs[i, :] = x[rows[i], :] (rows on the card)
void gather_tokens(float* xs, const float* x, const int32_t* rows, int64_t count, int64_t D, cudaStream_t s);
// out[rows[i], :] += wts[slot[i]] · ys[i, :]; rows are distinct within one call (one expert's tokens).
void scatter_add_scaled(float* out, const float* ys, const int32_t* rows, const int32_t* slots,
                        const float* wts, int64_t count, int64_t D, cudaStream_t s);

// ---- linear attention ------------------------------------------------------------------------------------
// Causal depthwise conv1d over x[T, C] with the last P = (K−1)·dilation inputs per channel carried in
// state[C, P]: one thread per (channel, run of 8 tokens) (any T in one launch), then the state update.
void causal_conv1d(float* out, const float* x, const float* w, float* state, int64_t T, int64_t C, int64_t K,
                   int dilation, int act, cudaStream_t s);
void gdn_gates(float* g, float* beta, const float* a, const float* b, const float* A_log,
               const float* dt_bias, int64_t T, int64_t Hv, cudaStream_t s);
// Gated delta rule (Backend::gated_delta_rule), f32 state [Hv, dk, dv]; dk, dv ≤ 128, any sizes below.
constexpr int kGdnMaxDk = 128;
constexpr int kGdnMaxDv = 128;
constexpr int kGdnChunk = 64;
// Step form (decode; token by token): state in registers, dv split across blocks.
void gated_delta_rule(float* out, const float* q, const float* k, const float* v, const float* g,
                      const float* beta, float* state, int64_t T, int64_t Hk, int64_t Hv, int64_t dk,
                      int64_t dv, bool l2norm_qk, cudaStream_t s);
// Step form after the conv, in one pass (Backend::gdn_step_gated): q, k, v read from the conv output c [T,
// 2·Hk·dk + Hv·dv], the gates from a, b [T, Hv], the gated norm over each head's dv outputs; out [T, Hv·dv].
// A block per value head, so a head's outputs meet for the norm; same sums in the same order as the
// separate kernels (split_cols, gdn_gates, the step form, rms_norm_gated).
void gdn_step_gated(float* out, const float* c, const float* z, const float* a, const float* b,
                    const float* A_log, const float* dt_bias, const float* norm, float* state, int64_t T,
                    int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, float eps, int act, cudaStream_t s);
// Chunked prompt form (chunks of kGdnChunk tokens). ws: gdn_chunk_ws_floats(dk, dv) · Hv · ws_chunks floats;
// the prompt is processed ws_chunks chunks at a time.
int64_t gdn_chunk_ws_floats(int64_t dk, int64_t dv);
// Its two phases on chunks [chunk0, chunk0 + nchunks) (records at ws[0 ..]): prep, all chunks in parallel
// (nothing that depends on the state), then the sequential scan that carries the state.
void gdn_chunk_prep(float* ws, const float* q, const float* k, const float* v, const float* g,
                    const float* beta, int64_t T, int64_t chunk0, int64_t nchunks, int64_t Hk, int64_t Hv,
                    int64_t dk, int64_t dv, bool l2norm_qk, cudaStream_t s);
void gdn_chunk_scan(float* out, float* state, const float* ws, int64_t T, int64_t chunk0, int64_t nchunks,
                    int64_t Hv, int64_t dk, int64_t dv, cudaStream_t s);
void gated_delta_rule_chunked(float* out, const float* q, const float* k, const float* v, const float* g,
                              const float* beta, float* state, float* ws, int64_t ws_chunks, int64_t T,
                              int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, bool l2norm_qk, cudaStream_t s);

// ---- sampling --------------------------------------------------------------------------------------------
struct SampleParams {
  float temperature = 0.0f;  // ≤ 0: greedy (lowest index on ties)
  int top_k = 0;             // 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  uint64_t seed = 0;
  uint64_t step = 0;  // counter mixed into the seed (one draw per step)
};
// One token id per row of logits [R, V]; result on the card in ids[R]. scratch: V floats per row.
void sample(int32_t* ids, const float* logits, int64_t R, int64_t V, const SampleParams& p, float* scratch,
            cudaStream_t s);

}  // namespace bloomery::cuda
