// CUDA routed experts (CudaBackend::moe_experts) vs the CPU backend: the decode kernels (routed ids read on
// the card), the grouped prompt path (device-side counting sort + grouped GEMMs) and the per-expert loop,
// at qwen4_exp's real shapes (E 512, k 10, D 2560, I 640) in NVFP4, MXFP8, FP8 128×128 blocks and BF16, and
// at the fixtures' shapes; clamp on and off; skewed routing (one expert gets every token, most get none);
// missing experts, mixed formats, bad ids, a replaced weight set behind the same span; bit-identical
// repeats. Plus a measurement of the decode MoE per layer (not pass/fail).
//
// Tolerances. Decode variant 1: both sides decode every weight bit-identically and sum in f32; only the
// order of the sums differs (and FMA contraction), ~1e-6 of the output's scale; we allow 3e-5 of max|out|.
// Variant 2 multiplies the unit's scale into its 16-element partial sum and NVFP4's global into the row's
// sum instead of into every element: the CPU's per-element products e·s·g round once or twice each (the E2M1
// × E4M3 product is exact, × g rounds; E4M3 × an FP8 block scale rounds), variant 2's partial sums round
// once per FMA and twice per unit — relative error of the same order (a few 2^-24 per term, √K growth), so
// the same ~1e-6 and the same 3e-5 bound, as the GEMV's variant 2 keeps backend_linear_test's bound. One
// wrong weight element moves the output by ~1/√(K·I) ≈ 8e-4 of its scale, a wrong scale block or expert
// by far more, so 3e-5 still catches them. Variant 3 (NVFP4 on the tensor cores; the others run variant 2)
// multiplies exact f16 weights by the activation split into f16 hi + lo (about 2^-22 of each value lost) and
// sums in the tensor core's f32: the same order of error, the same bound. Every decode check runs all three.
// Prompt: the grouped GEMM may round activations to BF16 (tensor cores, gemm_tc_test): ~1e-3 of the scale
// typical, so max 1e-2 and RMS 3e-3 of max|out|.
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <set>

#include "backend/cuda/moe/expert_table.h"
#include "backend/cuda/moe/moe_kernels.h"
#include "backend_util.h"

namespace bloomery::gputest {
namespace {

using cuda::MoePath;

// Nd distinct stored expert triples shown to the backends as E experts (expert e uses triple (7e + 3) % Nd,
// so neighbouring experts differ): real E at a CPU reference cost of Nd experts.
struct Bank {
  int64_t E = 0, D = 0, I = 0;
  std::vector<std::unique_ptr<StoredWeight>> keep;
  std::vector<Weight> wc, wg;
  std::vector<ExpertWeights> ec, eg;
};

double rms_rel(const std::vector<float>& g, const std::vector<float>& c) {
  double m = 0.0, s = 0.0;
  for (size_t i = 0; i < c.size(); ++i) {
    m = std::max(m, std::fabs(static_cast<double>(c[i])));
    const double d = static_cast<double>(g[i]) - c[i];
    s += std::isfinite(d) ? d * d : INFINITY;
  }
  return m > 0 ? std::sqrt(s / static_cast<double>(c.size())) / m : std::sqrt(s);
}

const char* path_name(MoePath p) {
  switch (p) {
    case MoePath::Decode:
      return "decode";
    case MoePath::Grouped:
      return "grouped";
    case MoePath::Loop:
      return "loop";
    default:
      return "auto";
  }
}

class CudaMoe : public BackendPair {
 protected:
  void TearDown() override {
    cuda::force_moe_path(MoePath::Auto);
    cuda::set_moe_decode_variant(variant0_);
  }
  const int variant0_ = cuda::moe_decode_variant();  // BLOOMERY_CUDA_MOE_DECODE's choice

  // formats: gate/up/down per triple index (mixed-format banks); nullopt experts stay missing.
  void make_bank(Bank& b, const std::vector<FormatId>& fmt_of_triple, int64_t E, int64_t D, int64_t I) {
    const int64_t Nd = static_cast<int64_t>(fmt_of_triple.size());
    b.E = E, b.D = D, b.I = I;
    b.keep.clear(), b.wc.clear(), b.wg.clear();
    b.wc.reserve(3 * Nd), b.wg.reserve(3 * Nd);
    for (int64_t d = 0; d < Nd; ++d)
      for (int p = 0; p < 3; ++p) {
        const int64_t n = p < 2 ? I : D, kk = p < 2 ? D : I;
        b.keep.push_back(make_any(fmt_of_triple[d], n, kk, rng_));
        const std::string name = "experts." + std::to_string(d) +
                                 (p == 0   ? ".gate"
                                  : p == 1 ? ".up"
                                           : ".down");
        b.wc.push_back(cpu_->upload_weight(name, b.keep.back()->decoded, {n, kk}));
        b.wg.push_back(gpu_->upload_stored(name, {n, kk}, b.keep.back()->wb));
        b.keep.back()->decoded = {};  // the CPU backend holds its own copy
      }
    b.ec.assign(E, {}), b.eg.assign(E, {});
    for (int64_t e = 0; e < E; ++e) {
      const int64_t d = (7 * e + 3) % Nd;
      b.ec[e] = {&b.wc[3 * d], &b.wc[3 * d + 1], &b.wc[3 * d + 2]};
      b.eg[e] = {&b.wg[3 * d], &b.wg[3 * d + 1], &b.wg[3 * d + 2]};
    }
  }

  // k distinct experts per token, uniformly from [0, E).
  std::vector<int32_t> random_ids(int64_t T, int64_t k, int64_t E) {
    std::vector<int32_t> ids(T * k), perm(E);
    for (int64_t t = 0; t < T; ++t) {
      std::iota(perm.begin(), perm.end(), 0);
      for (int64_t j = 0; j < k; ++j) {  // partial Fisher–Yates
        std::uniform_int_distribution<int64_t> d(j, E - 1);
        std::swap(perm[j], perm[d(rng_)]);
        ids[t * k + j] = perm[j];
      }
    }
    return ids;
  }

  struct Inputs {
    int64_t T = 0, k = 0;
    std::vector<float> x, wts;
    std::vector<int32_t> ids;
    float limit = 0.0f;
  };

  Inputs inputs(const Bank& b, int64_t T, int64_t k, float limit) {
    Inputs in;
    in.T = T, in.k = k, in.limit = limit;
    in.x = randn(T * b.D, 0.5f);
    in.ids = random_ids(T, k, b.E);
    in.wts = uniform(T * k, 0.0f, 0.3f);
    return in;
  }

  std::vector<float> run_cpu(const Bank& b, const Inputs& in) {
    Tensor x = cpu_->upload(in.x, {in.T, b.D}), w = cpu_->upload(in.wts, {in.T, in.k});
    Tensor ids = cpu_->alloc({in.T, in.k}, ElemType::I32), out = cpu_->alloc({in.T, b.D});
    std::memcpy(ids.i32(), in.ids.data(), in.ids.size() * 4);
    cpu_->moe_experts(out, x, ids, w, b.ec, in.limit);
    return cpu_->download(out);
  }

  // Runs the GPU with `force`; `ran` gets the path that actually ran.
  std::vector<float> run_gpu(const Bank& b, const Inputs& in, MoePath force, MoePath* ran = nullptr) {
    Tensor x = gpu_->upload(in.x, {in.T, b.D}), w = gpu_->upload(in.wts, {in.T, in.k});
    Tensor ids = gpu_->alloc({in.T, in.k}, ElemType::I32), out = gpu_->alloc({in.T, b.D});
    EXPECT_EQ(cudaSuccess, cudaMemcpy(ids.i32(), in.ids.data(), in.ids.size() * 4, cudaMemcpyHostToDevice));
    gpu_->fill(out, 123.0f);  // moe_experts overwrites
    cuda::force_moe_path(force);
    gpu_->moe_experts(out, x, ids, w, b.eg, in.limit);
    cuda::force_moe_path(MoePath::Auto);
    if (ran) *ran = cuda::moe_last_path();
    return gpu_->download(out);
  }

  // Checks one path against the CPU output with that path's tolerance; expects `want` to have run. A decode
  // check runs both decode kernel variants.
  void check(const Bank& b, const Inputs& in, const std::vector<float>& cpu, MoePath force, MoePath want,
             const std::string& what) {
    for (int v : {1, 2, 3}) {
      if (want != MoePath::Decode && v != 2) continue;
      cuda::set_moe_decode_variant(v);
      MoePath ran = MoePath::Auto;
      const auto g = run_gpu(b, in, force, &ran);
      const std::string tag = what + " T=" + std::to_string(in.T) + " limit=" + std::to_string(in.limit) +
                              " forced " + path_name(force) +
                              (want == MoePath::Decode ? " v" + std::to_string(v) : "");
      EXPECT_EQ(static_cast<int>(want), static_cast<int>(ran)) << tag << " ran " << path_name(ran);
      const double mr = max_rel(g, cpu), rr = rms_rel(g, cpu);
      // The loop runs the dense GEMM for an expert with more than 32 rows: the prompt tolerance.
      if (ran != MoePath::Decode) {
        EXPECT_LE(mr, 1e-2) << tag;
        EXPECT_LE(rr, 3e-3) << tag;
      } else {
        EXPECT_LE(mr, 3e-5) << tag;
      }
      std::printf("[moe] %-44s ran %-7s max %.2e rms %.2e\n", tag.c_str(), path_name(ran), mr, rr);
    }
    cuda::set_moe_decode_variant(variant0_);
  }

  // A clamp that binds for a good share of the gate/up values: half the RMS of one expert's gate outputs.
  float binding_limit(const Bank& b) {
    auto x = randn(4 * b.D, 0.5f);
    Tensor xc = cpu_->upload(x, {4, b.D}), g = cpu_->alloc({4, b.I});
    cpu_->matmul(g, xc, *b.ec[0].gate);
    const auto v = cpu_->download(g);
    double s = 0.0;
    for (float f : v) s += static_cast<double>(f) * f;
    return static_cast<float>(0.5 * std::sqrt(s / static_cast<double>(v.size())));
  }

  // Every path at every T against the CPU.
  void sweep(const Bank& b, int64_t k, const std::vector<int64_t>& Ts, const std::string& what) {
    const float lim = binding_limit(b);
    for (int64_t T : Ts)
      for (float limit : {0.0f, lim}) {
        if (limit > 0.0f && T != 2 && T != 16 && T != 100) continue;  // clamp on at three sizes
        const Inputs in = inputs(b, T, k, limit);
        const auto cpu = run_cpu(b, in);
        const int64_t P = T * k;
        const MoePath autop = P <= cuda::moe_decode_max_pairs() ? MoePath::Decode : MoePath::Grouped;
        check(b, in, cpu, MoePath::Auto, autop, what);
        if (T <= 100 && autop != MoePath::Decode) check(b, in, cpu, MoePath::Decode, MoePath::Decode, what);
        if (autop != MoePath::Grouped) check(b, in, cpu, MoePath::Grouped, MoePath::Grouped, what);
      }
  }
};

TEST_F(CudaMoe, RealShapesEveryFormat) {
  for (FormatId f : {FormatId::NVFP4, FormatId::MXFP8, FormatId::FP8_BLOCK, FormatId::BF16}) {
    Bank b;
    make_bank(b, std::vector<FormatId>(48, f), 512, 2560, 640);
    std::vector<int64_t> Ts = {1, 2, 4, 8, 16, 100};
    if (f == FormatId::NVFP4 || f == FormatId::FP8_BLOCK) Ts.push_back(4096);
    sweep(b, 10, Ts, std::string(format_name(f)) + " E512 k10");
  }
}

TEST_F(CudaMoe, FixtureShapes) {
  // qwen4_exp / glm5_next fixtures: D 64, I 32, E 8, k 2; qwen3_next: D 256, I 64.
  for (FormatId f : {FormatId::NVFP4, FormatId::BF16, FormatId::MXFP8, FormatId::FP8_BLOCK}) {
    Bank b;
    make_bank(b, std::vector<FormatId>(8, f), 8, 64, 32);
    sweep(b, 2, {1, 2, 4, 16, 100}, std::string(format_name(f)) + " fixture D64 I32");
    make_bank(b, std::vector<FormatId>(8, f), 8, 256, 64);
    sweep(b, 2, {1, 3, 40}, std::string(format_name(f)) + " fixture D256 I64");
  }
}

// Both decode variants in every unit width and format the kernels read, at shapes where the lanes' share
// of a row's units is uneven and the last block has idle groups: D 3584 × I 224 (gate/up rows of 224 FP4
// units: one group of 32 lanes, a second partial pass of loads ahead), D 608 × I 96 (38 and 6 units over
// groups of 8 lanes), and for the 8- and 4-element units D = I = 40 / 20 (groups of 8 lanes over 16-row
// blocks: the last block is half empty).
TEST_F(CudaMoe, DecodeVariantsEveryFormatUnevenSplits) {
  const FormatId all[] = {FormatId::NVFP4,     FormatId::W4A16_NVFP4, FormatId::MXFP4,      FormatId::MXFP8,
                          FormatId::FP8_BLOCK, FormatId::FP8_CHANNEL, FormatId::FP8_TENSOR, FormatId::BF16,
                          FormatId::F16,       FormatId::F32};
  for (FormatId f : all) {
    std::vector<std::pair<int64_t, int64_t>> shapes = {{3584, 224}, {608, 96}};
    if (f == FormatId::BF16 || f == FormatId::F16) shapes.push_back({40, 40});
    if (f == FormatId::F32) shapes.push_back({20, 20});
    for (auto [D, I] : shapes) {
      Bank b;
      make_bank(b, std::vector<FormatId>(4, f), 16, D, I);
      const std::string what =
          std::string(format_name(f)) + " D" + std::to_string(D) + " I" + std::to_string(I);
      const float lim = binding_limit(b);
      for (auto [T, limit] : {std::pair<int64_t, float>{1, 0.0f}, {3, lim}}) {
        const Inputs in = inputs(b, T, 4, limit);
        const auto cpu = run_cpu(b, in);
        check(b, in, cpu, MoePath::Decode, MoePath::Decode, what);
      }
    }
  }
}

TEST_F(CudaMoe, SkewedRoutingAndLoop) {
  Bank b;
  make_bank(b, std::vector<FormatId>(32, FormatId::NVFP4), 512, 2560, 640);
  for (int64_t T : {1, 100}) {
    // Slot 0 of every token is expert 5; the rest come from 24 experts; the other 487 get nothing.
    Inputs in = inputs(b, T, 10, 0.0f);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<int32_t> pool(24);
      std::iota(pool.begin(), pool.end(), 200);
      std::shuffle(pool.begin(), pool.end(), rng_);
      in.ids[t * 10] = 5;
      for (int j = 1; j < 10; ++j) in.ids[t * 10 + j] = pool[j];
    }
    const auto cpu = run_cpu(b, in);
    check(b, in, cpu, MoePath::Decode, MoePath::Decode, "skewed");
    check(b, in, cpu, MoePath::Grouped, MoePath::Grouped, "skewed");
    check(b, in, cpu, MoePath::Loop, MoePath::Loop, "skewed");
  }
}

TEST_F(CudaMoe, RepeatsAreBitIdentical) {
  Bank b;
  make_bank(b, std::vector<FormatId>(16, FormatId::NVFP4), 512, 2560, 640);
  for (auto [T, path] :
       {std::pair<int64_t, MoePath>{1, MoePath::Decode}, {4, MoePath::Decode}, {300, MoePath::Grouped}})
    for (int v : {1, 2, 3}) {
      cuda::set_moe_decode_variant(v);
      const Inputs in = inputs(b, T, 10, 0.0f);
      const auto a = run_gpu(b, in, path), c = run_gpu(b, in, path);
      EXPECT_EQ(0, std::memcmp(a.data(), c.data(), a.size() * 4))
          << path_name(path) << " T=" << T << " v" << v;
    }
}

TEST_F(CudaMoe, MissingMixedAndBadIds) {
  // Missing experts 1, 4, 6: the decode path serves pairs routed elsewhere; the grouped path needs every
  // expert, so a forced grouped call runs the loop.
  Bank b;
  make_bank(b, std::vector<FormatId>(8, FormatId::NVFP4), 8, 64, 32);
  for (int e : {1, 4, 6}) b.ec[e] = {}, b.eg[e] = {};
  Inputs in = inputs(b, 6, 2, 0.0f);
  const int32_t ok[5] = {0, 2, 3, 5, 7};
  for (int64_t t = 0; t < 6; ++t) in.ids[t * 2] = ok[t % 5], in.ids[t * 2 + 1] = ok[(t + 2) % 5];
  auto cpu = run_cpu(b, in);
  check(b, in, cpu, MoePath::Decode, MoePath::Decode, "missing experts");
  check(b, in, cpu, MoePath::Grouped, MoePath::Loop, "missing experts");

  // Mixed formats (half NVFP4, half BF16): one kernel cannot read both, so every path is the loop.
  Bank m;
  std::vector<FormatId> fm(8, FormatId::NVFP4);
  for (int i = 4; i < 8; ++i) fm[i] = FormatId::BF16;
  make_bank(m, fm, 8, 64, 32);
  in = inputs(m, 5, 2, 0.0f);
  cpu = run_cpu(m, in);
  check(m, in, cpu, MoePath::Auto, MoePath::Loop, "mixed formats");
  check(m, in, cpu, MoePath::Grouped, MoePath::Loop, "mixed formats");

  // A bad id (no host sync to raise on): its token's row is NaN, the others are right. BF16 for variants 1
  // and 2; NVFP4 at D 256, I 64 for variant 3 (its tensor-core kernels take both products there).
  Bank g, g4;
  make_bank(g, std::vector<FormatId>(8, FormatId::BF16), 8, 64, 32);
  make_bank(g4, std::vector<FormatId>(8, FormatId::NVFP4), 8, 256, 64);
  for (auto [p, v] :
       {std::pair{MoePath::Decode, 1}, {MoePath::Decode, 2}, {MoePath::Grouped, 2}, {MoePath::Decode, 3}}) {
    cuda::set_moe_decode_variant(v);
    const Bank& gb = v == 3 ? g4 : g;
    const int64_t D = gb.D;
    in = inputs(gb, 3, 2, 0.0f);
    cpu = run_cpu(gb, in);
    Inputs bad = in;
    bad.ids[1 * 2 + 1] = p == MoePath::Decode ? 8 : -1;
    const auto out = run_gpu(gb, bad, p);
    double m = 0.0;
    for (float v : cpu) m = std::max(m, std::fabs(static_cast<double>(v)));
    for (int64_t t = 0; t < 3; ++t)
      for (int64_t c = 0; c < D; ++c) {
        const float val = out[t * D + c];
        if (t == 1)
          EXPECT_TRUE(std::isnan(val)) << path_name(p) << " v" << v << " c " << c;
        else
          EXPECT_NEAR(val, cpu[t * D + c], 1e-2 * m) << path_name(p) << " v" << v;
      }
  }
}

TEST_F(CudaMoe, ReplacedWeightsBehindTheSameSpan) {
  // The device table is cached per span; new weights placed in the same vector must be seen.
  Bank b;
  make_bank(b, std::vector<FormatId>(8, FormatId::BF16), 8, 64, 32);
  const ExpertWeights* before = b.eg.data();
  Inputs in = inputs(b, 2, 2, 0.0f);
  auto cpu = run_cpu(b, in);
  check(b, in, cpu, MoePath::Decode, MoePath::Decode, "first weights");
  // New weights: the old ones are freed; the span keeps its address and size.
  std::vector<Weight> wc, wg;
  std::vector<std::unique_ptr<StoredWeight>> keep;
  for (int64_t d = 0; d < 8; ++d)
    for (int p = 0; p < 3; ++p) {
      const int64_t n = p < 2 ? 32 : 64, kk = p < 2 ? 64 : 32;
      keep.push_back(make_stored(FormatId::NVFP4, n, kk, rng_));
      wc.push_back(cpu_->upload_weight("new", keep.back()->decoded, {n, kk}));
      wg.push_back(gpu_->upload_stored("new", {n, kk}, keep.back()->wb));
    }
  for (int64_t e = 0; e < 8; ++e) {
    b.ec[e] = {&wc[3 * e], &wc[3 * e + 1], &wc[3 * e + 2]};
    b.eg[e] = {&wg[3 * e], &wg[3 * e + 1], &wg[3 * e + 2]};
  }
  b.wc.clear(), b.wg.clear();
  ASSERT_EQ(before, b.eg.data());
  cpu = run_cpu(b, in);
  check(b, in, cpu, MoePath::Decode, MoePath::Decode, "replaced weights");
}

// weight_access.cuh's unit decoder (decode_unit = load_unit + unscaled_unit + the per-element scales: the one
// set GEMV, routed experts and their variants share; table-free FP4 / FP8) equals the element reader
// weight_element bit for bit (NaN codes included) and the CPU decoders (NaN for NaN), in every format.
TEST_F(CudaMoe, FastUnitDecodeIsBitExact) {
  for (FormatId f :
       {FormatId::NVFP4, FormatId::W4A16_NVFP4, FormatId::MXFP4, FormatId::MXFP8, FormatId::FP8_BLOCK,
        FormatId::FP8_CHANNEL, FormatId::FP8_TENSOR, FormatId::BF16, FormatId::F16, FormatId::F32}) {
    const int64_t n = 64, K = 512;
    auto s = make_any(f, n, K, rng_);
    const bool fp8 = f == FormatId::MXFP8 || f == FormatId::FP8_BLOCK || f == FormatId::FP8_CHANNEL ||
                     f == FormatId::FP8_TENSOR;
    if (fp8) {  // every E4M3 byte, the NaN codes too
      for (size_t i = 0; i < s->main.size(); ++i) s->main[i] = static_cast<uint8_t>(i * 7 + i / 256);
      decode_rows(s->wb, 0, n, s->decoded.data());
    }
    Weight w = gpu_->upload_stored("w", {n, K}, s->wb);
    const cuda::DeviceWeight& dw = cuda::device_weight(w, "test");
    ASSERT_TRUE(cuda::moe_units_ok(dw.format, dw.cols, dw.block_k, dw.data));
    Tensor fast = gpu_->alloc({n, K}), ref = gpu_->alloc({n, K});
    cuda::moe_decode_units(dw, true, fast.f32(), gpu_->stream());
    cuda::moe_decode_units(dw, false, ref.f32(), gpu_->stream());
    const auto a = gpu_->download(fast), b = gpu_->download(ref);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << format_name(f);
    int nans = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const bool both_nan = std::isnan(a[i]) && std::isnan(s->decoded[i]);
      nans += both_nan;
      if (!both_nan)
        ASSERT_EQ(0, std::memcmp(&a[i], &s->decoded[i], 4)) << format_name(f) << " element " << i;
    }
    if (fp8) EXPECT_GT(nans, 0) << "NaN codes covered";
  }
}

// Decode MoE per layer at qwen4_exp's size (not pass/fail): E = 512 distinct experts on the card (one
// random triple uploaded 512 times: the bytes read are what matters), a fresh routing per call so L2 holds
// no earlier call's experts. Bytes = the distinct routed experts' stored bytes (what must be read).
TEST_F(CudaMoe, DecodeBandwidth) {
  const int64_t E = 512, D = 2560, I = 640, k = 10;
  constexpr int kIters = 40;
  for (FormatId f : {FormatId::NVFP4, FormatId::FP8_BLOCK, FormatId::MXFP8, FormatId::BF16}) {
    auto sg = make_stored(f, I, D, rng_), sd = make_stored(f, D, I, rng_);
    const auto stored_bytes = [](const StoredWeight& s) {
      return static_cast<double>(s.main.size() + s.scales.size() + s.grid.size() * 4);
    };
    const double expert_bytes = 2 * stored_bytes(*sg) + stored_bytes(*sd);
    std::vector<Weight> wg;
    wg.reserve(3 * E);
    std::vector<ExpertWeights> eg(E);
    for (int64_t e = 0; e < E; ++e) {
      wg.push_back(gpu_->upload_stored("g", {I, D}, sg->wb));
      wg.push_back(gpu_->upload_stored("u", {I, D}, sg->wb));
      wg.push_back(gpu_->upload_stored("d", {D, I}, sd->wb));
      eg[e] = {&wg[3 * e], &wg[3 * e + 1], &wg[3 * e + 2]};
    }
    const cuda::ExpertSet& set = cuda::expert_set(gpu_.get(), eg);
    ASSERT_TRUE(set.units_ok);
    for (int64_t T : {1, 4, 16, 32}) {
      std::vector<Tensor> ids;
      double distinct = 0.0;
      for (int i = 0; i < kIters; ++i) {
        const auto h = random_ids(T, k, E);
        distinct += static_cast<double>(std::set<int32_t>(h.begin(), h.end()).size()) / kIters;
        ids.push_back(gpu_->alloc({T, k}, ElemType::I32));
        ASSERT_EQ(cudaSuccess, cudaMemcpy(ids.back().i32(), h.data(), h.size() * 4, cudaMemcpyHostToDevice));
      }
      Tensor x = gpu_->upload(randn(T * D, 0.5f), {T, D}), w = gpu_->upload(uniform(T * k, 0, 0.3f), {T, k});
      Tensor out = gpu_->alloc({T, D});
      const double bytes = distinct * expert_bytes;
      float* scratch = nullptr;
      ASSERT_EQ(cudaSuccess, cudaMalloc(&scratch, static_cast<size_t>(T * k * (I + D)) * 4));
      const auto time_us = [&](auto&& call) {
        call(ids[kIters - 1]);
        cudaEvent_t a, c;
        cudaEventCreate(&a), cudaEventCreate(&c);
        gpu_->synchronize();
        cudaEventRecord(a);
        for (int i = 0; i < kIters; ++i) call(ids[i]);
        cudaEventRecord(c);
        cudaEventSynchronize(c);
        float ms = 0;
        cudaEventElapsedTime(&ms, a, c);
        cudaEventDestroy(a), cudaEventDestroy(c);
        return 1e3 * ms / kIters;
      };
      for (MoePath p : {MoePath::Decode, MoePath::Grouped, MoePath::Loop})
        for (int v : {1, 2, 3}) {
          if (p == MoePath::Loop && T > 4) continue;  // the old path: measured where decode replaces it
          if (p != MoePath::Decode && v != 2) continue;
          cuda::set_moe_decode_variant(v);
          cuda::force_moe_path(p);
          const double us = time_us([&](Tensor& id) { gpu_->moe_experts(out, x, id, w, eg, 0.0f); });
          EXPECT_EQ(static_cast<int>(p), static_cast<int>(cuda::moe_last_path()));
          const std::string name = p == MoePath::Decode ? "decode" + std::to_string(v) : path_name(p);
          std::printf(
              "[moe-bench] %-9s T=%-3lld %-7s %8.1f us/layer  %6.1f MB distinct experts  %7.0f GB/s\n",
              std::string(format_name(f)).c_str(), static_cast<long long>(T), name.c_str(), us, bytes / 1e6,
              bytes / (us * 1e-6) / 1e9);
        }
      cuda::force_moe_path(MoePath::Auto);
      // The decode kernels alone, variants 1, 2 and 3 side by side: gate+up (2/3 of the bytes) and down
      // (1/3).
      double gu[3], dn[3];
      for (int v : {1, 2, 3}) {
        cuda::set_moe_decode_variant(v);
        gu[v - 1] = time_us([&](Tensor& id) {
          cuda::moe_gate_up(set.tab, set.gate_fmt, set.up_fmt, id.i32(), T * k, k, x.f32(), D, I, 0.0f,
                            scratch, gpu_->stream());
        });
        dn[v - 1] = time_us([&](Tensor& id) {
          cuda::moe_down(set.tab, set.down_fmt, id.i32(), T * k, scratch, I, D, scratch + T * k * I,
                         gpu_->stream());
        });
      }
      cuda::set_moe_decode_variant(variant0_);
      const auto gbs = [](double b, double us) { return b / (us * 1e-6) / 1e9; };
      std::printf(
          "[moe-bench] %-9s T=%-3lld kernels v1 | v2 | v3: gate_up %.1f | %.1f | %.1f us (%.0f | %.0f | %.0f "
          "GB/s), down %.1f | %.1f | %.1f us (%.0f | %.0f | %.0f GB/s)\n",
          std::string(format_name(f)).c_str(), static_cast<long long>(T), gu[0], gu[1], gu[2],
          gbs(bytes * 2 / 3, gu[0]), gbs(bytes * 2 / 3, gu[1]), gbs(bytes * 2 / 3, gu[2]), dn[0], dn[1],
          dn[2], gbs(bytes / 3, dn[0]), gbs(bytes / 3, dn[1]), gbs(bytes / 3, dn[2]));
      cudaFree(scratch);
    }
  }
}

}  // namespace
}  // namespace bloomery::gputest
