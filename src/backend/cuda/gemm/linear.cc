// CudaBackend matmul: shape checks and the choice of kernel (decode GEMV for few rows, GEMM for prompts).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/op_args.h"
#include "backend/op_checks.h"

namespace bloomery::cuda {

// ---- matmul ----------------------------------------------------------------------------------------------

namespace {

// Stored bytes of n rows of a weight (the per-op times): the format table's element bits plus one scale byte
// per 16 for FP4.
double stored_bytes(const DeviceWeight& dw, int64_t n) {
  const FormatInfo& fi = format_info(dw.format);
  const double per_elem = fi.bits_per_element / 8.0 + (fi.bits_per_element == 4 ? 1.0 / 16 : 0.0);
  return per_elem * static_cast<double>(n) * static_cast<double>(dw.cols);
}

// The device weight of a product, after the check every product takes.
const DeviceWeight& product_weight(const Weight& w) {
  const DeviceWeight& dw = device_weight(w, "matmul");
  BLOOMERY_NEED(static_cast<int64_t>(dw.cols) == w.cols() && static_cast<int64_t>(dw.rows) == w.rows(),
                "matmul", "a weight whose logical rows are its stored rows",
                w.name() + " " + shape_string(w.shape()));
  return dw;
}

}  // namespace

void CudaBackend::linear(float* y, const float* x, int64_t T, const DeviceWeight& dw, int64_t row0, int64_t n,
                         const cuda::Epilogue& e) {
  const int64_t K = static_cast<int64_t>(dw.cols);
  // Few rows: one GEMV pass (memory-bound, f32, the weight read once per 8 rows). More: the tensor-core GEMM
  // (gemm(): the weight read once per 128 rows). Measured on the H200 (gemm_tc_test GemvGemmCrossover,
  // default split-BF16 mode), GEMV vs GEMM in µs: NVFP4 q_proj [12288, 2560] T=8 64 vs 103, T=16 128 vs 103;
  // expert down [2560, 640] T=8 14 vs 20, T=16 28 vs 20; expert up [640, 2560] T=4 20 vs 18, T=8 28 vs 18;
  // BF16 q_proj T=8 84 vs 81. A second GEMV pass doubles GEMV's time while the GEMM stays flat to T = 128, so
  // the switch sits after the first pass: GEMV for T ≤ 8, GEMM beyond.
  constexpr int64_t kGemvUpTo = kGemvMaxRows;
  std::string key;
  double bytes = 0;
  if (op_times_.enabled()) {
    bytes = stored_bytes(dw, n);
    key = std::string(T <= kGemvUpTo ? "gemv " : "gemm ") + std::string(format_name(dw.format)) + " [" +
          std::to_string(n) + ", " + std::to_string(K) + "] T" + std::to_string(T);
  }
  OpScope op_scope(op_times_, stream_, std::move(key), bytes);
  if (T <= kGemvUpTo) {
    for (int64_t t0 = 0; t0 < T; t0 += kGemvMaxRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kGemvMaxRows, T - t0));
      gemv(dw, row0, n, x + t0 * K, rows, y + t0 * n, stream_, e);
    }
  } else {
    gemm(dw, row0, n, x, T, y, stream_);
    epilogue(y, T * n, e, stream_);
  }
}

// out = e(x · W[row0 : row0 + n]ᵀ) after the checks every product takes (matmul, matmul_rows, the epilogue).
void CudaBackend::linear_checked(Tensor& out, const Tensor& x, const Weight& w, int64_t row0, int64_t n,
                                 const cuda::Epilogue& e) {
  const DeviceWeight& dw = product_weight(w);
  check_matmul_args(out, x, w, row0, n);
  linear(out.out_f32({&x}), x.f32(), x.rows(), dw, row0, n, e);
}

void CudaBackend::matmul_rows(Tensor& out, const Tensor& x, const Weight& w, int64_t row0, int64_t n) {
  linear_checked(out, x, w, row0, n, {});
}

void CudaBackend::matmul(Tensor& out, const Tensor& x, const Weight& w) {
  linear_checked(out, x, w, 0, w.rows(), {});
}

void CudaBackend::matmul_epilogue(Tensor& out, const Tensor& x, const Weight& w, const Backend::Epilogue& e) {
  if (!fuse_epilogues_) return Backend::matmul_epilogue(out, x, w, e);  // the separate ops (bench A/B)
  if (e.elementwise_only()) return linear_checked(out, x, w, 0, w.rows(), {e.pre, act_code(e.act), e.post});
  // A row scale and an accumulating store live in the split-K GEMV's store only: decode rows.
  const int64_t T = x.rows();
  const DeviceWeight& dw = product_weight(w);
  const GemvProduct one[] = {{dw, nullptr, {}}};
  if (!block_ops_ || T > kGemvMaxRows || !gemv_group_applies(one, x.f32(), static_cast<int>(T)))
    return Backend::matmul_epilogue(out, x, w, e);
  check_matmul_args(out, x, w, 0, w.rows());
  if (e.row_scale)
    BLOOMERY_NEED(e.row_scale->numel() == T, "matmul_epilogue", std::to_string(T) + " row scales",
                  e.row_scale->shape_str());
  const cuda::Epilogue ce{e.pre, act_code(e.act), e.post, e.row_scale ? e.row_scale->f32() : nullptr,
                          e.accumulate};
  float* y = e.accumulate ? out.f32() : (e.row_scale ? out.out_f32({&x, e.row_scale}) : out.out_f32({&x}));
  linear(y, x.f32(), T, dw, 0, w.rows(), ce);
}

// Decode products of one x in one launch per weight width (a dependent kernel costs ~4 µs however little it
// reads, docs/performance.md); prompts, a lone product and the separate-epilogue A/B mode one at a time.
void CudaBackend::matmul_group(std::span<const Backend::Product> products, const Tensor& x) {
  const int64_t T = x.rows();
  const bool elementwise = std::all_of(products.begin(), products.end(),
                                       [](const Backend::Product& p) { return p.e.elementwise_only(); });
  if (!group_products_ || !fuse_epilogues_ || !elementwise || products.size() < 2 || T > kGemvMaxRows)
    return Backend::matmul_group(products, x);
  std::vector<GemvProduct> ps;
  ps.reserve(products.size());
  double bytes = 0;
  for (const Backend::Product& p : products) {
    const DeviceWeight& dw = product_weight(*p.w);
    check_matmul_args(*p.out, x, *p.w, 0, p.w->rows());
    ps.push_back({dw, nullptr, {p.e.pre, act_code(p.e.act), p.e.post}});
    if (op_times_.enabled()) bytes += stored_bytes(dw, static_cast<int64_t>(dw.rows));
  }
  if (!gemv_group_applies(ps, x.f32(), static_cast<int>(T))) return Backend::matmul_group(products, x);
  for (size_t i = 0; i < ps.size(); ++i) ps[i].y = products[i].out->out_f32({&x});
  OpScope op_scope(op_times_, stream_,
                   op_times_.enabled() ? "gemv group of " + std::to_string(ps.size()) : "", bytes);
  gemv_group(ps, x.f32(), static_cast<int>(T), stream_);
}

}  // namespace bloomery::cuda
