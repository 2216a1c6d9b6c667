// CudaBackend matmul: shape checks and the choice of kernel (decode GEMV for few rows, GEMM for prompts).
#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/op_args.h"

namespace bloomery::cuda {

// ---- matmul ----------------------------------------------------------------------------------------------

void CudaBackend::linear(float* y, const float* x, int64_t T, const DeviceWeight& dw, int64_t row0,
                         int64_t n) {
  const int64_t K = static_cast<int64_t>(dw.cols);
  // Few rows: GEMV passes of up to 8 rows each (memory-bound, the weight read once per pass). Many: tiled
  // GEMM.
  constexpr int64_t kGemvUpTo = 32;
  if (T <= kGemvUpTo) {
    for (int64_t t0 = 0; t0 < T; t0 += kGemvMaxRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kGemvMaxRows, T - t0));
      gemv(dw, row0, n, x + t0 * K, rows, y + t0 * n, stream_);
    }
  } else {
    gemm(dw, row0, n, x, T, y, stream_);
  }
}

void CudaBackend::matmul_rows(Tensor& out, const Tensor& x, const Weight& w, int64_t row0, int64_t n) {
  const DeviceWeight& dw = device_weight(w, "matmul");
  const int64_t K = w.cols(), T = x.rows();
  need(static_cast<int64_t>(dw.cols) == K && static_cast<int64_t>(dw.rows) == w.rows(), "matmul",
       "a weight whose logical rows are its stored rows", w.name() + " " + shape_string(w.shape()));
  need(x.cols() == K, "matmul", "x [T, " + std::to_string(K) + "] for " + w.name(), x.shape_str());
  need(row0 >= 0 && n >= 0 && row0 + n <= w.rows(), "matmul", "rows within " + shape_string(w.shape()),
       std::to_string(row0) + "+" + std::to_string(n));
  need(out.numel() == T * n, "matmul",
       "out of [" + std::to_string(T) + ", " + std::to_string(n) + "] elements for " + w.name(),
       out.shape_str());
  linear(out.f32(), x.f32(), T, dw, row0, n);
}

void CudaBackend::matmul(Tensor& out, const Tensor& x, const Weight& w) {
  matmul_rows(out, x, w, 0, w.rows());
}

}  // namespace bloomery::cuda
