#include "backend/cuda/dequant.h"

#include <array>
#include <string>

#include <cuda_fp16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/elements.cuh"
#include "backend/cuda/misc/pdl.cuh"

namespace bloomery::cuda {
namespace {

// One thread per output element keeps these kernels obviously right; they are checks and prompt-path helpers,
// not the decode hot path (that reads stored formats inside the GEMV).
__device__ __forceinline__ bool element_index(const DeviceWeight& w, uint64_t& n, uint64_t& k) {
  const uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  if (i >= w.rows * w.cols) return false;
  n = i / w.cols;
  k = i % w.cols;
  return true;
}

__global__ void dequant_bf16(DeviceWeight w, float* out) {
  pdl_wait();
  pdl_launch_dependents();
  uint64_t n, k;
  if (!element_index(w, n, k)) return;
  out[n * w.cols + k] = bf16_to_f32(static_cast<const uint16_t*>(w.data)[n * w.cols + k]);
}

__global__ void dequant_f16(DeviceWeight w, float* out) {
  pdl_wait();
  pdl_launch_dependents();
  uint64_t n, k;
  if (!element_index(w, n, k)) return;
  out[n * w.cols + k] = __half2float(static_cast<const __half*>(w.data)[n * w.cols + k]);
}

__global__ void dequant_f32(DeviceWeight w, float* out) {
  pdl_wait();
  pdl_launch_dependents();
  uint64_t n, k;
  if (!element_index(w, n, k)) return;
  out[n * w.cols + k] = static_cast<const float*>(w.data)[n * w.cols + k];
}

__device__ __forceinline__ uint32_t nibble(const DeviceWeight& w, uint64_t n, uint64_t k) {
  const uint8_t byte = static_cast<const uint8_t*>(w.data)[n * (w.cols / 2) + k / 2];
  return (k & 1) ? (byte >> 4) : (byte & 0xFu);  // low nibble = even element
}

__global__ void dequant_nvfp4(DeviceWeight w, float* out) {
  pdl_wait();
  pdl_launch_dependents();
  uint64_t n, k;
  if (!element_index(w, n, k)) return;
  const float s = e4m3_to_f32(w.block_scales[n * (w.cols / 16) + k / 16]);
  out[n * w.cols + k] = __fmul_rn(__fmul_rn(e2m1_to_f32(nibble(w, n, k)), s), w.global);
}

__global__ void dequant_mxfp4(DeviceWeight w, float* out) {
  pdl_wait();
  pdl_launch_dependents();
  uint64_t n, k;
  if (!element_index(w, n, k)) return;
  const float s = e8m0_to_f32(w.block_scales[n * (w.cols / 32) + k / 32]);
  out[n * w.cols + k] = __fmul_rn(e2m1_to_f32(nibble(w, n, k)), s);
}

__device__ __forceinline__ float fp8_element(const DeviceWeight& w, uint64_t n, uint64_t k) {
  return e4m3_to_f32(static_cast<const uint8_t*>(w.data)[n * w.cols + k]);
}

__global__ void dequant_mxfp8(DeviceWeight w, float* out) {
  pdl_wait();
  pdl_launch_dependents();
  uint64_t n, k;
  if (!element_index(w, n, k)) return;
  const float s = e8m0_to_f32(w.block_scales[n * (w.cols / 32) + k / 32]);
  out[n * w.cols + k] = __fmul_rn(fp8_element(w, n, k), s);
}

__global__ void dequant_fp8_tensor(DeviceWeight w, float* out) {
  pdl_wait();
  pdl_launch_dependents();
  uint64_t n, k;
  if (!element_index(w, n, k)) return;
  out[n * w.cols + k] = __fmul_rn(fp8_element(w, n, k), w.global);
}

__global__ void dequant_fp8_channel(DeviceWeight w, float* out) {
  pdl_wait();
  pdl_launch_dependents();
  uint64_t n, k;
  if (!element_index(w, n, k)) return;
  out[n * w.cols + k] = __fmul_rn(fp8_element(w, n, k), w.scale_f32[n]);
}

__global__ void dequant_fp8_block(DeviceWeight w, float* out) {
  pdl_wait();
  pdl_launch_dependents();
  uint64_t n, k;
  if (!element_index(w, n, k)) return;
  const uint64_t grid_cols = (w.cols + w.block_k - 1) / w.block_k;
  out[n * w.cols + k] =
      __fmul_rn(fp8_element(w, n, k), w.scale_f32[(n / w.block_n) * grid_cols + k / w.block_k]);
}

using Kernel = void (*)(DeviceWeight, float*);

// The GPU column of the format table: one dequantiser per FormatId, in enum order.
const std::array<Kernel, static_cast<size_t>(FormatId::kCount)> kKernels = {
    dequant_bf16,         // BF16
    dequant_f16,          // F16
    dequant_f32,          // F32
    dequant_nvfp4,        // NVFP4
    dequant_nvfp4,        // W4A16_NVFP4: same tensors, activations unquantised
    dequant_nvfp4,        // NVFP4_CT: the host passes global = 1/weight_global_scale
    dequant_mxfp4,        // MXFP4
    dequant_mxfp8,        // MXFP8
    dequant_fp8_tensor,   // FP8_TENSOR
    dequant_fp8_channel,  // FP8_CHANNEL
    dequant_fp8_block,    // FP8_BLOCK
};

}  // namespace

void dequantize(const DeviceWeight& w, float* out, cudaStream_t stream) {
  const std::string what = "dequantize " + std::string(format_name(w.format)) + " [" +
                           std::to_string(w.rows) + ", " + std::to_string(w.cols) + "]";
  const uint64_t total = w.rows * w.cols;
  if (total == 0) return;
  constexpr unsigned kThreads = 256;
  const uint64_t blocks = (total + kThreads - 1) / kThreads;
  pdl_launch(kKernels[static_cast<size_t>(w.format)], static_cast<unsigned>(blocks), kThreads, 0, stream, w,
             out);
  BLOOMERY_CUDA_CHECK_LAUNCH(what);
}

}  // namespace bloomery::cuda
