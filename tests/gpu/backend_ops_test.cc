// CUDA backend vs CPU backend on the small ops at the real model shapes (hidden 2560, heads 24/2 × 256,
// 512 experts, GDN 16/48 × 128), random data, and sampling on the card.
//
// Tolerances (f32 on both sides; differences come from summation order, FMA contraction and the device's
// expf/sinf, each within 2 ulp):
//  * norms, elementwise, SwiGLU, gates, router weights: |g − c| ≤ 1e-5·|c| + 1e-6 — a few ulp of the
//    reduction (a 2560-term sum of squares in another order moves the rms by ≲ 1e-6 relative);
//  * rope: angles are bit-identical (inv_freq from the host), sin/cos differ by ≤ 2 ulp: 1e-5·|c| + 1e-5;
//  * attention: online vs two-pass softmax and a different dot order: 1e-4 of the largest output magnitude;
//  * GDN recurrence (same algorithm, other FMA order): 1e-4 of the largest output; GPU recurrence vs CPU
//  chunked
//    form (equal algebraically, the triangular solve amplifies rounding): 2e-3.
#include <algorithm>
#include <bit>
#include <cstdio>
#include <numeric>
#include <set>

#include "backend/cuda/attention/decode_attention.h"
#include "backend/cuda/attention/flash_attention.h"
#include "backend_util.h"

namespace bloomery::gputest {
namespace {

class CudaOps : public BackendPair {
 protected:
  template <class F>
  double ms_per_call(F&& fn, int reps) {
    return gputest::ms_per_call(*gpu_, fn, reps);
  }
  std::pair<Tensor, Tensor> both(const std::vector<float>& v, std::vector<int64_t> shape) {
    return {cpu_->upload(v, shape), gpu_->upload(v, shape)};
  }
  std::pair<Weight, Weight> weights(const std::vector<float>& v, std::vector<int64_t> shape) {
    return {cpu_->upload_weight("w", v, shape), gpu_->upload_weight("w", v, shape)};
  }
  void check(const Tensor& g, const Tensor& c, double rel, double abs, const std::string& what) {
    expect_close(gpu_->download(g), cpu_->download(c), rel, abs, what);
  }
};

TEST_F(CudaOps, Elementwise) {
  const int64_t T = 8, D = 2560;
  auto [ac, ag] = both(randn(T * D), {T, D});
  auto [bc, bg] = both(randn(T * D, 3.0f), {T, D});
  auto [sc, sg] = both(randn(T), {T});
  Tensor oc = cpu_->alloc({T, D}), og = gpu_->alloc({T, D});
  cpu_->add(oc, ac, bc), gpu_->add(og, ag, bg), check(og, oc, 0, 0, "add (exact)");
  cpu_->add_scaled(oc, ac, bc, 0.37f), gpu_->add_scaled(og, ag, bg, 0.37f),
      check(og, oc, 1e-6, 1e-7, "add_scaled");
  cpu_->mul(oc, ac, bc), gpu_->mul(og, ag, bg), check(og, oc, 0, 0, "mul (exact)");
  cpu_->sigmoid_mul(oc, ac, bc), gpu_->sigmoid_mul(og, ag, bg), check(og, oc, 1e-5, 1e-6, "sigmoid_mul");
  cpu_->scale_rows(oc, ac, sc), gpu_->scale_rows(og, ag, sg), check(og, oc, 0, 0, "scale_rows (exact)");
  for (Act a : {Act::Silu, Act::Sigmoid, Act::Softplus, Act::Relu}) {
    cpu_->activate(oc, bc, a), gpu_->activate(og, bg, a);
    check(og, oc, 1e-5, 1e-6, "activate " + std::to_string(static_cast<int>(a)));
  }
  for (float lim : {0.0f, 1.5f}) {
    cpu_->swiglu(oc, ac, bc, lim), gpu_->swiglu(og, ag, bg, lim);
    check(og, oc, 1e-5, 1e-6, "swiglu limit " + std::to_string(lim));
  }
  Tensor tc = cpu_->alloc({T, 256}), tg = gpu_->alloc({T, 256});
  cpu_->take_cols(tc, ac, 512), gpu_->take_cols(tg, ag, 512), check(tg, tc, 0, 0, "take_cols");
  cpu_->put_cols(oc, tc, 1000), gpu_->put_cols(og, tg, 1000), check(og, oc, 1e-5, 1e-6, "put_cols");
  Tensor small = gpu_->alloc({3, 5});
  EXPECT_THROW(gpu_->add(small, ag, bg), Error);
}

TEST_F(CudaOps, Norms) {
  const int64_t T = 8, D = 2560;
  auto [xc, xg] = both(randn(T * D, 2.0f), {T, D});
  auto [wc, wg] = weights(randn(D, 0.3f), {D});
  Tensor oc = cpu_->alloc({T, D}), og = gpu_->alloc({T, D});
  for (NormKind k : {NormKind::Plain, NormKind::OnePlus}) {
    cpu_->rms_norm(oc, xc, &wc, 1e-6f, k), gpu_->rms_norm(og, xg, &wg, 1e-6f, k);
    check(og, oc, 1e-5, 1e-6, "rms_norm kind " + std::to_string(static_cast<int>(k)));
  }
  cpu_->rms_norm(oc, xc, nullptr, 1e-6f, NormKind::Unweighted);
  gpu_->rms_norm(og, xg, nullptr, 1e-6f, NormKind::Unweighted);
  check(og, oc, 1e-5, 1e-6, "rms_norm unweighted");
  // q_norm per head: [T, 24·256] with a shared 256-weight, and a per-group weight of all 6144 channels.
  auto [qc, qg] = both(randn(T * 24 * 256), {T, 24 * 256});
  auto [hc, hg] = weights(randn(256, 0.3f), {256});
  auto [pc, pg] = weights(randn(24 * 256, 0.3f), {24 * 256});
  Tensor qoc = cpu_->alloc({T, 24 * 256}), qog = gpu_->alloc({T, 24 * 256});
  cpu_->rms_norm(qoc, qc, &hc, 1e-6f, NormKind::OnePlus, 256),
      gpu_->rms_norm(qog, qg, &hg, 1e-6f, NormKind::OnePlus, 256);
  check(qog, qoc, 1e-5, 1e-6, "grouped shared-weight rms_norm");
  cpu_->rms_norm(qoc, qc, &pc, 1e-6f, NormKind::OnePlus, 256),
      gpu_->rms_norm(qog, qg, &pg, 1e-6f, NormKind::OnePlus, 256);
  check(qog, qoc, 1e-5, 1e-6, "grouped per-group rms_norm");
  // Gated (GDN output): x, z [T, 48·128], w [128], SiLU gate; in place on the GPU side.
  auto [gxc, gxg] = both(randn(T * 48 * 128), {T, 48, 128});
  auto [zc, zg] = both(randn(T * 48 * 128), {T, 48, 128});
  auto [gwc, gwg] = weights(randn(128, 0.3f), {128});
  Tensor goc = cpu_->alloc({T, 48, 128});
  cpu_->rms_norm_gated(goc, gxc, zc, gwc, 1e-6f, Act::Silu);
  gpu_->rms_norm_gated(gxg, gxg, zg, gwg, 1e-6f, Act::Silu);
  check(gxg, goc, 1e-5, 1e-6, "rms_norm_gated (in place)");
  auto [lxc, lxg] = both(randn(T * 128, 2.0f), {T, 128});
  auto [lwc, lwg] = weights(randn(128), {128});
  auto [lbc, lbg] = weights(randn(128), {128});
  Tensor loc = cpu_->alloc({T, 128}), logp = gpu_->alloc({T, 128});
  cpu_->layer_norm(loc, lxc, lwc, lbc, 1e-6f), gpu_->layer_norm(logp, lxg, lwg, lbg, 1e-6f);
  check(logp, loc, 1e-5, 1e-5, "layer_norm");
}

TEST_F(CudaOps, RopePartialAndInterleaved) {
  const int64_t T = 16, H = 24, hd = 256;
  std::vector<int64_t> pos(T);
  for (int64_t t = 0; t < T; ++t) pos[t] = 30000 + 7 * t;
  for (bool inter : {false, true}) {
    auto [xc, xg] = both(randn(T * H * hd), {T, H, hd});
    RopeSpec r{.rot_dim = 64, .theta = 1e7, .interleaved = inter, .mrope_section = {11, 11, 10}};
    cpu_->rope(xc, pos, r), gpu_->rope(xg, pos, r);
    check(xg, xc, 1e-5, 1e-5, inter ? "rope interleaved" : "rope neox partial (mrope sections)");
  }
}

// The decode and prompt kernels against the CPU: qwen4_exp's heads (24 over 2, d 256) at short, long and
// masked contexts (query 0 of a masked case sees nothing: zeros), and other head layouts (d 128, one query
// head per KV head, 16 per KV head, dv < d, d 32 and 64). Decode rows run on both decode kernels (by KV head,
// decode_attention.cu, and per query head), the output poisoned with NaN first.
TEST_F(CudaOps, AttentionDecodeAndPrompt) {
  for (bool by_kv_head : {true, false}) {
    cuda::set_gqa_decode(by_kv_head);
    SCOPED_TRACE(by_kv_head ? "decode by KV head" : "decode per query head");
    struct Case {
      int64_t T, S;
      bool mask;
      int64_t Hq = 24, Hkv = 2, d = 256, dv = 256;
    };
    for (const Case& cs :
         {Case{1, 300, false}, Case{1, 4100, false}, Case{70, 200, false}, Case{33, 160, true},
          Case{2, 3000, true}, Case{3, 40000, false}, Case{1, 2000, true, 16, 16, 128, 128},
          Case{4, 999, false, 32, 2, 128, 128}, Case{1, 130, false, 8, 1, 256, 128}, Case{1, 5, false},
          Case{1, 4097, true}, Case{5, 4101, true}, Case{9, 70, true, 8, 2, 64, 32},
          Case{1, 600, false, 4, 2, 32, 32}, Case{2, 9000, false, 16, 4, 128, 64}}) {
      const int64_t Hq = cs.Hq, Hkv = cs.Hkv, d = cs.d, dv = cs.dv;
      auto [qc, qg] = both(randn(cs.T * Hq * d), {cs.T, Hq, d});
      auto [kc, kg] = both(randn(cs.S * Hkv * d), {cs.S, Hkv, d});
      auto [vc, vg] = both(randn(cs.S * Hkv * dv), {cs.S, Hkv, dv});
      std::vector<float> allowed(cs.T * cs.S, 1.0f);
      if (cs.mask) {
        for (auto& a : allowed) a = (rng_() % 3) ? 1.0f : 0.0f;
        for (int64_t j = 0; j < cs.S; ++j) allowed[j] = 0.0f;  // query 0 sees nothing: zeros
      }
      auto [ac, ag] = both(allowed, {cs.T, cs.S});
      Tensor oc = cpu_->alloc({cs.T, Hq, dv}), og = gpu_->alloc({cs.T, Hq, dv});
      gpu_->fill(og, std::nanf(""));
      const int64_t q0 = cs.S - cs.T;
      cpu_->attention(oc, qc, kc, vc, q0, 0.0625f, cs.mask ? &ac : nullptr);
      gpu_->attention(og, qg, kg, vg, q0, 0.0625f, cs.mask ? &ag : nullptr);
      const auto g = gpu_->download(og), c = cpu_->download(oc);
      const double r = max_rel(g, c);
      const std::string what = "T=" + std::to_string(cs.T) + " S=" + std::to_string(cs.S) +
                               " Hq=" + std::to_string(Hq) + " Hkv=" + std::to_string(Hkv) +
                               " d=" + std::to_string(d) + " dv=" + std::to_string(dv);
      EXPECT_LE(r, 1e-4) << what;
      if (cs.mask) {
        for (int64_t e = 0; e < Hq * dv; ++e)
          ASSERT_EQ(g[e], 0.0f) << "fully masked query gives zeros, " << what;
      }
      std::printf("[attention] %s mask=%d by-kv-head=%d: max|gpu-cpu|/max|cpu| = %.2e\n", what.c_str(),
                  cs.mask, by_kv_head, r);
    }
  }
  cuda::set_gqa_decode(true);
}

// Decode attention at qwen4_exp's shapes (24 query heads over 2 KV heads, d 256, the QSA mask keeping half of
// the keys in runs of 4) and qwen3_next's (16 over 2, no mask): the per-query-head kernel against the
// by-KV-head one, with f32 and BF16 caches (-ctk/-ctv), time per call (split merge included) and the rate of
// the K and V bytes the mask keeps.
TEST_F(CudaOps, AttentionDecodeTimings) {
  for (const auto& [Hq, masked] : {std::pair<int64_t, bool>{24, true}, {16, false}})
    for (int64_t S : {4097, 32769}) {
      for (int64_t T : {1, 5}) {
        const int64_t Hkv = 2, d = 256;
        Tensor q = gpu_->upload(randn(T * Hq * d), {T, Hq, d}), o = gpu_->alloc({T, Hq, d});
        Tensor k = gpu_->upload(randn(S * Hkv * d), {S, Hkv, d}),
               v = gpu_->upload(randn(S * Hkv * d), {S, Hkv, d});
        Tensor kb = gpu_->alloc({S, Hkv, d}, ElemType::BF16), vb = gpu_->alloc({S, Hkv, d}, ElemType::BF16);
        gpu_->copy(kb, k), gpu_->copy(vb, v);
        std::vector<float> allowed(T * S, 1.0f);
        if (masked)
          for (int64_t t = 0; t < T; ++t)
            for (int64_t j = 0; j < S; j += 4)
              if (rng_() % 2)
                for (int64_t m = j; m < std::min(S, j + 4); ++m) allowed[t * S + m] = 0.0f;
        Tensor m = gpu_->upload(allowed, {T, S});
        const double kept = std::accumulate(allowed.begin(), allowed.begin() + S, 0.0);
        for (bool bf16 : {false, true})
          for (bool by_kv : {false, true}) {
            cuda::set_gqa_decode(by_kv);
            const Tensor &kc = bf16 ? kb : k, &vc = bf16 ? vb : v;
            const double ms = ms_per_call(
                [&] { gpu_->attention(o, q, kc, vc, S - T, 0.0625f, masked ? &m : nullptr); }, 50);
            const double elem = bf16 ? 2 : 4;  // bytes of a cache element
            std::printf(
                "[time] decode attention T=%lld S=%lld (%lld/2 heads, d 256%s) %s, %s cache: %.1f us, "
                "%.0f GB/s of kept K+V\n",
                static_cast<long long>(T), static_cast<long long>(S), static_cast<long long>(Hq),
                masked ? ", QSA-style mask" : "", by_kv ? "by KV head" : "per query head",
                bf16 ? "bf16" : "f32", ms * 1e3, kept * Hkv * d * 2 * elem / (ms * 1e-3) / 1e9);
          }
      }
    }
  cuda::set_gqa_decode(true);
}

// The prompt kernel on the tensor cores (attention/flash_attention.cu) against the CPU and against the scalar
// kernel it replaces: every head dim it takes, GQA groups of 1, 6 and 12, prompts that are not a multiple of
// its 64-token tile, prompts appended to a cached context (q0 > 0), QSA-style masks (a third of the keys off,
// query 0 sees nothing), fresh data per case and the output poisoned with NaN first, so an unwritten element
// fails. Bound: split BF16 operands keep ~2^-17 of each product, so 1e-4 of the largest output as the scalar
// kernel's own bound. Two runs must agree bit for bit.
TEST_F(CudaOps, FlashAttentionPrompt) {
  struct Case {
    int64_t T, q0;
    bool mask;
    int64_t Hq, Hkv, d;
  };
  ASSERT_TRUE(cuda::flash_attention_enabled()) << "the prompt kernel is on by default";
  for (const Case& cs :
       {Case{16, 0, false, 24, 2, 256}, Case{300, 0, true, 24, 2, 256}, Case{130, 777, true, 24, 2, 256},
        Case{64, 0, false, 16, 2, 256}, Case{200, 50, false, 8, 8, 128}, Case{97, 0, true, 6, 2, 32},
        Case{129, 31, false, 4, 2, 64}, Case{40, 0, true, 12, 1, 128}}) {
    const int64_t T = cs.T, S = cs.q0 + cs.T, Hq = cs.Hq, Hkv = cs.Hkv, d = cs.d;
    ASSERT_TRUE(cuda::flash_attention_applies(
        T, Hq, d, Hkv, d, false, reinterpret_cast<const float*>(16), reinterpret_cast<const float*>(16),
        reinterpret_cast<const float*>(16), reinterpret_cast<const float*>(16)));
    auto [qc, qg] = both(randn(T * Hq * d, 2.0f), {T, Hq, d});
    auto [kc, kg] = both(randn(S * Hkv * d), {S, Hkv, d});
    auto [vc, vg] = both(randn(S * Hkv * d), {S, Hkv, d});
    std::vector<float> allowed(T * S, 1.0f);
    if (cs.mask) {
      for (auto& a : allowed) a = (rng_() % 3) ? 1.0f : 0.0f;
      for (int64_t j = 0; j < S; ++j) allowed[j] = 0.0f;  // query 0 sees nothing: zeros
    }
    auto [ac, ag] = both(allowed, {T, S});
    const Tensor* mc = cs.mask ? &ac : nullptr;
    const Tensor* mg = cs.mask ? &ag : nullptr;
    Tensor oc = cpu_->alloc({T, Hq, d}), og = gpu_->alloc({T, Hq, d}), os = gpu_->alloc({T, Hq, d});
    cpu_->attention(oc, qc, kc, vc, cs.q0, 0.0625f, mc);
    gpu_->fill(og, NAN);
    gpu_->attention(og, qg, kg, vg, cs.q0, 0.0625f, mg);
    const auto g = gpu_->download(og), c = cpu_->download(oc);
    cuda::set_flash_attention(false);
    gpu_->attention(os, qg, kg, vg, cs.q0, 0.0625f, mg);
    cuda::set_flash_attention(true);
    const auto sc = gpu_->download(os);
    gpu_->fill(og, NAN);
    gpu_->attention(og, qg, kg, vg, cs.q0, 0.0625f, mg);
    const std::string what = "T=" + std::to_string(T) + " q0=" + std::to_string(cs.q0) +
                             " Hq=" + std::to_string(Hq) + " Hkv=" + std::to_string(Hkv) +
                             " d=" + std::to_string(d) + (cs.mask ? " masked" : "");
    EXPECT_EQ(gpu_->download(og), g) << "two runs differ, " << what;
    const double r = max_rel(g, c), rs = max_rel(g, sc);
    EXPECT_LE(r, 1e-4) << what;
    EXPECT_LE(rs, 1e-4) << "against the scalar kernel, " << what;
    if (cs.mask)
      for (int64_t e = 0; e < Hq * d; ++e)
        ASSERT_EQ(g[e], 0.0f) << "fully masked query gives zeros, " << what;
    std::printf("[flash attention] %s: max|gpu-cpu|/max|cpu| = %.2e, vs scalar kernel %.2e\n", what.c_str(),
                r, rs);
  }
}

// f32 -> BF16 bits rounded to nearest even, a NaN kept a quiet NaN: the host's reference for the card's
// rounding (as __float2bfloat16_rn and torch; NaN payloads may differ).
uint16_t host_bf16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
float host_widen(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}
std::vector<float> bf16_rounded(const std::vector<float>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = host_widen(host_bf16(v[i]));
  return r;
}
// The same bits, or both NaN.
bool same_value(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}
std::string hex_bits(float x) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", std::bit_cast<uint32_t>(x));
  return buf;
}

// copy f32 -> BF16 on the card rounds as the host does: ties to even (low half exactly 0x8000 under an even
// and an odd upper half, both signs), just past and short of a tie, carries into the exponent, denormals,
// ±0, ±inf, NaNs (one whose payload is only in the low half, which truncation would turn into inf), values
// that round past the largest BF16 to inf, random bit patterns and normal values; download widens exactly.
// Then BF16 -> f32 -> BF16 gives the same values back, BF16 -> BF16 copies slices as bytes, and fill rounds.
TEST_F(CudaOps, CopyRoundsToBf16LikeTheHost) {
  std::vector<uint32_t> bits = {
      0x3F808000u, 0x3F818000u, 0xBF808000u, 0xBF818000u,  // ties: even upper half stays, odd rounds up
      0x3F808001u, 0x3F807FFFu, 0x3F7FFFFFu, 0x3FFFFFFFu,  // past / short of a tie, carries into the exponent
      0x00008000u, 0x00018000u, 0x80018000u, 0x00000001u, 0x007FFFFFu, 0x00010000u,  // denormals
      0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u,                            // ±0, ±inf
      0x7FC00000u, 0xFFC00001u, 0x7F800001u, 0x7FFFFFFFu,                            // NaNs
      0x7F7FFFFFu, 0x7F7F7FFFu, 0x7F7F8000u, 0xFF7FFFFFu, 0x7F000000u, 0x4B7FFFFFu,  // large
  };
  for (int i = 0; i < 4096; ++i) bits.push_back(static_cast<uint32_t>(rng_()));
  std::vector<float> vals(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) vals[i] = std::bit_cast<float>(bits[i]);
  for (float x : randn(1000, 3.0f)) vals.push_back(x);
  const int64_t n = static_cast<int64_t>(vals.size());

  Tensor f = gpu_->upload(vals, {n});
  Tensor b = gpu_->alloc({n}, ElemType::BF16);
  gpu_->fill(b, NAN);  // every element must be written
  gpu_->copy(b, f);
  const auto got = gpu_->download(b);
  ASSERT_EQ(got.size(), vals.size());
  for (size_t i = 0; i < vals.size(); ++i) {
    const float want = host_widen(host_bf16(vals[i]));
    ASSERT_TRUE(same_value(got[i], want)) << "element " << i << ": f32 " << hex_bits(vals[i]) << " -> "
                                          << hex_bits(got[i]) << ", host " << hex_bits(want);
  }

  // BF16 -> f32 widens exactly (the bits the host widened), and f32 -> BF16 gives them back.
  Tensor w = gpu_->alloc({n});
  gpu_->fill(w, NAN);
  gpu_->copy(w, b);
  const auto wide = gpu_->download(w);
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_TRUE(same_value(wide[i], got[i]))
        << "widened element " << i << ": " << hex_bits(wide[i]) << " vs " << hex_bits(got[i]);
  Tensor b2 = gpu_->alloc({n}, ElemType::BF16);
  gpu_->fill(b2, NAN);
  gpu_->copy(b2, w);
  const auto back = gpu_->download(b2);
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_TRUE(same_value(back[i], got[i]))
        << "round trip of element " << i << ": " << hex_bits(back[i]) << " vs " << hex_bits(got[i]);

  // BF16 -> BF16: a slice into a fresh tensor, and into a slice of a filled one (fill rounds: 1 + 2^-8 is a
  // tie between 1 and 1 + 2^-7, so 1), at odd element offsets: byte copies, not 4-byte words.
  Tensor part = gpu_->alloc({101}, ElemType::BF16);
  gpu_->copy(part, b.slice(5, 101));
  const auto pv = gpu_->download(part);
  for (int64_t i = 0; i < 101; ++i) ASSERT_TRUE(same_value(pv[i], got[5 + i])) << "slice element " << i;
  Tensor dst = gpu_->alloc({n}, ElemType::BF16);
  gpu_->fill(dst, 1.00390625f);
  Tensor window = dst.slice(7, 101);
  gpu_->copy(window, b.slice(5, 101));
  const auto dv = gpu_->download(dst);
  for (int64_t i = 0; i < n; ++i) {
    if (i >= 7 && i < 108) {
      ASSERT_TRUE(same_value(dv[i], got[i - 2])) << "copied element " << i;
    } else {
      ASSERT_EQ(dv[i], 1.0f) << "filled element " << i;
    }
  }
  gpu_->fill(dst, NAN);
  for (float x : gpu_->download(dst)) ASSERT_TRUE(std::isnan(x)) << "fill with NaN";
}

// BF16 caches (-ctk/-ctv) on every attention kernel against the CPU on f32 caches holding the same rounded
// values; the card rounds K and V itself (copy f32 -> bf16), so that rounding is checked too. The decode
// shapes of AttentionDecodeAndPrompt and the prompt shapes of FlashAttentionPrompt (GQA groups 1, 6, 8, 12,
// 16, d 32 to 256, dv < d, masks with query 0 seeing nothing, q0 > 0), each under three kernel choices:
// tensor cores on; off with the by-KV-head decode kernel; both off (the scalar kernel). The kernel that ran
// is named from the applies() rules (d 32 with a BF16 cache leaves the by-KV-head kernel for the scalar one).
// Bounds: the scalar and by-KV-head kernels do the f32 math of an f32 cache on exact inputs: 1e-5 of the
// largest output; the tensor-core kernel splits Q and P into hi + lo (K and V exact): 1e-4. The output is
// poisoned with NaN first, two runs agree bit for bit, and the scalar and tensor-core kernels give the values
// they give on an f32 cache of the rounded values (scalar: the same f32 operations; tensor cores: a BF16 K/V
// is the f32 path's hi operand with lo = 0, so the products it skips add exactly zero).
TEST_F(CudaOps, AttentionBf16KvMatchesCpu) {
  struct Case {
    int64_t T, S;
    bool mask;
    int64_t Hq = 24, Hkv = 2, d = 256, dv = 256;
  };
  const std::vector<Case> cases = {
      // decode and verify rows (AttentionDecodeAndPrompt), and a group of 6 at d 64
      Case{1, 300, false}, Case{1, 4100, false}, Case{70, 200, false}, Case{33, 160, true},
      Case{2, 3000, true}, Case{3, 40000, false}, Case{1, 2000, true, 16, 16, 128, 128},
      Case{4, 999, false, 32, 2, 128, 128}, Case{1, 130, false, 8, 1, 256, 128}, Case{1, 5, false},
      Case{1, 4097, true}, Case{5, 4101, true}, Case{9, 70, true, 8, 2, 64, 32},
      Case{1, 600, false, 4, 2, 32, 32}, Case{2, 9000, false, 16, 4, 128, 64},
      Case{2, 777, true, 12, 2, 64, 64},
      // prompts (FlashAttentionPrompt, S = q0 + T)
      Case{16, 16, false}, Case{300, 300, true}, Case{130, 907, true}, Case{64, 64, false, 16, 2, 256, 256},
      Case{200, 250, false, 8, 8, 128, 128}, Case{97, 97, true, 6, 2, 32, 32},
      Case{129, 160, false, 4, 2, 64, 64}, Case{40, 40, true, 12, 1, 128, 128}};
  const auto* p16 = reinterpret_cast<const float*>(16);  // an aligned pointer for the applies() rules
  for (const Case& cs : cases) {
    const int64_t T = cs.T, S = cs.S, Hq = cs.Hq, Hkv = cs.Hkv, d = cs.d, dv = cs.dv, q0 = S - T;
    const auto q = randn(T * Hq * d), k = randn(S * Hkv * d), v = randn(S * Hkv * dv);
    const auto kr = bf16_rounded(k), vr = bf16_rounded(v);
    std::vector<float> allowed(T * S, 1.0f);
    if (cs.mask) {
      for (auto& a : allowed) a = (rng_() % 3) ? 1.0f : 0.0f;
      for (int64_t j = 0; j < S; ++j) allowed[j] = 0.0f;  // query 0 sees nothing: zeros
    }
    // The CPU on f32 caches of the rounded values.
    Tensor qc = cpu_->upload(q, {T, Hq, d}), kc = cpu_->upload(kr, {S, Hkv, d}),
           vc = cpu_->upload(vr, {S, Hkv, dv});
    Tensor ac = cpu_->upload(allowed, {T, S}), oc = cpu_->alloc({T, Hq, dv});
    cpu_->attention(oc, qc, kc, vc, q0, 0.0625f, cs.mask ? &ac : nullptr);
    const auto c = cpu_->download(oc);
    // The card: BF16 caches rounded there from the f32 values, and f32 caches of the host-rounded values.
    Tensor qg = gpu_->upload(q, {T, Hq, d}), ag = gpu_->upload(allowed, {T, S});
    Tensor kf = gpu_->upload(k, {S, Hkv, d}), vf = gpu_->upload(v, {S, Hkv, dv});
    Tensor kb = gpu_->alloc({S, Hkv, d}, ElemType::BF16), vb = gpu_->alloc({S, Hkv, dv}, ElemType::BF16);
    gpu_->copy(kb, kf), gpu_->copy(vb, vf);
    Tensor krg = gpu_->upload(kr, {S, Hkv, d}), vrg = gpu_->upload(vr, {S, Hkv, dv});
    Tensor og = gpu_->alloc({T, Hq, dv});
    const auto run = [&](const Tensor& kk, const Tensor& vv) {
      gpu_->fill(og, NAN);
      gpu_->attention(og, qg, kk, vv, q0, 0.0625f, cs.mask ? &ag : nullptr);
      return gpu_->download(og);
    };
    for (int choice = 0; choice < 3; ++choice) {
      cuda::set_flash_attention(choice == 0);
      cuda::set_gqa_decode(choice < 2);
      // attention.cu's order; cuda_backend.cc hands out the split scratch the by-KV-head kernel needs below
      // 264 query rows × heads.
      const bool tc = cuda::flash_attention_applies(T, Hq, d, Hkv, dv, true, p16, p16, p16, p16);
      const bool gqa = !tc && T * Hq < 264 && cuda::gqa_decode_applies(Hq, d, Hkv, dv, true, p16, p16, p16);
      const char* kernel = tc ? "tensor cores" : gqa ? "by KV head" : "scalar";
      const std::string what = "T=" + std::to_string(T) + " S=" + std::to_string(S) +
                               " Hq=" + std::to_string(Hq) + " Hkv=" + std::to_string(Hkv) +
                               " d=" + std::to_string(d) + " dv=" + std::to_string(dv) +
                               (cs.mask ? " masked" : "") + ", " + kernel;
      const auto g = run(kb, vb);
      EXPECT_EQ(run(kb, vb), g) << "two runs differ, " << what;
      const double r = max_rel(g, c);
      EXPECT_LE(r, tc ? 1e-4 : 1e-5) << what;
      if (cs.mask) {
        for (int64_t e = 0; e < Hq * dv; ++e)
          ASSERT_EQ(g[e], 0.0f) << "fully masked query gives zeros, " << what;
      }
      const bool tc_f32 = tc && cuda::flash_attention_applies(T, Hq, d, Hkv, dv, false, p16, p16, p16, p16);
      if (choice == 2 || tc_f32) {
        EXPECT_EQ(run(krg, vrg), g) << "bf16 cache against an f32 cache of the same values, " << what;
      }
      std::printf("[attention bf16 kv] %s: max|gpu-cpu|/max|cpu| = %.2e\n", what.c_str(), r);
    }
  }
  cuda::set_flash_attention(true);
  cuda::set_gqa_decode(true);
}

// Prompt attention at qwen4_exp's shapes (24 query heads over 2 KV heads, d 256, a QSA-style mask), the
// tensor- core kernel against the scalar one: time per call and the rate of the causal work (4·T·S/2·Hq·d
// FLOP).
TEST_F(CudaOps, FlashAttentionTimings) {
  for (int64_t T : {1024, 4096}) {
    const int64_t Hq = 24, Hkv = 2, d = 256;
    Tensor q = gpu_->upload(randn(T * Hq * d), {T, Hq, d}), k = gpu_->upload(randn(T * Hkv * d), {T, Hkv, d});
    Tensor v = gpu_->upload(randn(T * Hkv * d), {T, Hkv, d}), o = gpu_->alloc({T, Hq, d});
    std::vector<float> allowed(T * T);
    for (auto& a : allowed) a = (rng_() % 4) ? 1.0f : 0.0f;
    Tensor m = gpu_->upload(allowed, {T, T});
    for (bool flash : {false, true}) {
      cuda::set_flash_attention(flash);
      const double ms = ms_per_call([&] { gpu_->attention(o, q, k, v, 0, 0.0625f, &m); }, flash ? 10 : 2);
      const double flop = 4.0 * T * (T / 2.0) * Hq * d;
      std::printf("[time] prompt attention T=%lld (24/2 heads, d 256, masked) %s: %.3f ms, %.1f TFLOP/s\n",
                  static_cast<long long>(T), flash ? "tensor cores" : "scalar", ms,
                  flop / (ms * 1e-3) / 1e12);
    }
    cuda::set_flash_attention(true);
  }
}

// Both router kernels (a warp per token for E <= 1024 and k <= 32, a block per token otherwise) against the
// CPU: expert counts that fill a warp's registers partly, wholly and not at all (E 96, 512, 1024, 1500), k up
// to the warp kernel's limit and past it, a token count that leaves the last block partly idle.
TEST_F(CudaOps, RouterSoftmaxTopK) {
  const int64_t T = 37;
  for (bool warp : {true, false}) {
    cuda::set_router_warp(warp);
    for (auto [E, k] : {std::pair<int64_t, int64_t>{512, 10}, {96, 8}, {1024, 32}, {1500, 40}, {512, 1}}) {
      for (bool renorm : {true, false}) {
        auto [lc, lg] = both(randn(T * E, 2.0f), {T, E});
        RouterSpec r{.top_k = static_cast<int>(k), .renormalize = renorm};
        Tensor ic = cpu_->alloc({T, k}, ElemType::I32), ig = gpu_->alloc({T, k}, ElemType::I32);
        Tensor wc = cpu_->alloc({T, k}), wg = gpu_->alloc({T, k});
        cpu_->route_softmax_topk(ic, wc, lc, r), gpu_->route_softmax_topk(ig, wg, lg, r);
        const std::string what = std::string(warp ? "warp" : "block") + " E " + std::to_string(E) + " k " +
                                 std::to_string(k) + (renorm ? " renormalized" : "");
        EXPECT_EQ(gpu_->download(ig), cpu_->download(ic)) << "expert ids, " << what;
        check(wg, wc, 1e-5, 1e-7, "router weights, " + what);
      }
    }
    // Ties go to the lower expert index, as the CPU's stable sort.
    const int64_t E = 512;
    std::vector<float> tied(E, 0.0f);
    tied[300] = tied[7] = tied[100] = 5.0f;
    auto [lc, lg] = both(tied, {1, E});
    Tensor ic = cpu_->alloc({1, 3}, ElemType::I32), ig = gpu_->alloc({1, 3}, ElemType::I32);
    Tensor wc = cpu_->alloc({1, 3}), wg = gpu_->alloc({1, 3});
    cpu_->route_softmax_topk(ic, wc, lc, {.top_k = 3}), gpu_->route_softmax_topk(ig, wg, lg, {.top_k = 3});
    EXPECT_EQ(gpu_->download(ig), (std::vector<float>{7, 100, 300})) << (warp ? "warp" : "block");
    EXPECT_EQ(gpu_->download(ig), cpu_->download(ic));
  }
  cuda::set_router_warp(true);
}

TEST_F(CudaOps, CausalConv1dWithState) {
  const int64_t C = 10240, K = 4;  // qwen3_next: 2·16·128 + 48·128 channels
  auto [wc, wg] = weights(randn(C * K, 0.5f), {C, 1, K});
  auto init = randn(C * (K - 1));
  auto [sc, sg] = both(init, {C, K - 1});
  for (int64_t T : {37, 1, 1, 5}) {  // prompt then decode steps: the state carries across calls
    auto [xc, xg] = both(randn(T * C), {T, C});
    Tensor oc = cpu_->alloc({T, C}), og = gpu_->alloc({T, C});
    cpu_->causal_conv1d(oc, xc, wc, sc, 1, Act::Silu), gpu_->causal_conv1d(og, xg, wg, sg, 1, Act::Silu);
    check(og, oc, 1e-5, 1e-6, "conv1d T=" + std::to_string(T));
    check(sg, sc, 0, 0, "conv1d state (copied inputs, exact)");
  }
  auto [wc2, wg2] = weights(randn(64 * 3), {64, 3});
  auto [sc2, sg2] = both(randn(64 * 4), {64, 4});  // dilation 2: (K−1)·2 = 4 past inputs
  auto [xc2, xg2] = both(randn(9 * 64), {9, 64});
  Tensor oc2 = cpu_->alloc({9, 64}), og2 = gpu_->alloc({9, 64});
  cpu_->causal_conv1d(oc2, xc2, wc2, sc2, 2, Act::None),
      gpu_->causal_conv1d(og2, xg2, wg2, sg2, 2, Act::None);
  check(og2, oc2, 1e-5, 1e-6, "conv1d dilation 2");
  check(sg2, sc2, 0, 0, "conv1d dilation 2 state");
}

TEST_F(CudaOps, GatedDeltaRule) {
  const int64_t Hk = 16, Hv = 48, dk = 128, dv = 128;
  auto [Ac, Ag] = weights(uniform(Hv, -1.0f, 1.0f), {Hv});
  auto [Dc, Dg] = weights(randn(Hv), {Hv});
  auto init = randn(Hv * dk * dv, 0.1f);
  for (int64_t T : {1, 100}) {
    for (bool chunked : {false, true}) {
      if (T == 1 && chunked) continue;
      auto [ac, ag] = both(randn(T * Hv), {T, Hv});
      auto [bc, bg] = both(randn(T * Hv), {T, Hv});
      Tensor gc = cpu_->alloc({T, Hv}), gg = gpu_->alloc({T, Hv}), btc = cpu_->alloc({T, Hv}),
             btg = gpu_->alloc({T, Hv});
      cpu_->gdn_gates(gc, btc, ac, bc, Ac, Dc), gpu_->gdn_gates(gg, btg, ag, bg, Ag, Dg);
      check(gg, gc, 1e-5, 1e-7, "gdn_gates g");
      check(btg, btc, 1e-5, 1e-7, "gdn_gates beta");
      // Both sides continue from the same gates (the CPU's) so the rule is compared on its own.
      Tensor g2 = gpu_->upload(cpu_->download(gc), {T, Hv}), b2 = gpu_->upload(cpu_->download(btc), {T, Hv});
      auto [qc, qg] = both(randn(T * Hk * dk), {T, Hk, dk});
      auto [kc, kg] = both(randn(T * Hk * dk), {T, Hk, dk});
      auto [vc, vg] = both(randn(T * Hv * dv), {T, Hv, dv});
      auto [sc, sg] = both(init, {Hv, dk, dv});
      Tensor oc = cpu_->alloc({T, Hv, dv}), og = gpu_->alloc({T, Hv, dv});
      cpu_->gated_delta_rule(oc, qc, kc, vc, gc, btc, sc, true, chunked);
      gpu_->gated_delta_rule(og, qg, kg, vg, g2, b2, sg, true, chunked);
      const double tol = chunked ? 2e-3 : 1e-4;
      const double ro = max_rel(gpu_->download(og), cpu_->download(oc));
      const double rs = max_rel(gpu_->download(sg), cpu_->download(sc));
      EXPECT_LE(ro, tol) << "gdn out T=" << T << " chunked=" << chunked;
      EXPECT_LE(rs, tol) << "gdn state T=" << T << " chunked=" << chunked;
      std::printf("[gdn] T=%lld cpu %s: out %.2e state %.2e\n", static_cast<long long>(T),
                  chunked ? "chunked" : "recurrent", ro, rs);
    }
  }
}

TEST_F(CudaOps, Sampling) {
  const int64_t V = 151936;
  auto logits = randn(4 * V, 3.0f);
  Tensor lg = gpu_->upload(logits, {4, V});
  std::vector<int32_t> argmax(4);
  for (int r = 0; r < 4; ++r)
    argmax[r] = static_cast<int32_t>(std::max_element(logits.begin() + r * V, logits.begin() + (r + 1) * V) -
                                     (logits.begin() + r * V));
  EXPECT_EQ(gpu_->sample(lg, {}), argmax) << "greedy";
  EXPECT_EQ(gpu_->sample(lg, {.temperature = 1.0f, .top_k = 1}), argmax) << "top_k 1";
  cuda::SampleParams p{.temperature = 0.8f, .top_k = 50, .top_p = 0.9f, .min_p = 0.02f, .seed = 42};
  const auto a = gpu_->sample(lg, p), b = gpu_->sample(lg, p);
  EXPECT_EQ(a, b) << "same seed and step, same tokens";
  for (int r = 0; r < 4; ++r) {  // the drawn token is among the row's 50 largest logits and passes min-p
    std::vector<float> row(logits.begin() + r * V, logits.begin() + (r + 1) * V);
    std::vector<float> sorted = row;
    std::nth_element(sorted.begin(), sorted.begin() + 49, sorted.end(), std::greater<float>());
    EXPECT_GE(row[a[r]], sorted[49]) << "row " << r;
    const float mx = *std::max_element(row.begin(), row.end());
    EXPECT_GE(std::exp(row[a[r]] - mx), 0.02f * 0.999f) << "min-p (temperature-1 probabilities) row " << r;
  }
  // Frequencies: 4000 rows of one 6-token distribution (rows draw independently) match softmax(l / 0.7).
  const std::vector<float> small = {1.0f, 0.5f, 0.0f, -0.5f, 2.0f, -3.0f};
  std::vector<float> rows;
  for (int i = 0; i < 4000; ++i) rows.insert(rows.end(), small.begin(), small.end());
  Tensor sg = gpu_->upload(rows, {4000, 6});
  const auto ids = gpu_->sample(sg, {.temperature = 0.7f, .seed = 7});
  std::vector<double> pr(6);
  double z = 0;
  for (int i = 0; i < 6; ++i) z += pr[i] = std::exp(small[i] / 0.7);
  std::vector<int> count(6);
  for (int32_t id : ids) {
    ASSERT_TRUE(id >= 0 && id < 6);
    ++count[id];
  }
  for (int i = 0; i < 6; ++i) {
    const double p_i = pr[i] / z, mean = 4000 * p_i, sd = std::sqrt(4000 * p_i * (1 - p_i));
    EXPECT_NEAR(count[i], mean, 5 * sd + 1) << "token " << i;
  }
  // top-p 0.5 on that distribution keeps only token 4 (p ≈ 0.55 at temperature 1).
  const auto nucleus = gpu_->sample(sg, {.temperature = 0.7f, .top_p = 0.5f, .seed = 9});
  EXPECT_TRUE(std::all_of(nucleus.begin(), nucleus.end(), [](int32_t id) { return id == 4; }));
  // llama-server's order (the CPU sampler's): the cuts see the temperature-1 distribution, the temperature
  // only reweighs the survivors. At temperature 1: p4 ≈ 0.551, p0 ≈ 0.203, p1 ≈ 0.123, so top-p 0.7 and
  // min-p 0.3 (p0 / p4 ≈ 0.37, p1 / p4 ≈ 0.22) each keep {4, 0}. Cutting after a temperature of 0.3 would
  // keep {4} only (p4 ≈ 0.96, p0 / p4 ≈ 0.036).
  for (const cuda::SampleParams& cut : {cuda::SampleParams{.temperature = 0.3f, .top_p = 0.7f, .seed = 11},
                                        cuda::SampleParams{.temperature = 0.3f, .min_p = 0.3f, .seed = 12}}) {
    const auto got = gpu_->sample(sg, cut);
    const double w4 = std::exp(small[4] / 0.3), w0 = std::exp(small[0] / 0.3), p0 = w0 / (w4 + w0);
    int zeros = 0;
    for (int32_t id : got) {
      ASSERT_TRUE(id == 4 || id == 0) << "token " << id << " survived the cuts";
      zeros += id == 0;
    }
    const double mean = 4000 * p0, sd = std::sqrt(4000 * p0 * (1 - p0));
    EXPECT_NEAR(zeros, mean, 5 * sd + 1) << "token 0 reweighed by the temperature after the cut (top_p "
                                         << cut.top_p << ", min_p " << cut.min_p << ")";
  }
}

// The serving path's draws (Backend::draw_last_rows: one launch per row with each sequence's cuts, seed and
// step, one copy back) are the sampler's own draws of each row alone, so they follow the same tested cuts and
// depend only on (seed, step): the same again for the same pair, another draw for another step.
TEST_F(CudaOps, DrawLastRowsAreTheSamplersDrawsRowByRow) {
  const int64_t V = 151936;
  auto logits = randn(3 * V, 3.0f);
  Tensor lg = gpu_->upload(logits, {3, V});
  // Each sequence's logits as a step leaves them: the last row of its own tensor.
  std::vector<Tensor> seqs = {lg.slice(0, 1), lg.slice(0, 2), lg.slice(0, 3)};
  const std::vector<Backend::RowDraw> draws = {
      {0.8f, 40, 0.95f, 0.05f, 1234, 7}, {1.0f, 0, 1.0f, 0.0f, 99, 1}, {0.3f, 5, 0.5f, 0.1f, 5, 123}};
  ASSERT_TRUE(gpu_->draws_rows());
  const std::vector<int32_t> got = gpu_->draw_last_rows(seqs, draws);
  ASSERT_EQ(got.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    const Backend::RowDraw& d = draws[r];
    const cuda::SampleParams p{d.temperature, d.top_k, d.top_p, d.min_p, d.seed, d.step};
    EXPECT_EQ(got[r], gpu_->sample(lg.slice(r, 1), p)[0]) << "row " << r;
  }
  EXPECT_EQ(gpu_->draw_last_rows(seqs, draws), got) << "same seeds and steps, same ids";
  // Another step draws again: over 64 steps of the flat-cut row 1 (temperature 1, no cuts) the ids vary.
  std::set<int32_t> seen;
  for (uint64_t step = 0; step < 64; ++step) {
    Backend::RowDraw d = draws[1];
    d.step = step;
    seen.insert(gpu_->draw_last_rows(std::span(&seqs[1], 1), std::span(&d, 1))[0]);
  }
  EXPECT_GT(seen.size(), 8u);
}

// Timings of the decode-path small ops at real shapes (not pass/fail; for the report and later tuning).
TEST_F(CudaOps, Timings) {
  auto time_us = [&](auto&& fn) {
    return 1e3 * ms_per_call(fn, 10);  // per call, microseconds
  };
  for (int64_t S : {4096, 32768}) {
    Tensor q = gpu_->upload(randn(24 * 256), {1, 24, 256}), k = gpu_->upload(randn(S * 2 * 256), {S, 2, 256});
    Tensor v = gpu_->upload(randn(S * 2 * 256), {S, 2, 256}), o = gpu_->alloc({1, 24, 256});
    const double us = time_us([&] { gpu_->attention(o, q, k, v, S - 1, 0.0625f); });
    std::printf("[time] attention decode S=%lld: %.1f us (%.0f GB/s of KV)\n", static_cast<long long>(S), us,
                2.0 * S * 2 * 256 * 4 / (us * 1e-6) / 1e9);
  }
  for (int64_t T : {1, 1024}) {
    Tensor q = gpu_->upload(randn(T * 16 * 128), {T, 16, 128}),
           k = gpu_->upload(randn(T * 16 * 128), {T, 16, 128});
    Tensor v = gpu_->upload(randn(T * 48 * 128), {T, 48, 128}),
           g = gpu_->upload(uniform(T * 48, -0.1f, 0.0f), {T, 48});
    Tensor b = gpu_->upload(uniform(T * 48, 0.0f, 1.0f), {T, 48}), st = gpu_->alloc({48, 128, 128});
    Tensor o = gpu_->alloc({T, 48, 128});
    const double us = time_us([&] { gpu_->gated_delta_rule(o, q, k, v, g, b, st, true, T > 1); });
    std::printf("[time] gated_delta_rule T=%lld (48 heads, 128x128 state): %.1f us\n",
                static_cast<long long>(T), us);
  }
  Tensor x = gpu_->upload(randn(2560), {1, 2560}), y = gpu_->alloc({1, 2560});
  Weight w = gpu_->upload_weight("n", randn(2560), {2560});
  std::printf("[time] rms_norm [1, 2560]: %.1f us\n",
              time_us([&] { gpu_->rms_norm(y, x, &w, 1e-6f, NormKind::OnePlus); }));
  Tensor lg = gpu_->upload(randn(512), {1, 512}), ids = gpu_->alloc({1, 10}, ElemType::I32),
         wt = gpu_->alloc({1, 10});
  std::printf("[time] route_softmax_topk [1, 512] k=10: %.1f us\n",
              time_us([&] { gpu_->route_softmax_topk(ids, wt, lg, {.top_k = 10}); }));
  Tensor logits = gpu_->upload(randn(151936, 3.0f), {1, 151936});
  std::printf("[time] sample V=151936 top-k/top-p/min-p (with the id copy back): %.1f us\n", time_us([&] {
                gpu_->sample(logits,
                             {.temperature = 0.8f, .top_k = 50, .top_p = 0.9f, .min_p = 0.02f, .seed = 1});
              }));
}

TEST_F(CudaOps, FamilyOpsRefuseByName) {
  Tensor t = gpu_->alloc({1, 4});
  try {
    gpu_->stream_mean(t, t, 2);
    FAIL() << "expected E_BACKEND_UNSUPPORTED";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stream_mean"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace bloomery::gputest

namespace bloomery::gputest {
namespace {

// alloc's zero fill is deferred on the card (tensor.h): whatever the pool hands back, a tensor reads as
// zeros unless an op wrote all of it, an in-place op on a fresh tensor reads zeros, and a partial write
// leaves the rest zero. Each case first dirties the pool's blocks of that size.
TEST_F(CudaOps, LazyZeroFill) {
  const int64_t N = 4096;
  auto dirty = [&] {
    Tensor t = gpu_->alloc({4, N});
    gpu_->fill(t, 7.0f);
    gpu_->download(t);  // returned to the pool full of 7s
  };
  auto all_zero = [&](const Tensor& t, const std::string& what) {
    const std::vector<float> v = gpu_->download(t);
    EXPECT_EQ(std::count(v.begin(), v.end(), 0.0f), static_cast<long>(v.size())) << what;
  };
  dirty();
  all_zero(gpu_->alloc({4, N}), "a fresh tensor");
  const std::vector<float> xv = randn(4 * N);
  Tensor x = gpu_->upload(xv, {4, N});
  dirty();
  Tensor acc = gpu_->alloc({4, N});
  gpu_->add(acc, acc, x);  // acc = 0 + x
  expect_close(gpu_->download(acc), xv, 0, 0, "in-place add on a fresh tensor");
  dirty();
  Tensor part = gpu_->alloc({4, N});
  Tensor rows = part.slice(1, 2);
  gpu_->scale(rows, x.slice(1, 2), 1.0f);  // rows 1 and 2 written, 0 and 3 must stay zero
  const std::vector<float> pv = gpu_->download(part);
  for (int64_t i = 0; i < N; ++i) {
    ASSERT_EQ(pv[i], 0.0f) << "row 0 at " << i;
    ASSERT_EQ(pv[3 * N + i], 0.0f) << "row 3 at " << i;
    ASSERT_EQ(pv[N + i], xv[N + i]) << "row 1 at " << i;
  }
}

}  // namespace
}  // namespace bloomery::gputest
