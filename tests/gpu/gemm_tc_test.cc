// Tensor-core prompt GEMM (src/backend/cuda/gemm/tc_gemm.cu) and the grouped-by-expert GEMM
// (grouped_gemm.h) against the CPU backend's f32 matmul, at the qwen4_exp shapes and at odd ones; plus the
// throughput at T = 4096 and the GEMV/GEMM crossover that linear.cc's switch point comes from (printed).
//
// Tolerance. The kernel rounds every activation to BF16 (round-to-nearest: relative error δ_k, |δ_k| ≤ 2^-8)
// and multiplies exactly-decoded weights in f32 (NVFP4, MXFP4, MXFP8, BF16, FP8 channel/tensor: the tile
// holds the exact element, the remaining scale is applied in f32); FP8 128×128 blocks, F16 and F32 weights
// are rounded to BF16 as well. So y_gpu − y_cpu ≈ Σ_k (δ_k + ε_k) x_k w_k plus f32 summation-order noise.
// With δ roughly uniform and independent, its standard deviation is 2^-9/√3 · ‖x∘w‖₂ per rounded operand. We
// require
//   |y_gpu − y_cpu| ≤ c · ‖x∘w‖₂ + 1e-5 · √K · ‖x∘w‖₂,   ‖x∘w‖₂ = (Σ_k x_k² w_k²)^½,
// with c = 2^-7 (≈ 6.9 σ) when only x is rounded and c = 2^-6 (≈ 9.8 σ of the two roundings) when the weight
// is rounded too; the second term bounds the f32 order noise (≤ 1e-5 Σ|x_k w_k|, as in backend_linear_test).
// A wrong scale of one 16- or 32-element block moves y by ~4 ‖x∘w‖₂/√(K/16) ≫ c ‖x∘w‖₂ at these K, a wrong
// row or tile by O(‖x∘w‖₂·√K), so every indexing error is caught.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <numeric>

#include "backend/cuda/gemm/gemm_internal.h"
#include "backend/cuda/gemm/grouped_gemm.h"
#include "backend/cuda/kernels.h"
#include "backend_util.h"

namespace bloomery::gputest {
namespace {

constexpr double kCx = 1.0 / 64, kCxw = 1.5 / 64;
// Split mode (x = hi + lo, both BF16): |x − hi − lo| ≤ 2^-8·|x − hi| ≤ 2^-16·|x|, so c = 2^-14 (the same
// 6.9 σ); the weight's own rounding (FP8 block, F16, F32) keeps kCxw.
constexpr double kCsplit = 1.0 / 16384;

bool weight_rounded(FormatId f) {
  return f == FormatId::FP8_BLOCK || f == FormatId::F16 || f == FormatId::F32;
}

std::vector<float> squares(const std::vector<float>& v) {
  std::vector<float> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = v[i] * v[i];
  return o;
}

class GemmTc : public BackendPair {
 protected:
  // Runs cuda::gemm on all T rows, compares the `rows` listed (all when empty) with the CPU backend.
  // `sq` gives Σ_k x_k² w_k² per checked output; computed on the CPU in double when `exact_bound`, else on
  // the GPU from x² and W² (a bound needs no precision).
  // split: -1 runs cuda::gemm (the default mode), 0 / 1 the tensor-core kernel with plain / split BF16 x.
  void check(const StoredWeight& s, const Weight& wc, const Weight& wg, int64_t T, int64_t row0, int64_t n,
             const std::string& what_in, bool exact_bound, std::vector<int64_t> rows = {}, int split = -1) {
    const std::string what = what_in + (split == 1 ? " [split]" : split == 0 ? " [bf16]" : "");
    const int64_t K = wc.cols();
    const FormatId f = s.wb.format;
    auto x = randn(static_cast<size_t>(T * K));
    Tensor xg = gpu_->upload(x, {T, K}), yg = gpu_->alloc({T, n});
    const cuda::DeviceWeight& dw = cuda::device_weight(wg, "test");
    EXPECT_EQ(K % 32 == 0, cuda::tc_gemm_supported(K, dw.data, xg.f32())) << what;
    if (split >= 0)
      cuda::tc_gemm(dw, row0, n, xg.f32(), T, yg.f32(), split == 1, gpu_->stream());
    else
      cuda::gemm(dw, row0, n, xg.f32(), T, yg.f32(), gpu_->stream());
    if (rows.empty()) {
      rows.resize(T);
      std::iota(rows.begin(), rows.end(), 0);
    }
    const int64_t R = static_cast<int64_t>(rows.size());
    std::vector<float> xs(R * K), g(R * n);
    for (int64_t i = 0; i < R; ++i) std::copy_n(x.data() + rows[i] * K, K, xs.data() + i * K);
    ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(gpu_->stream()));
    for (int64_t i = 0; i < R; ++i)
      ASSERT_EQ(cudaSuccess,
                cudaMemcpy(g.data() + i * n, yg.f32() + rows[i] * n, n * 4, cudaMemcpyDeviceToHost));
    Tensor xc = cpu_->upload(xs, {R, K}), yc = cpu_->alloc({R, n});
    cpu_->matmul_rows(yc, xc, wc, row0, n);
    const auto c = cpu_->download(yc);
    std::vector<double> sq(R * n);
    if (exact_bound) {
      for (int64_t i = 0; i < R; ++i)
        for (int64_t r = 0; r < n; ++r) {
          double a = 0.0;
          const float *xr = xs.data() + i * K, *wr = s.decoded.data() + (row0 + r) * K;
          for (int64_t k = 0; k < K; ++k) a += static_cast<double>(xr[k]) * xr[k] * wr[k] * wr[k];
          sq[i * n + r] = a;
        }
    } else {
      Weight w2 = gpu_->upload_weight("w2", squares(s.decoded), {wc.rows(), K});
      Tensor x2 = gpu_->upload(squares(xs), {R, K}), y2 = gpu_->alloc({R, n});
      cuda::gemm(cuda::device_weight(w2, "test"), row0, n, x2.f32(), R, y2.f32(), gpu_->stream());
      const auto v = gpu_->download(y2);
      for (size_t i = 0; i < v.size(); ++i) sq[i] = std::max(0.0f, v[i]) * (1.0 + 1.0 / 64);
    }
    const bool split_x = split == 1 || (split < 0 && cuda::gemm_mode() == cuda::GemmMode::Bf16x2);
    const double cf = weight_rounded(f) ? kCxw : split_x ? kCsplit : kCx;
    std::vector<double> bound(sq.size());
    for (size_t i = 0; i < sq.size(); ++i)
      bound[i] = (cf + 1e-5 * std::sqrt(static_cast<double>(K))) * std::sqrt(sq[i]) + 1e-30;
    size_t at = 0;
    const double r = worst_ratio(g, c, bound, &at);
    EXPECT_LE(r, 1.0) << what << " T=" << T << " row0=" << row0 << " n=" << n << ": output " << at
                      << " (x row " << rows[at / n] << ", col " << at % n << ") gpu " << g[at] << " cpu "
                      << c[at] << " bound " << bound[at];
  }
  std::vector<int64_t> sample_rows(int64_t T) {
    std::vector<int64_t> r = {0, 1, 63, 64, 127, 128, 129, T - 2, T - 1};
    std::uniform_int_distribution<int64_t> d(0, T - 1);
    while (r.size() < 24) r.push_back(d(rng_));
    r.erase(std::remove_if(r.begin(), r.end(), [&](int64_t v) { return v >= T; }), r.end());
    return r;
  }
};

struct Shape {
  int64_t n, k;
  const char* what;
};
constexpr Shape kShapes[] = {{12288, 2560, "q_proj"},    {10240, 2560, "in_proj_qkv"},
                             {2560, 6144, "out_proj"},   {640, 2560, "expert up"},
                             {2560, 640, "expert down"}, {16384, 2560, "lm_head-like"}};
constexpr FormatId kFormats[] = {FormatId::NVFP4, FormatId::MXFP8, FormatId::FP8_BLOCK, FormatId::BF16};

TEST_F(GemmTc, ModelShapesAllFormats) {
  for (FormatId f : kFormats)
    for (const Shape& sh : kShapes) {
      auto s = make_stored(f, sh.n, sh.k, rng_);
      Weight wc = cpu_->upload_weight(sh.what, s->decoded, {sh.n, sh.k});
      Weight wg = gpu_->upload_stored(sh.what, {sh.n, sh.k}, s->wb);
      const std::string what = std::string(format_name(f)) + " " + sh.what;
      for (int64_t T : {33, 100, 512, 4096}) {
        const auto rows = T == 33 ? std::vector<int64_t>{} : sample_rows(T);
        check(*s, wc, wg, T, 0, sh.n, what, false, rows, 0);
        if (T == 100 || T == 4096) check(*s, wc, wg, T, 0, sh.n, what, false, rows, 1);
      }
    }
}

TEST_F(GemmTc, OddShapesEveryFormat) {
  // n and T off the 128 tiles, odd n (scalar stores), a row window (row0 > 0), K = 640 and 96 (3 k-steps).
  for (FormatId f :
       {FormatId::NVFP4, FormatId::W4A16_NVFP4, FormatId::MXFP4, FormatId::MXFP8, FormatId::FP8_BLOCK,
        FormatId::FP8_CHANNEL, FormatId::FP8_TENSOR, FormatId::BF16, FormatId::F16, FormatId::F32}) {
    for (int64_t K : {640, 96}) {
      const int64_t N = 437;
      auto s = make_any(f, N, K, rng_);
      Weight wc = cpu_->upload_weight("odd", s->decoded, {N, K});
      Weight wg = gpu_->upload_stored("odd", {N, K}, s->wb);
      const std::string what = std::string(format_name(f)) + " [437, " + std::to_string(K) + "]";
      for (int split : {0, 1}) {
        check(*s, wc, wg, 77, 0, N, what, true, {}, split);
        check(*s, wc, wg, 129, 5, 203, what + " rows 5+203", true, {}, split);
        check(*s, wc, wg, 300, 128, 300, what + " rows 128+300", true, {}, split);
      }
    }
  }
}

TEST_F(GemmTc, FallbackShapesUseSimt) {
  // K not a multiple of 32: the SIMT f32 kernel (f32-exact up to order), still right.
  for (FormatId f : {FormatId::BF16, FormatId::FP8_BLOCK}) {
    const int64_t N = 300, K = f == FormatId::BF16 ? 200 : 2600;
    auto s = make_stored(f, N, K, rng_);
    Weight wc = cpu_->upload_weight("fb", s->decoded, {N, K});
    Weight wg = gpu_->upload_stored("fb", {N, K}, s->wb);
    check(*s, wc, wg, 70, 0, N, std::string(format_name(f)) + " fallback K=" + std::to_string(K), true);
  }
}

TEST_F(GemmTc, BackendMatmulPromptPath) {
  // Through CudaBackend::matmul_rows (linear.cc's switch) for T on both sides of the switch point.
  auto s = make_stored(FormatId::NVFP4, 640, 2560, rng_);
  Weight wc = cpu_->upload_weight("m", s->decoded, {640, 2560});
  Weight wg = gpu_->upload_stored("m", {640, 2560}, s->wb);
  for (int64_t T : {8, 33, 64, 65, 200}) {
    auto x = randn(T * 2560);
    Tensor xc = cpu_->upload(x, {T, 2560}), xg = gpu_->upload(x, {T, 2560});
    Tensor yc = cpu_->alloc({T, 640}), yg = gpu_->alloc({T, 640});
    cpu_->matmul(yc, xc, wc);
    gpu_->matmul(yg, xg, wg);
    const auto g = gpu_->download(yg), c = cpu_->download(yc);
    // Relative to the output's scale: BF16 activations give ~2^-9·‖x∘w‖₂ ≈ 1e-3·|y| typical; 1e-2 max.
    EXPECT_LE(max_rel(g, c), 1e-2) << "T=" << T;
  }
}

class GroupedGemm : public GemmTc {
 protected:
  // How a run reaches the kernel: grouped_gemm's defaults, or the tensor-core kernel directly with plain BF16
  // x in the tall or wide warp layout, or split x in the wide one.
  enum class Via { Entry, Bf16Tall, Bf16Wide, SplitTall, SplitWide };
  // E experts of one format with the given row counts; ys rows past offsets[E] must stay untouched.
  void run(FormatId f, int64_t n, int64_t K, const std::vector<int32_t>& counts, int64_t slack,
           Via via = Via::Entry) {
    const bool plain_bf16 = via == Via::Bf16Tall || via == Via::Bf16Wide;
    const bool split_direct = via == Via::SplitTall || via == Via::SplitWide;
    const cuda::GroupedTile tile =
        via == Via::Bf16Wide || via == Via::SplitWide ? cuda::GroupedTile::Wide : cuda::GroupedTile::Tall;
    const int64_t E = static_cast<int64_t>(counts.size());
    std::vector<int32_t> off(E + 1, 0);
    for (int64_t e = 0; e < E; ++e) off[e + 1] = off[e] + counts[e];
    const int64_t total = off[E], max_rows = total + slack;
    std::vector<std::unique_ptr<StoredWeight>> st;
    std::vector<Weight> wc, wg;
    std::vector<cuda::DeviceWeight> dws;
    for (int64_t e = 0; e < E; ++e) {
      st.push_back(make_any(f, n, K, rng_));
      wc.push_back(cpu_->upload_weight("e", st.back()->decoded, {n, K}));
      wg.push_back(gpu_->upload_stored("e", {n, K}, st.back()->wb));
      dws.push_back(cuda::device_weight(wg.back(), "test"));
    }
    auto x = randn(std::max<int64_t>(max_rows, 1) * K);
    Tensor xg = gpu_->upload(x, {std::max<int64_t>(max_rows, 1), K});
    const float kSentinel = 12345.0f;
    Tensor yg = gpu_->upload(std::vector<float>(std::max<int64_t>(max_rows, 1) * n, kSentinel),
                             {std::max<int64_t>(max_rows, 1), n});
    cuda::DeviceWeight* d_w = nullptr;
    int32_t* d_off = nullptr;
    ASSERT_EQ(cudaSuccess, cudaMalloc(&d_w, sizeof(cuda::DeviceWeight) * std::max<int64_t>(E, 1)));
    ASSERT_EQ(cudaSuccess, cudaMalloc(&d_off, 4 * (E + 1)));
    ASSERT_EQ(cudaSuccess,
              cudaMemcpy(d_w, dws.data(), sizeof(cuda::DeviceWeight) * E, cudaMemcpyHostToDevice));
    ASSERT_EQ(cudaSuccess, cudaMemcpy(d_off, off.data(), 4 * (E + 1), cudaMemcpyHostToDevice));
    if (via == Via::Entry)
      cuda::grouped_gemm(d_w, E, d_off, max_rows, n, K, f, xg.f32(), yg.f32(), gpu_->stream());
    else
      cuda::tc_grouped_gemm(d_w, E, d_off, max_rows, n, K, f, xg.f32(), yg.f32(), split_direct, tile,
                            gpu_->stream());
    const auto g = gpu_->download(yg);
    cudaFree(d_w);
    cudaFree(d_off);
    static constexpr const char* kVia[] = {"", " [bf16 tall]", " [bf16 wide]", " [split tall]",
                                           " [split wide]"};
    const std::string what = std::string(format_name(f)) + kVia[static_cast<int>(via)] +
                             " grouped E=" + std::to_string(E) + " [" + std::to_string(n) + ", " +
                             std::to_string(K) + "]";
    const bool split_x = split_direct || (via == Via::Entry && cuda::gemm_mode() == cuda::GemmMode::Bf16x2);
    const double cf = (weight_rounded(f) ? kCxw
                       : split_x         ? kCsplit
                                         : kCx) +
                      1e-5 * std::sqrt(static_cast<double>(K));
    double worst = 0.0;
    for (int64_t e = 0; e < E; ++e) {
      if (counts[e] == 0) continue;
      const int64_t R = counts[e];
      std::vector<float> xs(x.begin() + off[e] * K, x.begin() + off[e + 1] * K);
      Tensor xc = cpu_->upload(xs, {R, K}), yc = cpu_->alloc({R, n});
      cpu_->matmul(yc, xc, wc[e]);
      const auto c = cpu_->download(yc);
      for (int64_t i = 0; i < R; ++i)
        for (int64_t r = 0; r < n; ++r) {
          double sq = 0.0;
          const float *xr = xs.data() + i * K, *wr = st[e]->decoded.data() + r * K;
          for (int64_t k = 0; k < K; ++k) sq += static_cast<double>(xr[k]) * xr[k] * wr[k] * wr[k];
          const double d = std::fabs(static_cast<double>(g[(off[e] + i) * n + r]) - c[i * n + r]);
          const double ratio =
              std::isfinite(g[(off[e] + i) * n + r]) ? d / (cf * std::sqrt(sq) + 1e-30) : INFINITY;
          if (ratio > worst) worst = ratio;
          if (ratio > 1.0) {
            ADD_FAILURE() << what << " expert " << e << " row " << i << " col " << r << ": gpu "
                          << g[(off[e] + i) * n + r] << " cpu " << c[i * n + r];
            return;
          }
        }
    }
    for (int64_t i = total * n; i < max_rows * n; ++i)
      if (g[i] != kSentinel) {
        ADD_FAILURE() << what << ": row " << i / n << " past offsets[E] was written";
        return;
      }
    std::printf("[grouped] %s rows %lld: worst |err|/bound %.3f\n", what.c_str(),
                static_cast<long long>(total), worst);
  }
};

TEST_F(GroupedGemm, UnevenAndEmptyExperts) {
  const std::vector<int32_t> counts = {0, 1, 130, 0, 257, 77, 128, 0};
  for (FormatId f : kFormats) run(f, 640, 2560, counts, 40);
  for (FormatId f : {FormatId::NVFP4, FormatId::MXFP8, FormatId::BF16})
    for (Via v : {Via::Bf16Tall, Via::Bf16Wide, Via::SplitTall, Via::SplitWide})
      run(f, 640, 2560, counts, 40, v);
  run(FormatId::NVFP4, 2560, 640, counts, 0, Via::SplitWide);
  run(FormatId::NVFP4, 2560, 640, counts, 0);
  run(FormatId::MXFP4, 200, 640, {3, 0, 129}, 7);
  run(FormatId::NVFP4, 640, 2560, {0, 0, 0, 0}, 64);  // nothing routed: nothing written
  run(FormatId::BF16, 64, 64, {}, 0);                 // no experts
}

TEST_F(GroupedGemm, ManyExpertsAndSimtFallback) {
  // More experts than one block scans at once (256), most empty or tiny.
  std::vector<int32_t> counts(300, 0);
  std::uniform_int_distribution<int> d(0, 9);
  for (auto& c : counts) c = d(rng_) < 7 ? 0 : d(rng_) + 1;
  counts[299] = 140;
  run(FormatId::BF16, 96, 64, counts, 13);
  run(FormatId::BF16, 70, 48, {5, 0, 140, 2}, 9);  // K = 48: the SIMT grouped kernel
}

// ---- measurements (printed; no pass/fail) ---------------------------------------------------------------

double time_ms(const std::function<void()>& f, cudaStream_t s, int iters) {
  f();
  cudaEvent_t a, b;
  cudaEventCreate(&a), cudaEventCreate(&b);
  cudaEventRecord(a, s);
  for (int i = 0; i < iters; ++i) f();
  cudaEventRecord(b, s);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a), cudaEventDestroy(b);
  return ms / iters;
}

TEST_F(GemmTc, ThroughputT4096) {
  const int64_t T = 4096;
  for (FormatId f : kFormats) {
    for (const Shape& sh : kShapes) {
      auto s = make_stored(f, sh.n, sh.k, rng_);
      Weight wg = gpu_->upload_stored(sh.what, {sh.n, sh.k}, s->wb);
      const cuda::DeviceWeight& dw = cuda::device_weight(wg, "bench");
      Tensor x = gpu_->upload(randn(T * sh.k), {T, sh.k}), y = gpu_->alloc({T, sh.n});
      for (bool split : {false, true}) {
        const double ms =
            time_ms([&] { cuda::tc_gemm(dw, 0, sh.n, x.f32(), T, y.f32(), split, gpu_->stream()); },
                    gpu_->stream(), 10);
        std::printf("[tc] %-9s %-12s [%5lld x %5lld] T=%lld %-6s: %8.3f ms %7.1f TFLOP/s\n",
                    std::string(format_name(f)).c_str(), sh.what, static_cast<long long>(sh.n),
                    static_cast<long long>(sh.k), static_cast<long long>(T), split ? "split" : "bf16", ms,
                    2.0 * T * sh.n * sh.k / ms * 1e-9);
      }
      if (f == FormatId::BF16 && sh.n == 12288) {
        const double ms2 = time_ms([&] { cuda::gemm_simt(dw, 0, sh.n, x.f32(), T, y.f32(), gpu_->stream()); },
                                   gpu_->stream(), 2);
        std::printf("[tc] SIMT baseline same shape: %8.3f ms %7.1f TFLOP/s\n", ms2,
                    2.0 * T * sh.n * sh.k / ms2 * 1e-9);
      }
    }
  }
  // Grouped: 64 experts × 128 rows each (a 4096-token prompt routed 8-of-512 lands near this per expert).
  for (FormatId f : {FormatId::NVFP4, FormatId::BF16}) {
    for (const Shape& sh : {Shape{640, 2560, "expert up"}, Shape{2560, 640, "expert down"}}) {
      const int64_t E = 64, per = 128, rows = E * per;
      std::vector<std::unique_ptr<StoredWeight>> st;
      std::vector<Weight> wg;
      std::vector<cuda::DeviceWeight> dws;
      for (int64_t e = 0; e < E; ++e) {
        st.push_back(make_stored(f, sh.n, sh.k, rng_));
        wg.push_back(gpu_->upload_stored("e", {sh.n, sh.k}, st.back()->wb));
        dws.push_back(cuda::device_weight(wg.back(), "bench"));
        st.back().reset();
      }
      std::vector<int32_t> off(E + 1);
      for (int64_t e = 0; e <= E; ++e) off[e] = static_cast<int32_t>(e * per);
      cuda::DeviceWeight* d_w = nullptr;
      int32_t* d_off = nullptr;
      cudaMalloc(&d_w, sizeof(cuda::DeviceWeight) * E);
      cudaMalloc(&d_off, 4 * (E + 1));
      cudaMemcpy(d_w, dws.data(), sizeof(cuda::DeviceWeight) * E, cudaMemcpyHostToDevice);
      cudaMemcpy(d_off, off.data(), 4 * (E + 1), cudaMemcpyHostToDevice);
      Tensor x = gpu_->upload(randn(rows * sh.k), {rows, sh.k}), y = gpu_->alloc({rows, sh.n});
      for (bool split : {false, true}) {
        const double ms = time_ms(
            [&] {
              cuda::tc_grouped_gemm(d_w, E, d_off, rows, sh.n, sh.k, f, x.f32(), y.f32(), split,
                                    cuda::grouped_tile(), gpu_->stream());
            },
            gpu_->stream(), 10);
        std::printf("[grouped] %-9s %-12s E=64 x 128 rows %-6s: %8.3f ms %7.1f TFLOP/s\n",
                    std::string(format_name(f)).c_str(), sh.what, split ? "split" : "bf16", ms,
                    2.0 * rows * sh.n * sh.k / ms * 1e-9);
      }
      cudaFree(d_w);
      cudaFree(d_off);
    }
  }
}

// The MoE prompt path's grouped GEMMs at qwen4_exp's real routing shape: 512 NVFP4 experts, every token
// routed to 10 distinct experts uniformly (the random synthetic model routes close to this), so a pass of T
// tokens gives each expert about T · 10 / 512 rows: 10 at the server's default ubatch 512, 20 at the
// grouped path's 1,024-token chunk, 80 for a whole 4,096-token prompt. Split x (the default mode), both warp
// layouts; TFLOP/s of the routed rows' work.
TEST_F(GemmTc, GroupedRoutedThroughput) {
  const int64_t E = 512, k = 10;
  for (const Shape& sh : {Shape{640, 2560, "expert up"}, Shape{2560, 640, "expert down"}}) {
    std::vector<Weight> wg;
    std::vector<cuda::DeviceWeight> dws;
    auto st = make_stored(FormatId::NVFP4, sh.n, sh.k, rng_);
    for (int64_t e = 0; e < E; ++e) {  // one random expert uploaded E times: the same bytes to read
      wg.push_back(gpu_->upload_stored("e", {sh.n, sh.k}, st->wb));
      dws.push_back(cuda::device_weight(wg.back(), "bench"));
    }
    cuda::DeviceWeight* d_w = nullptr;
    int32_t* d_off = nullptr;
    ASSERT_EQ(cudaSuccess, cudaMalloc(&d_w, sizeof(cuda::DeviceWeight) * E));
    ASSERT_EQ(cudaSuccess, cudaMalloc(&d_off, 4 * (E + 1)));
    ASSERT_EQ(cudaSuccess,
              cudaMemcpy(d_w, dws.data(), sizeof(cuda::DeviceWeight) * E, cudaMemcpyHostToDevice));
    for (int64_t T : {512, 1024, 2048, 4096}) {
      std::vector<int32_t> counts(E, 0), pick(E);
      for (int64_t t = 0; t < T; ++t) {
        std::iota(pick.begin(), pick.end(), 0);
        for (int64_t j = 0; j < k; ++j) {
          std::uniform_int_distribution<int64_t> d(j, E - 1);
          std::swap(pick[j], pick[d(rng_)]);
          ++counts[pick[j]];
        }
      }
      std::vector<int32_t> off(E + 1, 0);
      for (int64_t e = 0; e < E; ++e) off[e + 1] = off[e] + counts[e];
      ASSERT_EQ(cudaSuccess, cudaMemcpy(d_off, off.data(), 4 * (E + 1), cudaMemcpyHostToDevice));
      const int64_t rows = T * k;
      Tensor x = gpu_->upload(randn(rows * sh.k), {rows, sh.k}), y = gpu_->alloc({rows, sh.n});
      std::printf("[routed] NVFP4 %-12s E=512 T=%5lld (%5.1f rows/expert) split:", sh.what,
                  static_cast<long long>(T), static_cast<double>(rows) / E);
      for (auto [tile, name] :
           {std::pair{cuda::GroupedTile::Wide, "wide"}, std::pair{cuda::GroupedTile::Tall, "tall"}}) {
        const double ms = time_ms(
            [&] {
              cuda::tc_grouped_gemm(d_w, E, d_off, rows, sh.n, sh.k, FormatId::NVFP4, x.f32(), y.f32(), true,
                                    tile, gpu_->stream());
            },
            gpu_->stream(), 10);
        std::printf("  %s %7.3f ms %6.1f TFLOP/s", name, ms, 2.0 * rows * sh.n * sh.k / ms * 1e-9);
      }
      std::printf("\n");
    }
    cudaFree(d_w);
    cudaFree(d_off);
  }
}

TEST_F(GemmTc, GemvGemmCrossover) {
  for (FormatId f : {FormatId::NVFP4, FormatId::BF16}) {
    for (const Shape& sh :
         {Shape{12288, 2560, "q_proj"}, Shape{640, 2560, "expert up"}, Shape{2560, 640, "expert down"}}) {
      auto s = make_stored(f, sh.n, sh.k, rng_);
      Weight wg = gpu_->upload_stored(sh.what, {sh.n, sh.k}, s->wb);
      const cuda::DeviceWeight& dw = cuda::device_weight(wg, "bench");
      Tensor x = gpu_->upload(randn(256 * sh.k), {256, sh.k}), y = gpu_->alloc({256, sh.n});
      std::printf("[xover] %-9s %-12s", std::string(format_name(f)).c_str(), sh.what);
      for (int64_t T : {4, 8, 16, 32, 64, 128}) {
        const double gv = time_ms(
            [&] {
              for (int64_t t0 = 0; t0 < T; t0 += cuda::kGemvMaxRows)
                cuda::gemv(dw, 0, sh.n, x.f32() + t0 * sh.k, static_cast<int>(std::min<int64_t>(8, T - t0)),
                           y.f32() + t0 * sh.n, gpu_->stream());
            },
            gpu_->stream(), 20);
        const double gm = time_ms([&] { cuda::gemm(dw, 0, sh.n, x.f32(), T, y.f32(), gpu_->stream()); },
                                  gpu_->stream(), 20);
        std::printf(" T=%lld gemv %.1f/tc %.1f us;", static_cast<long long>(T), gv * 1e3, gm * 1e3);
      }
      std::printf("\n");
    }
  }
}

}  // namespace
}  // namespace bloomery::gputest
