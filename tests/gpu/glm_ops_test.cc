// CUDA vs CPU backend on the glm5_next family ops (models.md §4.5-§4.8) at the shipped shapes (D 4096, n 4;
// KDA 64 × 128; indexer 32 × 128, pool 4, topk 2048; MLA 64 heads, latent 512, dqk = dv = 256; router 288
// experts, top 8) and at the fixture shapes, random data; stored-format weights (NVFP4, BF16) where the op
// reads a matrix (mHC fn, MLA kv_b).
//
// Bounds:
//  * mHC: the mix is a 16384-term f64 dot (as the CPU's) in another order, through sigmoid / softmax / 20
//    Sinkhorn rounds with the device's expf:
//    post, comb, h within 2e-4·|c| + 2e-5; mhc_post and stream_mean sum ≤ 4 products: 1e-5·|c| + 1e-6;
//  * kda_gate: device expf / logf (≤ 2 ulp), then log(1 + e^x) loses the ulps of 1 for small e^x, times
//    exp(A_log) ≤ 15: 4e-5·|c| + 4e-6;
//  * kda_rule: a recurrence over T tokens; max |g − c| ≤ 2e-4 · max |c| (also for the chunked CPU form, which
//    the card runs as the same recurrence), and the state likewise;
//  * dsa_index_append: pools through device expf: 1e-5·|c| + 1e-6; the raw keys exactly;
//  * dsa_index_select: scores in the CPU op's order without FMA, so from the same pools the masks must be
//    identical, including exact ties (lower pool wins) and the tie count;
//  * mla_attention: a 256-term and a 512-term projection around an online softmax: max |g − c| ≤ 1e-3 · max
//    |c|;
//  * route_sigmoid_topk: ids identical (the data keep the top-9 choices apart, and a crafted row ties),
//    weights 1e-5·|c| + 1e-6, tie counts equal.
#include <algorithm>

#include "backend_util.h"

namespace bloomery::gputest {
namespace {

class GlmOps : public BackendPair {
 protected:
  std::pair<Tensor, Tensor> both(const std::vector<float>& v, std::vector<int64_t> shape) {
    return {cpu_->upload(v, shape), gpu_->upload(v, shape)};
  }
  std::pair<Weight, Weight> weights(const std::vector<float>& v, std::vector<int64_t> shape) {
    return {cpu_->upload_weight("w", v, shape), gpu_->upload_weight("w", v, shape)};
  }
  // A stored-format weight: bytes on the card, the CPU decoder's values on the CPU.
  std::pair<Weight, Weight> stored(FormatId f, uint64_t n, uint64_t k) {
    held_.push_back(make_stored(f, n, k, rng_));
    const StoredWeight& s = *held_.back();
    const std::vector<int64_t> shape{static_cast<int64_t>(n), static_cast<int64_t>(k)};
    return {cpu_->upload_weight("stored", s.decoded, shape), gpu_->upload_stored("stored", shape, s.wb)};
  }
  void check(const Tensor& g, const Tensor& c, double rel, double abs, const std::string& what) {
    expect_close(gpu_->download(g), cpu_->download(c), rel, abs, what);
  }
  std::vector<std::unique_ptr<StoredWeight>> held_;
};

TEST_F(GlmOps, MhcPrePostAndStreamMean) {
  struct Case {
    int64_t D, T;
    FormatId f;
  };
  for (const Case& c :
       {Case{4096, 1, FormatId::BF16}, Case{4096, 5, FormatId::NVFP4}, Case{64, 9, FormatId::F32}}) {
    const int n = 4;
    const int64_t T = c.T, D = c.D, M = (2 + n) * n;
    const std::string at = " D " + std::to_string(D) + " T " + std::to_string(T);
    auto [xc, xg] = both(randn(T * n * D), {T, n * D});
    std::pair<Weight, Weight> fn =
        c.f == FormatId::F32 ? weights(randn(M * n * D, 0.02f), {M, n * D}) : stored(c.f, M, n * D);
    auto [bc, bg] = weights(randn(M, 0.5f), {M});
    auto [sc, sg] = weights(uniform(3, 0.5f, 1.5f), {3});
    MhcSpec spec;
    Tensor hc = cpu_->alloc({T, D}), hg = gpu_->alloc({T, D});
    Tensor pc = cpu_->alloc({T, n}), pg = gpu_->alloc({T, n});
    Tensor cc = cpu_->alloc({T, n, n}), cg = gpu_->alloc({T, n, n});
    cpu_->mhc_pre(hc, pc, cc, xc, fn.first, bc, sc, spec);
    gpu_->mhc_pre(hg, pg, cg, xg, fn.second, bg, sg, spec);
    check(pg, pc, 2e-4, 2e-5, "mhc_pre post" + at);
    check(cg, cc, 2e-4, 2e-5, "mhc_pre comb" + at);
    check(hg, hc, 2e-4, 2e-5, "mhc_pre h" + at);
    // post from the CPU's own gates on both sides, so mhc_post is checked alone
    auto [yc, yg] = both(randn(T * D), {T, D});
    const auto post = cpu_->download(pc), comb = cpu_->download(cc);
    Tensor pg2 = gpu_->upload(post, {T, n}), cg2 = gpu_->upload(comb, {T, n, n});
    cpu_->mhc_post(xc, yc, pc, cc);
    gpu_->mhc_post(xg, yg, pg2, cg2);
    check(xg, xc, 1e-5, 1e-6, "mhc_post" + at);
    Tensor mc = cpu_->alloc({T, D}), mg = gpu_->alloc({T, D});
    cpu_->stream_mean(mc, xc, n);
    gpu_->stream_mean(mg, xg, n);
    check(mg, mc, 1e-5, 1e-6, "stream_mean" + at);
  }
  Tensor bad = gpu_->alloc({2, 100}), y = gpu_->alloc({2, 64}), p = gpu_->alloc({2, 4}),
         c = gpu_->alloc({2, 4, 4});
  EXPECT_THROW(gpu_->mhc_post(bad, y, p, c), Error);
}

TEST_F(GlmOps, KdaGate) {
  for (bool lower : {true, false}) {
    const int64_t T = 7, H = 64, dk = 128;
    auto [fc, fg] = both(randn(T * H * dk, 2.0f), {T, H * dk});
    auto [dc, dg] = weights(uniform(H * dk, 0.5f, 1.5f), {H * dk});
    auto [ac, ag] = weights(uniform(H, 0.0f, 2.7f), {H});
    Tensor gc = cpu_->alloc({T, H, dk}), gg = gpu_->alloc({T, H, dk});
    cpu_->kda_gate(gc, fc, dc, ac, lower, -5.0f);
    gpu_->kda_gate(gg, fg, dg, ag, lower, -5.0f);
    check(gg, gc, 4e-5, 4e-6, lower ? "kda_gate lower bound" : "kda_gate softplus");
  }
}

TEST_F(GlmOps, KdaRuleStepAndChunked) {
  struct Case {
    int64_t T, H, dk;
    bool chunked;
  };
  for (const Case& c : {Case{1, 64, 128, false}, Case{3, 64, 128, false}, Case{130, 8, 128, true},
                        Case{70, 4, 16, true}, Case{9, 4, 16, false}}) {
    const int64_t T = c.T, H = c.H, dk = c.dk, dv = dk;
    const std::string at = " T " + std::to_string(T) + " H " + std::to_string(H) + " dk " +
                           std::to_string(dk) + (c.chunked ? " chunked" : " step");
    auto [qc, qg] = both(randn(T * H * dk), {T, H, dk});
    auto [kc, kg] = both(randn(T * H * dk), {T, H, dk});
    auto [vc, vg] = both(randn(T * H * dv), {T, H, dv});
    auto [gc, gg] = both(uniform(T * H * dk, -0.5f, -0.001f), {T, H, dk});
    auto [bc, bg] = both(uniform(T * H, 0.05f, 0.95f), {T, H});
    auto [sc, sg] = both(randn(H * dk * dv, 0.1f), {H, dk, dv});
    Tensor oc = cpu_->alloc({T, H, dv}), og = gpu_->alloc({T, H, dv});
    cpu_->kda_rule(oc, qc, kc, vc, gc, bc, sc, c.chunked);
    gpu_->kda_rule(og, qg, kg, vg, gg, bg, sg, c.chunked);
    EXPECT_LE(max_rel(gpu_->download(og), cpu_->download(oc)), 2e-4) << "kda_rule out" + at;
    EXPECT_LE(max_rel(gpu_->download(sg), cpu_->download(sc)), 2e-4) << "kda_rule state" + at;
  }
}

TEST_F(GlmOps, DsaAppendPoolsMatchCpu) {
  for (int64_t d : {int64_t{128}, int64_t{16}}) {
    const int64_t P = 4, cap = 600;
    Tensor kc = cpu_->alloc({cap, d}), kg = gpu_->alloc({cap, d});
    Tensor gc = cpu_->alloc({cap, d}), gg = gpu_->alloc({cap, d});
    Tensor pc = cpu_->alloc({cap / P + 1, d}), pg = gpu_->alloc({cap / P + 1, d});
    cpu_->fill(pc, 0.0f);
    gpu_->fill(pg, 0.0f);
    auto [ac, ag] = weights(randn(P * d), {P, d});
    int64_t pos = 0;
    for (int64_t T : {int64_t{1}, int64_t{1}, int64_t{1}, int64_t{1}, int64_t{1}, int64_t{301}, int64_t{6},
                      int64_t{1}, int64_t{1}, int64_t{3}, int64_t{280}}) {
      auto [xc, xg] = both(randn(T * d), {T, d});
      auto [sc, sg] = both(randn(T * d, 2.0f), {T, d});
      cpu_->dsa_index_append(kc, gc, pc, xc, sc, pos, ac);
      gpu_->dsa_index_append(kg, gg, pg, xg, sg, pos, ag);
      pos += T;
    }
    EXPECT_EQ(gpu_->download(kg), cpu_->download(kc)) << "raw keys d " << d;
    EXPECT_EQ(gpu_->download(gg), cpu_->download(gc)) << "raw gates d " << d;
    check(pg, pc, 1e-5, 1e-6, "pools d " + std::to_string(d));
  }
}

TEST_F(GlmOps, DsaSelectMatchesCpuIncludingTies) {
  struct Case {
    int Hi, d, topk;
  };
  for (const Case& c : {Case{32, 128, 2048}, Case{16, 16, 8}}) {
    const int P = 4;
    const int64_t S = 5000, np = S / P + 1;
    // decode at several depths, a prompt chunk, pools with exact ties (a few distinct vectors and zeros)
    for (int variant = 0; variant < 2; ++variant) {
      std::vector<float> pools = randn(np * c.d);
      if (variant == 1) {
        const auto few = randn(3 * c.d);
        std::uniform_int_distribution<int> pick(0, 3);
        for (int64_t p = 0; p < np; ++p) {
          const int k = pick(rng_);
          for (int j = 0; j < c.d; ++j) pools[p * c.d + j] = k < 3 ? few[k * c.d + j] : 0.0f;
        }
      }
      auto [pc, pg] = both(pools, {np, c.d});
      int64_t ties = 0;
      for (auto [q0, T] : {std::pair<int64_t, int64_t>{0, 1}, {6, 1}, {2051, 1}, {4999, 1}, {2100, 700}}) {
        const int64_t Sq = q0 + T;
        auto [qc, qg] = both(randn(T * c.Hi * c.d), {T, c.Hi, c.d});
        auto [wc, wg] = both(randn(T * c.Hi, 0.3f), {T, c.Hi});
        Tensor ac = cpu_->alloc({T, Sq}), ag = gpu_->alloc({T, Sq});
        gpu_->fill(ag, 7.0f);  // every entry must be written
        const int64_t tc = cpu_->dsa_index_select(ac, qc, wc, pc, q0, P, c.topk);
        const int64_t tg = gpu_->dsa_index_select(ag, qg, wg, pg, q0, P, c.topk);
        EXPECT_EQ(tg, tc) << "tie count d " << c.d << " q0 " << q0 << " T " << T;
        EXPECT_EQ(gpu_->download(ag), cpu_->download(ac)) << "mask d " << c.d << " q0 " << q0 << " T " << T;
        ties += tc;
      }
      if (variant == 1) {
        EXPECT_GT(ties, 0) << "the crafted pools must tie at the cut";
      }
    }
  }
}

TEST_F(GlmOps, MlaAttentionMatchesCpu) {
  struct Case {
    int64_t H, dq, L, q0, T;
    FormatId f;
  };
  for (const Case& c : {Case{64, 256, 512, 3000, 1, FormatId::NVFP4},
                        Case{64, 256, 512, 0, 37, FormatId::BF16}, Case{4, 16, 32, 20, 11, FormatId::F32}}) {
    const int64_t H = c.H, dq = c.dq, dv = c.dq, L = c.L, T = c.T, S = c.q0 + T;
    const std::string at = " H " + std::to_string(H) + " L " + std::to_string(L) + " q0 " +
                           std::to_string(c.q0) + " T " + std::to_string(T);
    auto [qc, qg] = both(randn(T * H * dq), {T, H, dq});
    auto [lc, lg] = both(randn(S * L), {S, L});
    std::pair<Weight, Weight> kv = c.f == FormatId::F32
                                       ? weights(randn(H * (dq + dv) * L, 0.05f), {H * (dq + dv), L})
                                       : stored(c.f, H * (dq + dv), L);
    // a sparse causal mask with one query that sees nothing
    std::vector<float> allowed(T * S, 0.0f);
    std::bernoulli_distribution keep(0.3);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j <= c.q0 + t; ++j) allowed[t * S + j] = (t != 1 && keep(rng_)) ? 1.0f : 0.0f;
    auto [ac, ag] = both(allowed, {T, S});
    Tensor oc = cpu_->alloc({T, H, dv}), og = gpu_->alloc({T, H, dv});
    const float scale = 1.0f / std::sqrt(static_cast<float>(dq));
    cpu_->mla_attention(oc, qc, lc, kv.first, c.q0, scale, ac);
    gpu_->mla_attention(og, qg, lg, kv.second, c.q0, scale, ag);
    EXPECT_LE(max_rel(gpu_->download(og), cpu_->download(oc)), 1e-3) << "mla_attention" + at;
    // The latent cache in BF16 (-ctk bf16) on both engines: each rounds at the copy and widens at the read.
    Tensor lcb = cpu_->alloc({S, L}, ElemType::BF16), lgb = gpu_->alloc({S, L}, ElemType::BF16);
    cpu_->copy(lcb, lc);
    gpu_->copy(lgb, lg);
    ASSERT_EQ(gpu_->download(lgb), cpu_->download(lcb)) << "the rounded latent" + at;
    gpu_->fill(og, NAN);
    cpu_->mla_attention(oc, qc, lcb, kv.first, c.q0, scale, ac);
    gpu_->mla_attention(og, qg, lgb, kv.second, c.q0, scale, ag);
    EXPECT_LE(max_rel(gpu_->download(og), cpu_->download(oc)), 1e-3) << "mla_attention, bf16 latent" + at;
  }
}

TEST_F(GlmOps, SigmoidRouterMatchesCpu) {
  struct Case {
    int64_t T, E;
    int k, groups, topk_group;
  };
  for (const Case& c :
       {Case{1, 288, 8, 1, 1}, Case{33, 288, 8, 1, 1}, Case{20, 64, 6, 8, 3}, Case{5, 16, 2, 1, 1}}) {
    const std::string at =
        " T " + std::to_string(c.T) + " E " + std::to_string(c.E) + " groups " + std::to_string(c.groups);
    std::vector<float> logits = randn(c.T * c.E, 2.0f);
    // row 0: every logit equal, so the choice ties everywhere (the lowest expert indices win)
    std::fill(logits.begin(), logits.begin() + c.E, 0.25f);
    auto [lc, lg] = both(logits, {c.T, c.E});
    auto [bc, bg] = weights(randn(c.E, 0.05f), {c.E});
    SigmoidRouterSpec spec;
    spec.top_k = c.k, spec.n_group = c.groups, spec.topk_group = c.topk_group, spec.routed_scaling = 2.5f;
    for (bool with_bias : {false, true}) {
      Tensor ic = cpu_->alloc({c.T, c.k}, ElemType::I32), ig = gpu_->alloc({c.T, c.k}, ElemType::I32);
      Tensor wc = cpu_->alloc({c.T, c.k}), wg = gpu_->alloc({c.T, c.k});
      const int64_t tc = cpu_->route_sigmoid_topk(ic, wc, lc, with_bias ? &bc : nullptr, spec);
      const int64_t tg = gpu_->route_sigmoid_topk(ig, wg, lg, with_bias ? &bg : nullptr, spec);
      EXPECT_EQ(tg, tc) << "router ties" + at;
      if (!with_bias) {
        EXPECT_GE(tc, 1) << "the crafted row must tie" + at;
      }
      std::vector<int32_t> idc(c.T * c.k), idg(c.T * c.k);
      cudaMemcpy(idg.data(), ig.i32(), idg.size() * 4, cudaMemcpyDeviceToHost);
      std::copy(ic.i32(), ic.i32() + idc.size(), idc.begin());
      EXPECT_EQ(idg, idc) << "router ids" + at;
      check(wg, wc, 1e-5, 1e-6, "router weights" + at);
    }
  }
}

}  // namespace
}  // namespace bloomery::gputest
