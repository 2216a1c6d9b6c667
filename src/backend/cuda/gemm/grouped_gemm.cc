// grouped_gemm entry: argument checks, then the kernel that fits the format and shape.
#include "backend/cuda/gemm/grouped_gemm.h"

#include <string>

#include "backend/backend.h"
#include "backend/cuda/env_switch.h"
#include "backend/cuda/gemm/gemm_internal.h"

namespace bloomery::cuda {
GroupedTile grouped_tile() {
  static const GroupedTile tile =
      env_is("BLOOMERY_CUDA_GROUPED_TILE", "wide") ? GroupedTile::Wide : GroupedTile::Tall;
  return tile;
}

void grouped_gemm(const DeviceWeight* weights, int64_t E, const int32_t* offsets, int64_t max_rows, int64_t n,
                  int64_t K, FormatId format, const float* xs, float* ys, cudaStream_t s) {
  BLOOMERY_NEED(E >= 0 && E <= 65535 && max_rows >= 0 && n >= 0 && K > 0, "grouped_gemm",
                "0 <= E <= 65535 experts, max_rows >= 0, n >= 0, K > 0",
                "E=" + std::to_string(E) + " max_rows=" + std::to_string(max_rows) +
                    " n=" + std::to_string(n) + " K=" + std::to_string(K));
  // The experts' weights are separate cudaMalloc blocks (256-byte aligned), so only K and xs decide. No
  // row rule as in gemm(): moe_experts takes this path past kDecodeMaxPairs (320) pairs, more tokens than
  // gemm()'s split-BF16 rows at every family's top-k (≤ 10).
  const GemmMode mode = gemm_mode();
  if (mode != GemmMode::Simt && tc_gemm_supported(K, xs, xs))
    return tc_grouped_gemm(weights, E, offsets, max_rows, n, K, format, xs, ys, mode == GemmMode::Bf16x2,
                           grouped_tile(), s);
  gemm_simt_grouped(weights, E, offsets, max_rows, n, K, format, xs, ys, s);
}

}  // namespace bloomery::cuda
