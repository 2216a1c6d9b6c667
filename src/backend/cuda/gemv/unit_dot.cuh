// One loaded weight unit against up to kGemvMaxRows rows of x: the inner step of the split-K GEMV (gemv.cu)
// and of the hyper-connection read's fused up product (family/hc_ple.cu), one piece so that both sum a
// product in the same order and rounding (the fused op is bit-equal to the GEMV then the mix).
#pragma once

#include "backend/cuda/kernels.h"
#include "backend/cuda/weight_access.cuh"

namespace bloomery::cuda {

// acc[t] += scale · Σ_e v[e] · x[t, k0 + e] for t < T: the unit's unscaled elements times x in FMAs in
// element order, then the unit's scale applied once to that partial sum (FP8 and FP4 widths; added as is
// otherwise). x rows are K floats apart, 16-byte aligned at k0.
template <Width W>
__device__ __forceinline__ void unit_dot_rows(const RawUnit<W>& raw, bool f16, const float* __restrict__ x,
                                              uint64_t K, uint64_t k0, int T, float (&acc)[kGemvMaxRows]) {
  constexpr int E = Unit<W>::kElems;
  constexpr bool kScaled = W == Width::Fp8 || W == Width::Fp4;
  float v[E];
  unscaled_unit<W>(raw, f16, v);
#pragma unroll
  for (int t = 0; t < kGemvMaxRows; ++t) {
    if (t >= T) break;
    const float4* xr = reinterpret_cast<const float4*>(x + t * K + k0);
    float p = 0.0f;
#pragma unroll
    for (int e = 0; e < E / 4; ++e) {
      const float4 q = __ldg(xr + e);
      p = fmaf(v[4 * e], q.x, p);
      p = fmaf(v[4 * e + 1], q.y, p);
      p = fmaf(v[4 * e + 2], q.z, p);
      p = fmaf(v[4 * e + 3], q.w, p);
    }
    acc[t] = kScaled ? fmaf(raw.s, p, acc[t]) : acc[t] + p;
  }
}

}  // namespace bloomery::cuda
