// Gated delta rule (GDN), chunked prompt form (models.md §1.6, chunk 64, the WY / UT-transform form the CPU
// backend's chunked path computes), f32 throughout. Two kernels per slab of chunks:
//
//  1. gdn_chunk_prep_k, one block per (chunk, value head), all chunks in parallel: everything that does not
//     depend on the state. L2-normalised q, k; γ = cumulative log decay; Γ_ij = e^{γ_i − γ_j};
//     A_ij = β_i (k_i·k_j) Γ_ij (strictly lower), Attn_ij = (q_i·k_j) Γ_ij (j ≤ i); the unit lower triangular
//     solves U = (I + A)⁻¹ (β ⊙ V), W = (I + A)⁻¹ (β e^γ ⊙ K), one column per thread in registers; Qe = e^γ ⊙
//     Q, Kd = e^{γ_last − γ} ⊙ K and the chunk decay e^{γ_last}. Written to a workspace.
//  2. gdn_chunk_scan_k, one block per (value head, slice of 32 or 64 value columns): the sequential pass over
//     the slab's chunks with the state slice S[:, b0:b0+cols] in shared memory. Value columns are independent
//     here, so dv splits across blocks. Per chunk: V' = U − W S, O = Qe S + Attn V', S ← e^{γ_last} S + Kdᵀ
//     V'. The chunk's records are staged into shared memory with cp.async in two groups (W|Qe|U, then
//     Kdᵀ|Attn), each streaming in while the other is used.
//
// Rows of a partial last chunk are zero (q = k = v = 0, g = 0, β = 0), which leaves every result unchanged.
// Key dims are padded to a multiple of 4 (zeros) so the workspace rows load as float4.
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/misc/device_math.cuh"
#include "backend/cuda/misc/pdl.cuh"

namespace bloomery::cuda {
namespace {

constexpr int kC = kGdnChunk;  // 64 tokens per chunk
constexpr int kPrepThreads = 256;
constexpr int kScanWarps = 8;  // row groups of the scan (its blocks have kCols × 8 threads)

__host__ __device__ inline int pad4(int64_t n) {
  return static_cast<int>((n + 3) / 4 * 4);
}

// Offsets (floats) of one (chunk, head) record in the workspace.
struct ChunkLayout {
  int dkp, dv;
  __host__ __device__ int w() const { return 0; }                  // W    [64][dkp]
  __host__ __device__ int qe() const { return kC * dkp; }          // Qe   [64][dkp]
  __host__ __device__ int kdt() const { return 2 * kC * dkp; }     // Kdᵀ  [dkp][64]
  __host__ __device__ int attn() const { return 3 * kC * dkp; }    // Attn [64][64]
  __host__ __device__ int u() const { return attn() + kC * kC; }   // U    [64][dv]
  __host__ __device__ int decay() const { return u() + kC * dv; }  // e^{γ_last}
  __host__ __device__ int size() const { return decay() + 4; }     // keeps records 16-byte aligned
};

// ---- 1. per-chunk preparation -----------------------------------------------------------------------------

__global__ void __launch_bounds__(kPrepThreads)
    gdn_chunk_prep_k(float* __restrict__ ws, const float* __restrict__ q, const float* __restrict__ k,
                     const float* __restrict__ v, const float* __restrict__ g, const float* __restrict__ beta,
                     int64_t T, int64_t chunk0, int64_t Hk, int64_t Hv, int dk, int dv, bool l2) {
  pdl_wait();
  pdl_launch_dependents();
  extern __shared__ float smem[];
  const ChunkLayout lay{pad4(dk), dv};
  const int dkp = lay.dkp, ldk = dkp + 1;  // +1: rows of Ks/Qs start in different banks
  float* Ks = smem;                        // [64][ldk] normalised k
  float* Qs = Ks + kC * ldk;               // [64][ldk] normalised, scaled q
  float* As = Qs + kC * ldk;               // [64][65]  strictly lower A
  float* cum = As + kC * (kC + 1);         // [64]      γ
  float* bet = cum + kC;                   // [64]      β
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t n = blockIdx.x, h = blockIdx.y, kh = h / (Hv / Hk);
  const int64_t c0 = (chunk0 + n) * kC;
  float* rec = ws + (n * Hv + h) * lay.size();

  // Raw q, k rows into shared memory (coalesced, all loads in flight at once), gates; rows past T are zero.
#pragma unroll 8
  for (int e = tid; e < kC * dkp; e += kPrepThreads) {
    const int i = e / dkp, a = e % dkp;
    const int64_t t = c0 + i;
    const bool in = t < T && a < dk;
    Qs[i * ldk + a] = in ? q[(t * Hk + kh) * dk + a] : 0.0f;
    Ks[i * ldk + a] = in ? k[(t * Hk + kh) * dk + a] : 0.0f;
  }
  if (tid < kC) {
    const int64_t t = c0 + tid;
    cum[tid] = t < T ? g[t * Hv + h] : 0.0f;
    bet[tid] = t < T ? beta[t * Hv + h] : 0.0f;
  }
  __syncthreads();
  if (tid == 0) {  // γ: sequential, as the CPU sums it, in registers
    float gs[kC];
#pragma unroll
    for (int i = 0; i < kC; ++i) gs[i] = cum[i];
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < kC; ++i) cum[i] = acc += gs[i];
  }
  // q ← q / |q| / sqrt(dk), k ← k / |k| (one warp per row, in place).
  const float qscale = 1.0f / sqrtf(static_cast<float>(dk));
  for (int i = warp; i < kC; i += kPrepThreads / 32) {
    float qn = 1.0f, kn = 1.0f;
    if (l2) {
      float sq = 0.0f, sk = 0.0f;
      for (int a = lane; a < dk; a += 32) {
        const float qa = Qs[i * ldk + a], ka = Ks[i * ldk + a];
        sq += qa * qa, sk += ka * ka;
      }
      sq = warp_reduce_sum(sq), sk = warp_reduce_sum(sk);
      qn = 1.0f / sqrtf(sq + 1e-6f);
      kn = 1.0f / sqrtf(sk + 1e-6f);
    }
    for (int a = lane; a < dk; a += 32) {
      Qs[i * ldk + a] = (Qs[i * ldk + a] * qn) * qscale;
      Ks[i * ldk + a] = Ks[i * ldk + a] * kn;
    }
  }
  __syncthreads();

  // A and Attn: a 4 × 4 tile of (i, j) per thread, i = ti + 16r, j = tj + 16c (conflict-free Ks[j] reads).
  {
    const int ti = tid / 16, tj = tid % 16;
    float kk[4][4] = {}, qk[4][4] = {};
    for (int a = 0; a < dk; ++a) {
      float ki[4], qi[4], kj[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        ki[r] = Ks[(ti + 16 * r) * ldk + a];
        qi[r] = Qs[(ti + 16 * r) * ldk + a];
        kj[r] = Ks[(tj + 16 * r) * ldk + a];
      }
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          kk[r][c] = fmaf(ki[r], kj[c], kk[r][c]);
          qk[r][c] = fmaf(qi[r], kj[c], qk[r][c]);
        }
    }
    float* Attn = rec + lay.attn();
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int i = ti + 16 * r, j = tj + 16 * c;
        const float gamma = j <= i ? expf(cum[i] - cum[j]) : 0.0f;  // j > i: e^{+} may overflow; never used
        As[i * (kC + 1) + j] = j < i ? (bet[i] * kk[r][c]) * gamma : 0.0f;
        Attn[i * kC + j] = j <= i ? qk[r][c] * gamma : 0.0f;
      }
  }
  __syncthreads();

  // Forward substitution with I + A, one right-hand-side column per thread: v columns (→ U), then the padded
  // k columns (→ W). Rows in registers; A reads are block-wide broadcasts.
  for (int col = tid; col < dv + dkp; col += kPrepThreads) {
    float x[kC];
    const bool is_v = col < dv;
    const int a = col - dv;
#pragma unroll
    for (int i = 0; i < kC; ++i) {
      const int64_t t = c0 + i;
      if (is_v)
        x[i] = t < T ? v[(t * Hv + h) * dv + col] * bet[i] : 0.0f;
      else
        x[i] = (Ks[i * ldk + a] * bet[i]) * expf(cum[i]);
    }
    // Right-looking: once x_j is final, subtract it from every later row. Each x_i still sums its terms in
    // ascending j (the CPU's order), and consecutive FMAs are independent (no serial chain).
#pragma unroll
    for (int j = 0; j < kC - 1; ++j)
#pragma unroll
      for (int i = j + 1; i < kC; ++i) x[i] = fmaf(-As[i * (kC + 1) + j], x[j], x[i]);
    if (is_v) {
#pragma unroll
      for (int i = 0; i < kC; ++i) rec[lay.u() + i * dv + col] = x[i];
    } else {
#pragma unroll
      for (int i = 0; i < kC; ++i) rec[lay.w() + i * dkp + a] = x[i];
    }
  }

  // Qe = e^γ ⊙ Q, Kdᵀ = (e^{γ_last − γ} ⊙ K)ᵀ, chunk decay.
  const float last = cum[kC - 1];  // = γ of the chunk's last live row (padding adds g = 0)
  for (int e = tid; e < kC * dkp; e += kPrepThreads) {
    const int i = e / dkp, a = e % dkp;
    rec[lay.qe() + e] = Qs[i * ldk + a] * expf(cum[i]);
  }
  for (int e = tid; e < kC * dkp; e += kPrepThreads) {
    const int a = e / kC, i = e % kC;
    rec[lay.kdt() + e] = Ks[i * ldk + a] * expf(last - cum[i]);
  }
  if (tid == 0) rec[lay.decay()] = expf(last);
}

// ---- 2. sequential scan over chunks -----------------------------------------------------------------------

// Asynchronous global → shared copies (cp.async): the next record streams in while the current one is used.
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}
// 4 bytes, or zeros when !valid (src is then not read).
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
__device__ __forceinline__ void cp_async_wait_all_but_last() {
  asm volatile("cp.async.wait_group 1;\n" ::);
}

// Shared memory of the scan (floats): Ss [dkp][kCols], Vn [64][kCols], Us [64][kCols], A = W|Qe [2·64·dkp],
// B = Kdᵀ|Attn [64·dkp + 64·64].
template <int kCols>
constexpr int scan_threads() {
  return kCols * kScanWarps;
}
inline size_t scan_smem_bytes(int dkp, int cols) {
  return static_cast<size_t>(dkp * cols + 2 * kC * cols + 3 * kC * dkp + kC * kC) * sizeof(float);
}

template <int kCols>
__global__ void __launch_bounds__(scan_threads<kCols>())
    gdn_chunk_scan_k(float* __restrict__ out, float* __restrict__ state, const float* __restrict__ ws,
                     int64_t T, int64_t chunk0, int64_t nchunks, int64_t Hv, int dk, int dv) {
  pdl_wait();
  pdl_launch_dependents();
  constexpr int kThreads = scan_threads<kCols>();
  extern __shared__ __align__(16) float smem[];
  const ChunkLayout lay{pad4(dk), dv};
  const int dkp = lay.dkp;
  float* Ss = smem;                   // [dkp][kCols] state slice, rows ≥ dk zero
  float* Vn = Ss + dkp * kCols;       // [64][kCols]  V' of the current chunk
  float* Us = Vn + kC * kCols;        // [64][kCols]  U slice
  float* bufA = Us + kC * kCols;      // W [64][dkp], Qe [64][dkp]
  float* bufB = bufA + 2 * kC * dkp;  // Kdᵀ [dkp][64], Attn [64][64]
  const int tid = threadIdx.x, tx = tid % kCols, ty = tid / kCols;
  const int64_t h = blockIdx.y;
  const int b = blockIdx.x * kCols + tx;
  const bool col = b < dv;
  float* S = state + h * static_cast<int64_t>(dk) * dv;
  for (int a = ty; a < dkp; a += kScanWarps)
    Ss[a * kCols + tx] = (col && a < dk) ? S[static_cast<int64_t>(a) * dv + b] : 0.0f;

  auto record = [&](int64_t n) { return ws + (n * Hv + h) * lay.size(); };
  // Group A of chunk n: W, Qe (contiguous in the record) and this block's U columns.
  auto load_a = [&](int64_t n) {
    const float* rec = record(n);
    for (int e = tid; e < 2 * kC * dkp / 4; e += kThreads) cp_async16(bufA + 4 * e, rec + lay.w() + 4 * e);
#pragma unroll
    for (int r = 0; r < kC / kScanWarps; ++r) {
      const int i = ty + kScanWarps * r;
      cp_async4(Us + i * kCols + tx, col ? rec + lay.u() + i * dv + b : rec, col);
    }
  };
  // Group B of chunk n: Kdᵀ, Attn (contiguous).
  auto load_b = [&](int64_t n) {
    const float* rec = record(n);
    for (int e = tid; e < (kC * dkp + kC * kC) / 4; e += kThreads)
      cp_async16(bufB + 4 * e, rec + lay.kdt() + 4 * e);
  };

  constexpr int kRows = kC / kScanWarps;              // chunk rows i = ty + 8r per thread
  constexpr int kStateRows = kGdnMaxDk / kScanWarps;  // state rows a = ty + 8m per thread
  load_a(0);
  cp_async_commit();
  for (int64_t n = 0; n < nchunks; ++n) {
    const float decay = record(n)[lay.decay()];
    load_b(n);
    cp_async_commit();
    cp_async_wait_all_but_last();  // group A(n) landed (B(n) may still be in flight)
    __syncthreads();               // … for every thread; also the previous chunk's Ss update is visible

    // V' = U − W S and Qe S, sharing the S reads.
    float ws_acc[kRows] = {}, qs_acc[kRows] = {};
    for (int a = 0; a < dkp; a += 4) {
      const float s0 = Ss[a * kCols + tx], s1 = Ss[(a + 1) * kCols + tx], s2 = Ss[(a + 2) * kCols + tx],
                  s3 = Ss[(a + 3) * kCols + tx];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int i = ty + kScanWarps * r;
        const float4 w4 = *reinterpret_cast<const float4*>(bufA + i * dkp + a);
        const float4 q4 = *reinterpret_cast<const float4*>(bufA + kC * dkp + i * dkp + a);
        ws_acc[r] = fmaf(w4.x, s0, ws_acc[r]);
        ws_acc[r] = fmaf(w4.y, s1, ws_acc[r]);
        ws_acc[r] = fmaf(w4.z, s2, ws_acc[r]);
        ws_acc[r] = fmaf(w4.w, s3, ws_acc[r]);
        qs_acc[r] = fmaf(q4.x, s0, qs_acc[r]);
        qs_acc[r] = fmaf(q4.y, s1, qs_acc[r]);
        qs_acc[r] = fmaf(q4.z, s2, qs_acc[r]);
        qs_acc[r] = fmaf(q4.w, s3, qs_acc[r]);
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int i = ty + kScanWarps * r;
      Vn[i * kCols + tx] = Us[i * kCols + tx] - ws_acc[r];
    }
    __syncthreads();  // Vn complete; bufA and Us free
    if (n + 1 < nchunks) load_a(n + 1);
    cp_async_commit();             // (possibly empty: keeps the group count uniform)
    cp_async_wait_all_but_last();  // group B(n) landed
    __syncthreads();
    const float* Kdt = bufB;
    const float* Attn = bufB + kC * dkp;

    // O = Qe S + Attn V' (Attn is zero above the diagonal; full rows keep the V' reads shared by 8 rows).
    const int64_t c0 = (chunk0 + n) * kC;
    float at_acc[kRows] = {};
    for (int j = 0; j < kC; j += 4) {
      const float v0 = Vn[j * kCols + tx], v1 = Vn[(j + 1) * kCols + tx], v2 = Vn[(j + 2) * kCols + tx],
                  v3 = Vn[(j + 3) * kCols + tx];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int i = ty + kScanWarps * r;
        const float4 a4 = *reinterpret_cast<const float4*>(Attn + i * kC + j);
        at_acc[r] = fmaf(a4.x, v0, at_acc[r]);
        at_acc[r] = fmaf(a4.y, v1, at_acc[r]);
        at_acc[r] = fmaf(a4.z, v2, at_acc[r]);
        at_acc[r] = fmaf(a4.w, v3, at_acc[r]);
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t t = c0 + ty + kScanWarps * r;
      if (col && t < T) out[(t * Hv + h) * dv + b] = qs_acc[r] + at_acc[r];
    }

    // S ← e^{γ_last} S + Kdᵀ V' on this thread's rows a = ty + 8m (each thread updates only its own entries).
    float s_acc[kStateRows];
#pragma unroll
    for (int m = 0; m < kStateRows; ++m) {
      const int a = ty + kScanWarps * m;
      s_acc[m] = a < dkp ? Ss[a * kCols + tx] * decay : 0.0f;
    }
    for (int i = 0; i < kC; i += 4) {
      const float v0 = Vn[i * kCols + tx], v1 = Vn[(i + 1) * kCols + tx], v2 = Vn[(i + 2) * kCols + tx],
                  v3 = Vn[(i + 3) * kCols + tx];
#pragma unroll
      for (int m = 0; m < kStateRows; ++m) {
        const int a = ty + kScanWarps * m;
        if (a < dkp) {
          const float4 k4 = *reinterpret_cast<const float4*>(Kdt + a * kC + i);
          s_acc[m] = fmaf(k4.x, v0, s_acc[m]);
          s_acc[m] = fmaf(k4.y, v1, s_acc[m]);
          s_acc[m] = fmaf(k4.z, v2, s_acc[m]);
          s_acc[m] = fmaf(k4.w, v3, s_acc[m]);
        }
      }
    }
#pragma unroll
    for (int m = 0; m < kStateRows; ++m) {
      const int a = ty + kScanWarps * m;
      if (a < dkp) Ss[a * kCols + tx] = s_acc[m];
    }
    __syncthreads();  // bufB and Vn free for the next chunk
  }
  for (int a = ty; a < dk; a += kScanWarps)
    if (col) S[static_cast<int64_t>(a) * dv + b] = Ss[a * kCols + tx];
}

std::string shape_what(const char* form, int64_t T, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv) {
  return std::string("gated_delta_rule (") + form + ") q[" + std::to_string(T) + ", " + std::to_string(Hk) +
         ", " + std::to_string(dk) + "] v[" + std::to_string(Hv) + ", " + std::to_string(dv) + "]";
}

template <int kCols>
void launch_scan(float* out, float* state, const float* ws, int64_t T, int64_t chunk0, int64_t nchunks,
                 int64_t Hv, int64_t dk, int64_t dv, cudaStream_t s, const std::string& what) {
  const size_t smem = scan_smem_bytes(pad4(dk), kCols);
  BLOOMERY_CUDA_CHECK(
      cudaFuncSetAttribute(gdn_chunk_scan_k<kCols>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(smem)),
      what + ": scan kernel shared memory " + std::to_string(smem) + " bytes");
  const dim3 grid(static_cast<unsigned>((dv + kCols - 1) / kCols), static_cast<unsigned>(Hv));
  pdl_launch(gdn_chunk_scan_k<kCols>, grid, scan_threads<kCols>(), smem, s, out, state, ws, T, chunk0,
             nchunks, Hv, static_cast<int>(dk), static_cast<int>(dv));
  BLOOMERY_CUDA_CHECK_LAUNCH(what + " scan");
}

int sm_count() {
  int dev = 0, n = 0;
  BLOOMERY_CUDA_CHECK(cudaGetDevice(&dev), "cudaGetDevice");
  BLOOMERY_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev), "SM count");
  return n;
}

}  // namespace

int64_t gdn_chunk_ws_floats(int64_t dk, int64_t dv) {
  return ChunkLayout{pad4(dk), static_cast<int>(dv)}.size();
}

void gdn_chunk_prep(float* ws, const float* q, const float* k, const float* v, const float* g,
                    const float* beta, int64_t T, int64_t chunk0, int64_t nchunks, int64_t Hk, int64_t Hv,
                    int64_t dk, int64_t dv, bool l2norm_qk, cudaStream_t s) {
  const std::string what = shape_what("chunked", T, Hk, Hv, dk, dv);
  const int dkp = pad4(dk);
  const size_t smem = static_cast<size_t>(2 * kC * (dkp + 1) + kC * (kC + 1) + 2 * kC) * sizeof(float);
  BLOOMERY_CUDA_CHECK(cudaFuncSetAttribute(gdn_chunk_prep_k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem)),
                      what + ": prep kernel shared memory " + std::to_string(smem) + " bytes");
  pdl_launch(gdn_chunk_prep_k, dim3(static_cast<unsigned>(nchunks), static_cast<unsigned>(Hv)), kPrepThreads,
             smem, s, ws, q, k, v, g, beta, T, chunk0, Hk, Hv, static_cast<int>(dk), static_cast<int>(dv),
             l2norm_qk);
  BLOOMERY_CUDA_CHECK_LAUNCH(what + " prep");
}

void gdn_chunk_scan(float* out, float* state, const float* ws, int64_t T, int64_t chunk0, int64_t nchunks,
                    int64_t Hv, int64_t dk, int64_t dv, cudaStream_t s) {
  const std::string what = shape_what("chunked", T, 0, Hv, dk, dv);
  // 32 value columns per block while that fills at most one wave of SMs (one block per SM: the staged
  // records need ~144 KB of shared memory); 64 otherwise (fewer, fuller blocks instead of a second wave).
  static const int sms = sm_count();
  if (Hv * ((dv + 31) / 32) <= sms)
    launch_scan<32>(out, state, ws, T, chunk0, nchunks, Hv, dk, dv, s, what);
  else
    launch_scan<64>(out, state, ws, T, chunk0, nchunks, Hv, dk, dv, s, what);
}

void gated_delta_rule_chunked(float* out, const float* q, const float* k, const float* v, const float* g,
                              const float* beta, float* state, float* ws, int64_t ws_chunks, int64_t T,
                              int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, bool l2norm_qk,
                              cudaStream_t s) {
  if (Hv == 0 || dv == 0 || T == 0) return;
  if (dk < 1 || dk > kGdnMaxDk || dv > kGdnMaxDv || Hk < 1 || Hv % Hk != 0 || ws_chunks < 1)
    BLOOMERY_CUDA_CHECK(cudaErrorInvalidValue,
                        shape_what("chunked", T, Hk, Hv, dk, dv) +
                            ": needs dk, dv <= 128, Hv a multiple of Hk and a workspace of >= 1 chunk");
  const int64_t chunks = (T + kC - 1) / kC;
  for (int64_t c = 0; c < chunks; c += ws_chunks) {
    const int64_t n = chunks - c < ws_chunks ? chunks - c : ws_chunks;
    gdn_chunk_prep(ws, q, k, v, g, beta, T, c, n, Hk, Hv, dk, dv, l2norm_qk, s);
    gdn_chunk_scan(out, state, ws, T, c, n, Hv, dk, dv, s);
  }
}

}  // namespace bloomery::cuda
