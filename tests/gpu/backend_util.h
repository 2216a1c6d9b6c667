// Helpers of the CUDA-vs-CPU backend tests: both backends, random data, stored-format weights at real shapes,
// and comparisons with stated bounds.
#pragma once

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gemm/gemm_internal.h"
#include "formats/decode.h"

namespace bloomery::gputest {

// The prompt GEMM mode of the GPU unit tests: split-BF16 activations (the reference mode), so that products
// stay within the f32-style bounds they are held to against the CPU whatever mode BLOOMERY_CUDA_GEMM names
// for the run. The accuracy gate (GoldenCuda) runs the engine's own mode at start instead
// (golden_cuda_test.cc), so `BLOOMERY_CUDA_GEMM=bf16 test_gpu` judges plain BF16 activations by the gate.
inline cuda::GemmMode unit_test_gemm_mode() {
  return cuda::GemmMode::Bf16x2;
}

class UnitTestGemmMode : public ::testing::Environment {
 public:
  void SetUp() override { cuda::set_gemm_mode(unit_test_gemm_mode()); }
};

inline ::testing::Environment* const kUnitTestGemmMode =
    ::testing::AddGlobalTestEnvironment(new UnitTestGemmMode);

// Sets (or, with nullptr, unsets) an environment variable for one scope, then restores what it was.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* was = std::getenv(name);
    had_ = was != nullptr;
    if (had_) saved_ = was;
    if (value) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, saved_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string saved_;
};

inline bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

class BackendPair : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
    cpu_ = std::make_unique<cpu::CpuBackend>(0);
    gpu_ = std::make_unique<cuda::CudaBackend>(0);
  }
  std::vector<float> randn(size_t n, float sd = 1.0f) {
    std::normal_distribution<float> d(0.0f, sd);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng_);
    return v;
  }
  std::vector<float> uniform(size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng_);
    return v;
  }
  std::unique_ptr<cpu::CpuBackend> cpu_;
  std::unique_ptr<cuda::CudaBackend> gpu_;
  std::mt19937 rng_{20261129};
};

// max_i |a_i − b_i| / (scale_i) where scale_i = bound_i (per element) — returns the worst ratio; ≤ 1 passes.
inline double worst_ratio(const std::vector<float>& gpu, const std::vector<float>& cpu,
                          const std::vector<double>& bound, size_t* where = nullptr) {
  double worst = 0.0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    const double d = std::fabs(static_cast<double>(gpu[i]) - cpu[i]);
    const double r = std::isfinite(gpu[i]) ? d / bound[i] : INFINITY;
    if (r > worst) {
      worst = r;
      if (where) *where = i;
    }
  }
  return worst;
}

// Elementwise closeness: |g − c| ≤ rel·|c| + abs.
inline void expect_close(const std::vector<float>& gpu, const std::vector<float>& cpu, double rel, double abs,
                         const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  std::vector<double> bound(cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) bound[i] = rel * std::fabs(cpu[i]) + abs;
  size_t at = 0;
  const double r = worst_ratio(gpu, cpu, bound, &at);
  EXPECT_LE(r, 1.0) << what << ": element " << at << " gpu " << gpu[at] << " cpu " << cpu[at];
}

// Milliseconds per call of fn over `reps` calls back to back, after one untimed call and a synchronize of
// `be` (timing tests, not pass/fail).
template <class F>
double ms_per_call(cuda::CudaBackend& be, F&& fn, int reps) {
  fn();
  be.synchronize();
  cudaEvent_t a, b;
  cudaEventCreate(&a), cudaEventCreate(&b);
  cudaEventRecord(a);
  for (int i = 0; i < reps; ++i) fn();
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a), cudaEventDestroy(b);
  return ms / reps;
}

// Closeness relative to the largest reference magnitude: max|g − c| ≤ tol · max|c| (recurrences whose
// outputs have no per-element scale).
inline double max_rel(const std::vector<float>& gpu, const std::vector<float>& cpu) {
  double m = 0.0, d = 0.0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    m = std::max(m, std::fabs(static_cast<double>(cpu[i])));
    d = std::max(d, std::isfinite(gpu[i]) ? std::fabs(static_cast<double>(gpu[i]) - cpu[i]) : INFINITY);
  }
  return m > 0 ? d / m : d;
}

// Stored bytes of a random weight in one format at [n, k]; `decoded` gets the CPU decoder's f32 values.
struct StoredWeight {
  WeightBytes wb;
  std::vector<uint8_t> main, scales;
  std::vector<float> grid;
  float global = 1.0f;
  std::vector<float> decoded;
};

inline std::vector<uint8_t> random_bytes(size_t n, std::mt19937& rng, int lo = 0, int hi = 255) {
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(d(rng));
  return v;
}

// E4M3 bytes without NaN codes, magnitudes kept moderate (exponent field ≤ 9) so products stay O(1).
inline std::vector<uint8_t> random_e4m3(size_t n, std::mt19937& rng, bool nonneg = false) {
  auto v = random_bytes(n, rng);
  for (auto& b : v) {
    uint8_t e = (b >> 3) & 0xF;
    if (e > 9) e = static_cast<uint8_t>(e - 6);
    b = static_cast<uint8_t>((b & 0x87) | (e << 3));
    if (nonneg) b &= 0x7F;
  }
  return v;
}

// Points the WeightBytes at the filled buffers and decodes the reference rows (CPU decoder).
inline void finish_stored(StoredWeight& s) {
  WeightBytes& w = s.wb;
  w.main = s.main;
  if (!s.scales.empty()) w.block_scale = s.scales;
  if (!s.grid.empty()) w.block_scale = {reinterpret_cast<const uint8_t*>(s.grid.data()), s.grid.size() * 4};
  s.decoded.resize(w.rows * w.cols);
  decode_rows(w, 0, w.rows, s.decoded.data());
}

inline std::unique_ptr<StoredWeight> make_stored(FormatId f, uint64_t n, uint64_t k, std::mt19937& rng) {
  auto s = std::make_unique<StoredWeight>();
  WeightBytes& w = s->wb;
  w.format = f;
  w.rows = n;
  w.cols = k;
  switch (f) {
    case FormatId::NVFP4:
      s->main = random_bytes(n * k / 2, rng);
      s->scales = random_e4m3(n * k / 16, rng, true);
      s->global = 0.0123f;
      w.main_dtype = DType::U8;
      w.scale_dtype = DType::F8_E4M3;
      w.global_scale = {reinterpret_cast<const uint8_t*>(&s->global), 4};
      break;
    case FormatId::MXFP8:
      s->main = random_e4m3(n * k, rng);
      s->scales = random_bytes(n * k / 32, rng, 120, 130);
      w.main_dtype = DType::F8_E4M3;
      w.scale_dtype = DType::U8;
      break;
    case FormatId::FP8_BLOCK: {
      s->main = random_e4m3(n * k, rng);
      const uint64_t g = ((n + 127) / 128) * ((k + 127) / 128);
      std::uniform_real_distribution<float> d(1e-3f, 1e-1f);
      s->grid.resize(g);
      for (auto& x : s->grid) x = d(rng);
      w.main_dtype = DType::F8_E4M3;
      w.scale_dtype = DType::F32;
      w.block_n = w.block_k = 128;
      break;
    }
    default: {  // BF16
      s->main = random_bytes(n * k * 2, rng);
      for (size_t i = 1; i < s->main.size(); i += 2)  // high byte: sign, exponent near 1 (|w| in [2^-7, 2))
        s->main[i] = static_cast<uint8_t>((s->main[i] & 0x80) | (0x3C + (s->main[i] & 3)));
      w.main_dtype = DType::BF16;
    }
  }
  finish_stored(*s);
  return s;
}

// Formats beyond make_stored's four: MXFP4, FP8 channel / tensor, F16, F32, NVFP4 W4A16 (GEMM and
// routed-expert tests).
inline std::unique_ptr<StoredWeight> make_any(FormatId f, uint64_t n, uint64_t k, std::mt19937& rng) {
  if (f == FormatId::NVFP4 || f == FormatId::MXFP8 || f == FormatId::FP8_BLOCK || f == FormatId::BF16)
    return make_stored(f, n, k, rng);
  if (f == FormatId::W4A16_NVFP4) {
    auto s = make_stored(FormatId::NVFP4, n, k, rng);
    s->wb.format = f;
    return s;
  }
  auto s = std::make_unique<StoredWeight>();
  WeightBytes& w = s->wb;
  w.format = f;
  w.rows = n;
  w.cols = k;
  std::normal_distribution<float> nd(0.0f, 0.5f);
  switch (f) {
    case FormatId::MXFP4:
      s->main = random_bytes(n * k / 2, rng);
      s->scales = random_bytes(n * k / 32, rng, 120, 130);
      w.main_dtype = DType::U8;
      w.scale_dtype = DType::U8;
      break;
    case FormatId::FP8_CHANNEL: {
      s->main = random_e4m3(n * k, rng);
      s->grid.resize(n);
      std::uniform_real_distribution<float> d(1e-3f, 1e-1f);
      for (auto& x : s->grid) x = d(rng);
      w.main_dtype = DType::F8_E4M3;
      w.scale_dtype = DType::F32;
      break;
    }
    case FormatId::FP8_TENSOR:
      s->main = random_e4m3(n * k, rng);
      s->global = 0.037f;
      w.main_dtype = DType::F8_E4M3;
      w.global_dtype = DType::F32;
      w.global_scale = {reinterpret_cast<const uint8_t*>(&s->global), 4};
      break;
    case FormatId::F16: {
      s->main.resize(n * k * 2);
      auto* h = reinterpret_cast<uint16_t*>(s->main.data());
      for (uint64_t i = 0; i < n * k; ++i) {  // f16 bits of N(0, 0.5) values via exponent/mantissa fields
        const float v = nd(rng);
        uint32_t b;
        std::memcpy(&b, &v, 4);
        const int e = static_cast<int>((b >> 23) & 0xFF) - 127;
        h[i] = e < -14 ? static_cast<uint16_t>((b >> 16) & 0x8000)
                       : static_cast<uint16_t>(((b >> 16) & 0x8000) | ((e + 15) << 10) | ((b >> 13) & 0x3FF));
      }
      w.main_dtype = DType::F16;
      break;
    }
    default: {  // F32
      s->main.resize(n * k * 4);
      auto* p = reinterpret_cast<float*>(s->main.data());
      for (uint64_t i = 0; i < n * k; ++i) p[i] = nd(rng);
      w.main_dtype = DType::F32;
    }
  }
  finish_stored(*s);
  return s;
}

}  // namespace bloomery::gputest
