// Every format's GPU dequantiser against the CPU decoder (formats/decode.h), bit for bit, at the real models'
// shapes, on random stored bytes (NaN-free scales; NaN codes are refused by validation before upload).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/dequant.h"
#include "formats/decode.h"

namespace bloomery {
namespace {

template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  explicit DeviceBuffer(size_t n) { BLOOMERY_CUDA_CHECK(cudaMalloc(&ptr, n * sizeof(T) + 1), "test alloc"); }
  DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) {
    BLOOMERY_CUDA_CHECK(cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
                        "upload");
  }
  ~DeviceBuffer() { cudaFree(ptr); }
};

std::vector<uint8_t> random_bytes(size_t n, std::mt19937& rng, uint8_t lo = 0, uint8_t hi = 255) {
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(d(rng));
  return v;
}

// E4M3 bytes without the NaN codes 0x7F/0xFF.
std::vector<uint8_t> random_e4m3(size_t n, std::mt19937& rng) {
  auto v = random_bytes(n, rng);
  for (auto& b : v)
    if ((b & 0x7F) == 0x7F) b ^= 0x01;
  return v;
}

std::vector<float> gpu_dequant(cuda::DeviceWeight w) {
  DeviceBuffer<float> out(w.rows * w.cols);
  cuda::dequantize(w, out.ptr, nullptr);
  BLOOMERY_CUDA_CHECK(cudaDeviceSynchronize(), "dequantize");
  std::vector<float> host(w.rows * w.cols);
  BLOOMERY_CUDA_CHECK(cudaMemcpy(host.data(), out.ptr, host.size() * 4, cudaMemcpyDeviceToHost), "download");
  return host;
}

std::vector<float> cpu_decode(const WeightBytes& w) {
  std::vector<float> out(w.rows * w.cols);
  decode_rows(w, 0, w.rows, out.data());
  return out;
}

void expect_bit_equal(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  size_t first = a.size();
  for (size_t i = 0; i < a.size() && first == a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], 4) != 0) first = i;
  EXPECT_EQ(first, a.size()) << what << ": first differing element " << first << " cpu " << a[first]
                             << " gpu " << b[first];
}

class GpuDequant : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no CUDA device";
  }
  std::mt19937 rng{1234};
};

TEST_F(GpuDequant, NvFp4RoutedExpertShape) {
  const uint64_t n = 640, k = 2560;
  auto data = random_bytes(n * k / 2, rng);
  auto scales = random_e4m3(n * k / 16, rng);
  for (auto& s : scales) s &= 0x7F;  // block scales are non-negative
  float global = 0.00037f;
  WeightBytes cpu{.format = FormatId::NVFP4,
                  .main_dtype = DType::U8,
                  .scale_dtype = DType::F8_E4M3,
                  .rows = n,
                  .cols = k};
  cpu.main = data;
  cpu.block_scale = scales;
  cpu.global_scale = {reinterpret_cast<const uint8_t*>(&global), 4};
  DeviceBuffer<uint8_t> d_data(data), d_scales(scales);
  cuda::DeviceWeight gw{.format = FormatId::NVFP4,
                        .rows = n,
                        .cols = k,
                        .data = d_data.ptr,
                        .block_scales = d_scales.ptr,
                        .global = nvfp4_global_multiplier(cpu)};
  expect_bit_equal(cpu_decode(cpu), gpu_dequant(gw), "NVFP4");
}

TEST_F(GpuDequant, MxFp8AttentionShape) {
  const uint64_t n = 6144, k = 2560;
  auto data = random_e4m3(n * k, rng);
  auto scales = random_bytes(n * k / 32, rng, 100, 140);
  WeightBytes cpu{.format = FormatId::MXFP8,
                  .main_dtype = DType::F8_E4M3,
                  .scale_dtype = DType::U8,
                  .rows = n,
                  .cols = k};
  cpu.main = data;
  cpu.block_scale = scales;
  DeviceBuffer<uint8_t> d_data(data), d_scales(scales);
  cuda::DeviceWeight gw{
      .format = FormatId::MXFP8, .rows = n, .cols = k, .data = d_data.ptr, .block_scales = d_scales.ptr};
  expect_bit_equal(cpu_decode(cpu), gpu_dequant(gw), "MXFP8");
}

TEST_F(GpuDequant, MxFp4) {
  const uint64_t n = 512, k = 2048;
  auto data = random_bytes(n * k / 2, rng);
  auto scales = random_bytes(n * k / 32, rng, 0, 254);
  WeightBytes cpu{
      .format = FormatId::MXFP4, .main_dtype = DType::U8, .scale_dtype = DType::U8, .rows = n, .cols = k};
  cpu.main = data;
  cpu.block_scale = scales;
  DeviceBuffer<uint8_t> d_data(data), d_scales(scales);
  cuda::DeviceWeight gw{
      .format = FormatId::MXFP4, .rows = n, .cols = k, .data = d_data.ptr, .block_scales = d_scales.ptr};
  expect_bit_equal(cpu_decode(cpu), gpu_dequant(gw), "MXFP4");
}

TEST_F(GpuDequant, Fp8BlockWithPartialTiles) {
  const uint64_t n = 640, k = 2600;  // 5 × 21 grid of 128-tiles, the last column partial
  const uint64_t gr = 5, gc = (k + 127) / 128;
  auto data = random_e4m3(n * k, rng);
  std::vector<float> grid(gr * gc);
  std::uniform_real_distribution<float> d(1e-4f, 1e-2f);
  for (auto& g : grid) g = d(rng);
  WeightBytes cpu{.format = FormatId::FP8_BLOCK,
                  .main_dtype = DType::F8_E4M3,
                  .scale_dtype = DType::F32,
                  .rows = n,
                  .cols = k,
                  .block_n = 128,
                  .block_k = 128};
  cpu.main = data;
  cpu.block_scale = {reinterpret_cast<const uint8_t*>(grid.data()), grid.size() * 4};
  DeviceBuffer<uint8_t> d_data(data);
  DeviceBuffer<float> d_grid(grid);
  cuda::DeviceWeight gw{.format = FormatId::FP8_BLOCK,
                        .rows = n,
                        .cols = k,
                        .data = d_data.ptr,
                        .scale_f32 = d_grid.ptr,
                        .block_n = 128,
                        .block_k = 128};
  expect_bit_equal(cpu_decode(cpu), gpu_dequant(gw), "FP8_BLOCK");
}

TEST_F(GpuDequant, Fp8TensorAndChannel) {
  const uint64_t n = 256, k = 2560;
  auto data = random_e4m3(n * k, rng);
  float s = 0.0123f;
  std::vector<float> ch(n);
  std::uniform_real_distribution<float> d(1e-3f, 1.0f);
  for (auto& c : ch) c = d(rng);
  DeviceBuffer<uint8_t> d_data(data);
  DeviceBuffer<float> d_ch(ch);

  WeightBytes t{.format = FormatId::FP8_TENSOR,
                .main_dtype = DType::F8_E4M3,
                .global_dtype = DType::F32,
                .rows = n,
                .cols = k};
  t.main = data;
  t.global_scale = {reinterpret_cast<const uint8_t*>(&s), 4};
  cuda::DeviceWeight gt{
      .format = FormatId::FP8_TENSOR, .rows = n, .cols = k, .data = d_data.ptr, .global = s};
  expect_bit_equal(cpu_decode(t), gpu_dequant(gt), "FP8_TENSOR");

  WeightBytes c{.format = FormatId::FP8_CHANNEL,
                .main_dtype = DType::F8_E4M3,
                .scale_dtype = DType::F32,
                .rows = n,
                .cols = k};
  c.main = data;
  c.block_scale = {reinterpret_cast<const uint8_t*>(ch.data()), ch.size() * 4};
  cuda::DeviceWeight gc{
      .format = FormatId::FP8_CHANNEL, .rows = n, .cols = k, .data = d_data.ptr, .scale_f32 = d_ch.ptr};
  expect_bit_equal(cpu_decode(c), gpu_dequant(gc), "FP8_CHANNEL");
}

TEST_F(GpuDequant, DenseBf16) {
  const uint64_t n = 128, k = 2560;
  auto data = random_bytes(n * k * 2, rng);
  WeightBytes cpu{.format = FormatId::BF16, .main_dtype = DType::BF16, .rows = n, .cols = k};
  cpu.main = data;
  DeviceBuffer<uint8_t> d_data(data);
  cuda::DeviceWeight gw{.format = FormatId::BF16, .rows = n, .cols = k, .data = d_data.ptr};
  expect_bit_equal(cpu_decode(cpu), gpu_dequant(gw), "BF16");
}

}  // namespace
}  // namespace bloomery
