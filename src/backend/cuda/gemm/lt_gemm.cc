// Prompt products on BF16-stored weights through cuBLASLt (the CUDA toolkit's tuned GEMMs) instead of the
// project's tensor-core kernel, which exists for the formats that need in-register dequantisation (FP4, FP8
// with block scales). y[T, n] = x[T, K] · W[row0 : row0 + n, K]ᵀ: in cuBLAS's column-major terms
// Yᵀ[n, T] = W[n, K] · Xᵀ[K, T], A = W (its row-major [n, K] is column-major K × n: op T), B = BF16(x)
// (column-major K × T: op N), D = y (column-major n × T, ld n = row-major [T, n]); f32 accumulate, f32 out.
// Split activations (the default GEMM mode) run the low terms as a second product with beta = 1.
#ifdef BLOOMERY_HAVE_CUBLASLT
#include <cublasLt.h>
#endif

#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/env_switch.h"
#include "backend/cuda/gemm/gemm_internal.h"
#include "backend/cuda/kernels.h"
#include "core/error.h"

namespace bloomery::cuda {
namespace {

// On by default: with both variants warmed, the 2026-12-02 pp4096 A/B (bench/results/decode-group-2026-12-02)
// favoured cuBLASLt in every round, 1,907 -> 2,055 tok/s. BLOOMERY_CUDA_GEMM_LIB=0 turns it off.
std::atomic<bool>& enabled_slot() {
  static std::atomic<bool> on{!env_is("BLOOMERY_CUDA_GEMM_LIB", "0")};
  return on;
}

#ifdef BLOOMERY_HAVE_CUBLASLT
constexpr size_t kWorkspace = size_t{32} << 20;  // cuBLASLt's recommendation for Hopper

void lt_check(cublasStatus_t st, const std::string& what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    raise("E_CUDA", Where{"", "", "cuBLASLt"}, what + " to succeed",
          std::string(cublasLtGetStatusName(st)) + ": " + cublasLtGetStatusString(st));
}

// One handle per device and one workspace per stream (tensor-parallel ranks of one process run several
// backends at once: on several GPUs, or on one GPU with their own streams, whose matmuls must not share a
// workspace); the mutex keeps the bookkeeping safe. The heuristic's choice is cached per shape: asking costs
// tens of microseconds. Null for a device past the table (the caller keeps the project's kernel).
class Lt {
 public:
  static Lt* get() {
    static std::array<Lt, 16> per_device;
    int dev = 0;
    BLOOMERY_CUDA_CHECK(cudaGetDevice(&dev), "cuBLASLt: current device");
    return dev >= 0 && dev < int(per_device.size()) ? &per_device[size_t(dev)] : nullptr;
  }

  void matmul(const void* w, int64_t n, int64_t K, const void* xb, int64_t T, float* y, float beta,
              cudaStream_t s) {
    std::lock_guard<std::mutex> lock(mu_);
    ready();
    const std::string shape = "[" + std::to_string(T) + ", " + std::to_string(K) + "] x [" +
                              std::to_string(n) + ", " + std::to_string(K) + "]T";
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    lt_check(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul descriptor " + shape);
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    lt_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "op A");
    lt_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "op B");
    lt_check(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, K, n, K), "layout W " + shape);
    lt_check(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, K, T, K), "layout x " + shape);
    lt_check(cublasLtMatrixLayoutCreate(&d, CUDA_R_32F, n, T, n), "layout y " + shape);
    const cublasLtMatmulAlgo_t algo = choose(op, a, b, d, n, T, K, shape);
    const float alpha = 1.0f;
    const cublasStatus_t st = cublasLtMatmul(handle_, op, &alpha, w, a, xb, b, &beta, y, d, y, d, &algo,
                                             workspace(s), kWorkspace, s);
    cublasLtMatrixLayoutDestroy(d), cublasLtMatrixLayoutDestroy(b), cublasLtMatrixLayoutDestroy(a);
    cublasLtMatmulDescDestroy(op);
    lt_check(st, "matmul " + shape);
  }

 private:
  void ready() {
    if (handle_) return;
    lt_check(cublasLtCreate(&handle_), "handle");
  }
  void* workspace(cudaStream_t s) {
    void*& w = workspaces_[s];
    if (!w) BLOOMERY_CUDA_CHECK(cudaMalloc(&w, kWorkspace), "cuBLASLt workspace");
    return w;
  }

  cublasLtMatmulAlgo_t choose(cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                              cublasLtMatrixLayout_t d, int64_t n, int64_t T, int64_t K,
                              const std::string& shape) {
    const auto key = std::make_tuple(n, T, K);
    if (auto it = algos_.find(key); it != algos_.end()) return it->second;
    cublasLtMatmulPreference_t pref = nullptr;
    lt_check(cublasLtMatmulPreferenceCreate(&pref), "preference");
    const size_t ws = kWorkspace;
    lt_check(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
        "workspace preference");
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(handle_, op, a, b, d, d, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    lt_check(st, "heuristic " + shape);
    if (found == 0)
      raise("E_CUDA", Where{"", "", "cuBLASLt"}, "an algorithm for " + shape, "none (heuristic found 0)");
    return algos_.emplace(key, result.algo).first->second;
  }

  std::mutex mu_;
  cublasLtHandle_t handle_ = nullptr;
  std::map<cudaStream_t, void*> workspaces_;
  std::map<std::tuple<int64_t, int64_t, int64_t>, cublasLtMatmulAlgo_t> algos_;
};

#endif  // BLOOMERY_HAVE_CUBLASLT

}  // namespace

bool gemm_library() {
  return enabled_slot().load(std::memory_order_relaxed);
}

void set_gemm_library(bool on) {
  enabled_slot().store(on, std::memory_order_relaxed);
}

bool lt_gemm(const DeviceWeight& w, int64_t row0, int64_t n, const float* x, int64_t T, float* y, bool split,
             cudaStream_t s) {
#ifndef BLOOMERY_HAVE_CUBLASLT
  return false;  // built without cuBLASLt (CMakeLists: the toolkit had none)
#else
  const int64_t K = static_cast<int64_t>(w.cols);
  if (!gemm_library() || w.format != FormatId::BF16 || n == 0 || T == 0 || K % 8 != 0 ||
      reinterpret_cast<uintptr_t>(x) % 16 != 0)
    return false;
  // Decode steps with more than 8 rows are recorded into CUDA graphs: they keep the project's kernel (the
  // library's capture behaviour is not what this path was measured on).
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  BLOOMERY_CUDA_CHECK(cudaStreamIsCapturing(s, &capture), "cuBLASLt: stream capture status");
  if (capture != cudaStreamCaptureStatusNone) return false;
  Lt* lt = Lt::get();
  if (!lt) return false;
  const auto* wrows = static_cast<const uint16_t*>(w.data) + row0 * K;
  void* xb = round_activations_bf16(x, T, K, split, s);
  lt->matmul(wrows, n, K, xb, T, y, 0.0f, s);
  if (split) lt->matmul(wrows, n, K, static_cast<const uint16_t*>(xb) + T * K, T, y, 1.0f, s);
  BLOOMERY_CUDA_CHECK(cudaFreeAsync(xb, s), "cuBLASLt: free BF16 activations");
  return true;
#endif
}

}  // namespace bloomery::cuda
