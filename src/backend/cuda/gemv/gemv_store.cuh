// The store of one decode-GEMV output element with its epilogue, shared by the split-K kernel (gemv.cu) and
// the tensor-core kernel (gemv_tc.cu) so both round the tail exactly as the separate ops do.
#pragma once

#include "backend/cuda/kernels.h"
#include "backend/cuda/misc/device_math.cuh"

namespace bloomery::cuda {

// One element of row t of the product: the epilogue, then the row scale and the accumulation, each rounded
// as its separate op (scale_rows, add) rounds it.
__device__ __forceinline__ void store_product(const Epilogue& e, int t, float* y, float v) {
  v = epilogue_apply(e.pre, e.act, e.post, v);
  if (e.row_scale) v = __fmul_rn(v, e.row_scale[t]);
  *y = e.accumulate ? __fadd_rn(*y, v) : v;
}

}  // namespace bloomery::cuda
