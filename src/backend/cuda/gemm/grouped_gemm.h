// Grouped (routed-expert) prompt GEMM: one launch multiplies every expert's contiguous block of gathered
// token rows by that expert's stored-format weight. The row counts stay on the card (offsets), so the MoE
// prompt path needs no host sync to launch it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/dequant.h"
#include "formats/format_table.h"

namespace bloomery::cuda {

// Routed-expert prompt GEMM: for every expert e < E with rows [offsets[e], offsets[e+1]) of xs,
// ys[r, 0:n] = xs[r, 0:K] · W_e[0:n, 0:K]ᵀ. weights: device array of E DeviceWeight (same format, n rows,
// K cols each); offsets: device int32[E+1] (exclusive prefix sums, offsets[E] ≤ max_rows). Tiles past an
// expert's rows exit at once, so no host sync is needed to know the counts.
void grouped_gemm(const DeviceWeight* weights, int64_t E, const int32_t* offsets, int64_t max_rows, int64_t n,
                  int64_t K, FormatId format, const float* xs, float* ys, cudaStream_t s);

}  // namespace bloomery::cuda
