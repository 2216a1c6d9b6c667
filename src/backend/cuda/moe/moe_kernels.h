// Launchers of the routed-expert kernels that read the routing from device memory (no host round trip):
// the decode path (one launch for gate+up+SwiGLU of every (token, slot) pair, one for down, one fixed-order
// weighted sum per token) and the prompt path's device-side grouping (counting sort of the pairs by expert,
// gather of x rows, weighted combine back to token order). Raw pointers only: .cu files stay free of fmt.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/dequant.h"

namespace bloomery::cuda {

// The expert table the kernels read: E descriptors per projection, on the card. An expert that is not
// loaded has data == nullptr; a pair routed to it (or to an id outside [0, E)) yields NaN in its token's
// output row, since the kernels cannot raise without a host sync.
struct MoeTable {
  const DeviceWeight* gate = nullptr;
  const DeviceWeight* up = nullptr;
  const DeviceWeight* down = nullptr;
  int64_t E = 0;
};

// ---- decode ----------------------------------------------------------------------------------------------
// Every pair p = t·k + j of ids [T, k]: h[p, :] = swiglu(gate_e · x[t], up_e · x[t]) (clamp as swiglu()),
// e = ids[p]. gate_fmt / up_fmt: the (uniform) formats of the table's gate and up weights; they must share
// an element width, and every gate/up row must be readable in units (moe_units_ok). x: [T, D], h: [P, I].
void moe_gate_up(const MoeTable& tab, FormatId gate_fmt, FormatId up_fmt, const int32_t* ids, int64_t P,
                 int k, const float* x, int64_t D, int64_t I, float limit, float* h, cudaStream_t s);
// y[p, :] = down_e · h[p, :] for every pair (y: [P, D]).
void moe_down(const MoeTable& tab, FormatId down_fmt, const int32_t* ids, int64_t P, const float* h,
              int64_t I, int64_t D, float* y, cudaStream_t s);
// out[t, :] = Σ_j wts[t·k + j] · y[pos(t·k + j), :] summed in slot order j = 0 … k−1 from zero (the CPU
// backend's order); pos = identity when `pos` is null, else pos[p] (the pair's row in a permuted y).
void moe_combine(float* out, const float* y, const int32_t* pos, const float* wts, int64_t T, int k,
                 int64_t D, cudaStream_t s);
// out [rows, cols] = every element of w decoded by the kernels' unit reader (fast: weight_access.cuh's
// table-free decode_unit) or element by element (weight_element, the table decoders). For the test that the
// two agree bit for bit; w must pass moe_units_ok.
void moe_decode_units(const DeviceWeight& w, bool fast, float* out, cudaStream_t s);
// True when rows of K stored elements of this format can be read in 16-byte units (see gemv's unit_path).
bool moe_units_ok(FormatId f, uint64_t K, int block_k, const void* data);
// Same element width (decode_unit's template argument) for both formats.
bool moe_same_width(FormatId a, FormatId b);

// ---- prompt: grouping on the card ------------------------------------------------------------------------
// Counting sort of the P pairs by expert. counts/cursor: E ints of scratch; offsets: E + 1 ints (exclusive
// prefix sums, offsets[E] = number of valid pairs); rows[i] = token of the pair placed at row i of the
// grouped layout; pos[p] = that row for pair p (−1 for an invalid id). Order inside one expert's
// group follows the atomics, but each row is computed independently and the combine sums in slot order, so
// the result does not depend on it.
void moe_group(const int32_t* ids, int64_t P, int k, int64_t E, int32_t* counts, int32_t* cursor,
               int32_t* offsets, int32_t* rows, int32_t* pos, cudaStream_t s);
// xs[i, :] = x[rows[i], :] for i < P rows (only the first offsets[E] are meaningful).
void moe_gather_rows(float* xs, const float* x, const int32_t* rows, const int32_t* offsets, int64_t E,
                     int64_t P, int64_t D, cudaStream_t s);

// ---- path choice (host) ----------------------------------------------------------------------------------
// Which way CudaBackend::moe_experts runs: Decode (the kernels above per pair), Grouped (device-side counting
// sort + grouped GEMMs), Loop (routed ids copied to the host, per-expert GEMV/GEMM; the fallback for mixed
// expert formats or shapes). Auto picks Decode for T·k ≤ moe_decode_max_pairs(), else Grouped when
// possible. Forcing is for tests and benchmarks (process-wide); a forced path that cannot serve a call
// falls back to Loop, and moe_last_path() says what the last call ran.
enum class MoePath : int { Auto, Decode, Grouped, Loop };
void force_moe_path(MoePath p);
MoePath moe_last_path();
int64_t moe_decode_max_pairs();

}  // namespace bloomery::cuda
