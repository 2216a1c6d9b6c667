// CUDA vs CPU backend on the qwen4_exp family ops (models.md §3.5, §3.6, §3.8) at the real shapes (D 2560,
// n 4; indexer Hi 4 × dI 128, compress 4, block_topk 512, rot 64) and at the fixture shapes (D 64; indexer
// 8 × 16, block_topk 2, rot 8), random data.
//
// Bounds:
//  * hc_inject rounds the product and the sum as the CPU op does: |g − c| ≤ 1e-6·|c| + 1e-7 (exact expected);
//  * hc_read_mix: σ via the device's expf (≤ 2 ulp) on 4 terms of |x| ≲ 4 that may cancel: 1e-5·|c| + 4e-6;
//  * ple_gate: a 2560-term dot in another order, through sqrt(|g|) (which amplifies rounding near g = 0):
//    1e-4·|c| + 1e-6;
//  * QSA indexer: block keys and scores are computed in the CPU op's order without FMA, so the pooled blocks
//    must be bit-identical and every selection mask identical, including exact ties at the cut (the lower
//    block index wins) and the tie count.
#include <algorithm>
#include <chrono>

#include "backend_util.h"

namespace bloomery::gputest {
namespace {

struct QsaShape {
  int Hi, d, compress, block_topk, rot;
  double theta;
};
constexpr QsaShape kReal{4, 128, 4, 512, 64, 1e7};
constexpr QsaShape kFixture{8, 16, 4, 2, 8, 1e7};
// Off-size shapes for the few-query score path: d odd (its unvectorised copy), d above its 128 threads and
// not dividing them, Hi not a multiple of its 4 head slots, compress 3.
constexpr QsaShape kOddSmall{3, 37, 3, 5, 8, 1e4}, kOddWide{5, 200, 4, 7, 8, 1e4};

class Qwen4Ops : public BackendPair {
 protected:
  std::pair<Tensor, Tensor> both(const std::vector<float>& v, std::vector<int64_t> shape) {
    return {cpu_->upload(v, shape), gpu_->upload(v, shape)};
  }
  void check(const Tensor& g, const Tensor& c, double rel, double abs, const std::string& what) {
    expect_close(gpu_->download(g), cpu_->download(c), rel, abs, what);
  }
  static QsaIndexSpec spec_of(const QsaShape& s, int64_t pos_offset = 0) {
    QsaIndexSpec q;
    q.compress = s.compress;
    q.block_topk = s.block_topk;
    q.rot_dim = s.rot;
    q.theta = s.theta;
    q.eps = 1e-6f;
    q.pos_offset = pos_offset;
    return q;
  }

  // Runs qsa_index_select on both backends with the same qi and blocks; masks must be identical.
  // Returns the tie count (equal on both).
  int64_t select_both(const QsaShape& s, const std::vector<float>& qi, int64_t T,
                      const std::vector<float>& blk, int64_t q0, const std::string& what,
                      int block_topk = -1) {
    QsaIndexSpec sp = spec_of(s);
    if (block_topk >= 0) sp.block_topk = block_topk;
    const int64_t S = q0 + T, nrows = blk.size() / s.d;
    auto [qc, qg] = both(qi, {T, s.Hi, s.d});
    auto [bc, bg] = both(blk, {nrows, s.d});
    Tensor ac = cpu_->alloc({T, S}), ag = gpu_->alloc({T, S});
    gpu_->fill(ag, 7.0f);  // every entry must be written
    const int64_t tc = cpu_->qsa_index_select(ac, qc, bc, q0, sp);
    const int64_t tg = gpu_->qsa_index_select(ag, qg, bg, q0, sp);
    const auto mc = cpu_->download(ac), mg = gpu_->download(ag);
    int64_t diff = 0, first = -1;
    for (size_t i = 0; i < mc.size(); ++i)
      if (mc[i] != mg[i]) {
        if (first < 0) first = static_cast<int64_t>(i);
        ++diff;
      }
    EXPECT_EQ(diff, 0) << what << " q0 " << q0 << " T " << T << ": first differing entry (query, token) ("
                       << (first >= 0 ? first / S : -1) << ", " << (first >= 0 ? first % S : -1) << ")";
    EXPECT_EQ(tg, tc) << what << " q0 " << q0 << " T " << T << ": tie count";
    return tc;
  }
  std::vector<float> blocks_for(const QsaShape& s, int64_t S) {
    return randn(static_cast<size_t>(S / s.compress + 1) * s.d);
  }
};

TEST_F(Qwen4Ops, HyperConnectionReadAndWrite) {
  for (int64_t D : {int64_t{2560}, int64_t{64}})
    for (int64_t T : {int64_t{1}, int64_t{7}}) {
      const int n = 4;
      const std::string at = " D " + std::to_string(D) + " T " + std::to_string(T);
      auto [mc, mg] = both(randn(T * n * D, 2.0f), {T, n * D});
      auto [xc, xg] = both(randn(T * n * D), {T, n * D});
      Tensor uc = cpu_->alloc({T, D}), ug = gpu_->alloc({T, D});
      cpu_->hc_read_mix(uc, mc, xc, n);
      gpu_->hc_read_mix(ug, mg, xg, n);
      check(ug, uc, 1e-5, 4e-6, "hc_read_mix" + at);
      auto [yc, yg] = both(randn(T * D), {T, D});
      auto [ic, ig] = both(uniform(T * n, 0.0f, 2.0f), {T, n});
      cpu_->hc_inject(xc, yc, ic);
      gpu_->hc_inject(xg, yg, ig);
      check(xg, xc, 1e-6, 1e-7, "hc_inject" + at);
    }
  Tensor bad = gpu_->alloc({2, 100}), y = gpu_->alloc({2, 64}), inj = gpu_->alloc({2, 4});
  EXPECT_THROW(gpu_->hc_inject(bad, y, inj), Error);
}

TEST_F(Qwen4Ops, PleGate) {
  for (int64_t D : {int64_t{2560}, int64_t{64}})
    for (int64_t T : {int64_t{1}, int64_t{5}}) {
      const int64_t n = 4;
      auto [kc, kg] = both(randn(T * n * D), {T, n * D});
      auto [qc, qg] = both(randn(T * n * D), {T, n * D});
      auto [vc, vg] = both(randn(T * D), {T, D});
      Tensor gc = cpu_->alloc({T, n * D}), gg = gpu_->alloc({T, n * D});
      cpu_->ple_gate(gc, kc, qc, vc);
      gpu_->ple_gate(gg, kg, qg, vg);
      check(gg, gc, 1e-4, 1e-6, "ple_gate D " + std::to_string(D) + " T " + std::to_string(T));
    }
}

// Appends keys in pieces of every kind (single tokens before and after a block completes, unaligned prompt
// chunks, a long chunk), then compares the raw caches and the pooled blocks bit for bit, and selections
// made from each backend's own blocks.
TEST_F(Qwen4Ops, QsaAppendPoolsBitIdenticalBlocks) {
  for (const QsaShape& s : {kReal, kFixture})
    for (int64_t off : {int64_t{0}, int64_t{1}}) {
      const int64_t cap = 5008, d = s.d;
      const QsaIndexSpec sp = spec_of(s, off);
      Tensor rc = cpu_->alloc({cap, d}), rg = gpu_->alloc({cap, d});
      Tensor bc = cpu_->alloc({cap / s.compress + 1, d}), bg = gpu_->alloc({cap / s.compress + 1, d});
      const auto kn = randn(d, 0.3f);  // the same k_norm on both sides
      Weight wc = cpu_->upload_weight("k_norm", kn, {d}), wg = gpu_->upload_weight("k_norm", kn, {d});
      const std::vector<int64_t> pieces = {1, 1, 1, 1, 1, 1001, 6, 1, 1, 1, 1, 1, 3, 3980};
      int64_t pos = 0;
      for (int64_t T : pieces) {
        auto [kc, kg] = both(randn(T * d, 1.5f), {T, d});
        cpu_->qsa_index_append(rc, bc, kc, pos, wc, sp);
        gpu_->qsa_index_append(rg, bg, kg, pos, wg, sp);
        pos += T;
      }
      ASSERT_EQ(pos, 5000);
      const auto raw_c = cpu_->download(rc), raw_g = gpu_->download(rg);
      EXPECT_EQ(raw_c, raw_g) << "raw keys";
      const auto bl_c = cpu_->download(bc), bl_g = gpu_->download(bg);
      int64_t differ = 0;
      double worst = 0;
      for (size_t i = 0; i < bl_c.size(); ++i)
        if (bl_c[i] != bl_g[i]) {
          ++differ;
          worst = std::max(worst, std::fabs(static_cast<double>(bl_c[i]) - bl_g[i]));
        }
      EXPECT_EQ(differ, 0) << "pooled block elements differing (d " << d << ", pos_offset " << off
                           << "), max |diff| " << worst;
      // Selections from each backend's own blocks (decode at several depths, one prompt chunk).
      for (int64_t q0 : {int64_t{0}, int64_t{3}, int64_t{2052}, int64_t{4999}}) {
        const int64_t T = q0 == 2052 ? 700 : 1, S = q0 + T;
        const auto qi = randn(T * s.Hi * d);
        auto [qc, qg] = both(qi, {T, s.Hi, d});
        Tensor ac = cpu_->alloc({T, S}), ag = gpu_->alloc({T, S});
        EXPECT_EQ(gpu_->qsa_index_select(ag, qg, bg, q0, sp), cpu_->qsa_index_select(ac, qc, bc, q0, sp));
        EXPECT_EQ(gpu_->download(ag), cpu_->download(ac)) << "selection from own blocks, q0 " << q0;
      }
    }
}

TEST_F(Qwen4Ops, QsaSelectDecodeMatchesCpu) {
  const QsaShape s = kReal;
  // contexts 1 … 32K: no complete block, fewer than block_topk blocks, exactly block_topk, one more, many.
  for (int64_t S : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{5}, int64_t{1000}, int64_t{2048},
                    int64_t{2049}, int64_t{2051}, int64_t{2052}, int64_t{2053}, int64_t{4096}, int64_t{5000},
                    int64_t{32768}, int64_t{32771}}) {
    const auto blk = blocks_for(s, S);
    select_both(s, randn(s.Hi * s.d), 1, blk, S - 1, "decode");
  }
}

// Speculative-verify steps (T = 2 … 16, the card's few-query score path): every query of the step sees its
// own causal block count, which differs within a step wherever q0 + t + 1 crosses a block boundary.
TEST_F(Qwen4Ops, QsaSelectFewQueriesMatchCpu) {
  for (const QsaShape& s : {kReal, kFixture})
    for (int64_t S : {int64_t{5}, int64_t{9}, int64_t{2051}, int64_t{4096}, int64_t{32771}})
      for (int64_t T = 2; T <= std::min<int64_t>(S, 16); ++T) {
        const auto blk = blocks_for(s, S);
        select_both(s, randn(T * s.Hi * s.d), T, blk, S - T, "few queries d " + std::to_string(s.d));
      }
  for (const QsaShape& s : {kOddSmall, kOddWide})
    for (int64_t S : {int64_t{9}, int64_t{97}, int64_t{1000}})
      for (int64_t T : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{9}})
        select_both(s, randn(T * s.Hi * s.d), T, blocks_for(s, S), S - T,
                    "few queries Hi " + std::to_string(s.Hi) + " d " + std::to_string(s.d));
}

TEST_F(Qwen4Ops, QsaSelectPromptMatchesCpu) {
  const QsaShape s = kReal;
  {  // a 4096-token prompt from an empty cache: one launch pair for all queries
    const int64_t T = 4096;
    select_both(s, randn(T * s.Hi * s.d), T, blocks_for(s, T), 0, "prompt");
  }
  {  // a chunk continuing a prompt (q0 unaligned to the block size), ending past 5000
    const int64_t q0 = 4097, T = 903;
    select_both(s, randn(T * s.Hi * s.d), T, blocks_for(s, q0 + T), q0, "prompt chunk");
  }
}

// Block keys from a few distinct vectors (one of them zero: ReLU makes its score exactly 0), so the k-th and
// (k+1)-th scores are equal at most cuts: the stable rule (lower block index wins) decides, and the tie count
// must match the CPU's.
TEST_F(Qwen4Ops, QsaSelectExactTiesMatchCpu) {
  for (const QsaShape& s : {kReal, kFixture}) {
    const auto pool = randn(4 * s.d);
    std::uniform_int_distribution<int> pick(0, 4);  // 4 = the zero vector
    const auto tied_blocks = [&](int64_t S) {
      const int64_t nrows = S / s.compress + 1;
      std::vector<float> blk(nrows * s.d, 0.0f);
      for (int64_t b = 0; b < nrows; ++b) {
        const int p = pick(rng_);
        if (p < 4) std::copy(pool.begin() + p * s.d, pool.begin() + (p + 1) * s.d, blk.begin() + b * s.d);
      }
      return blk;
    };
    const int64_t S = 5000;
    const auto blk = tied_blocks(S);
    const std::string what = "ties d " + std::to_string(s.d);
    int64_t ties = select_both(s, randn(s.Hi * s.d), 1, blk, S - 1, what + " decode");
    for (int64_t T = 2; T <= 16; ++T)  // speculative verify (the few-query score path)
      ties += select_both(s, randn(T * s.Hi * s.d), T, blk, S - T, what + " verify");
    ties += select_both(s, randn(300 * s.Hi * s.d), 300, blk, S - 300, what + " prompt");
    // all-zero queries: every score is exactly 0, the lowest block indices win
    ties +=
        select_both(s, std::vector<float>(64 * s.Hi * s.d, 0.0f), 64, blk, S - 64, what + " zero queries");
    // 10000 blocks: equal keys are ranked across many chunks of the selection's threads
    const int64_t SL = 40000;
    const auto blk_long = tied_blocks(SL);
    ties += select_both(s, randn(s.Hi * s.d), 1, blk_long, SL - 1, what + " long decode");
    ties += select_both(s, randn(5 * s.Hi * s.d), 5, blk_long, SL - 5, what + " long verify");
    ties += select_both(s, std::vector<float>(3 * s.Hi * s.d, 0.0f), 3, blk_long, SL - 3,
                        what + " long zero queries");
    EXPECT_GT(ties, 0) << "the crafted data must produce ties at the cut";
    // block_topk 0: nothing but the tail
    select_both(s, randn(5 * s.Hi * s.d), 5, blk, 37, what + " topk 0", 0);
  }
}

TEST_F(Qwen4Ops, QsaFixtureShapesMatchCpu) {
  const QsaShape s = kFixture;
  for (int64_t S = 1; S <= 64; ++S)
    select_both(s, randn(s.Hi * s.d), 1, blocks_for(s, S), S - 1, "fixture decode");
  select_both(s, randn(64 * s.Hi * s.d), 64, blocks_for(s, 64), 0, "fixture prompt");
  select_both(s, randn(13 * s.Hi * s.d), 13, blocks_for(s, 30), 17, "fixture chunk");
}

// Time of the select on the card (not a pass/fail bound): a 4096-token prompt, decode at 4K, 32K and 128K,
// and speculative-verify steps of 9 and 16 queries at 4K.
TEST_F(Qwen4Ops, QsaSelectTiming) {
  const QsaShape s = kReal;
  const QsaIndexSpec sp = spec_of(s);
  for (auto [T, q0] :
       {std::pair<int64_t, int64_t>{4096, 0}, {1, 4095}, {9, 4087}, {16, 4080}, {1, 32767}, {1, 131071}}) {
    const int64_t S = q0 + T;
    auto qg = gpu_->upload(randn(T * s.Hi * s.d), {T, s.Hi, s.d});
    auto bg = gpu_->upload(blocks_for(s, S), {S / s.compress + 1, s.d});
    Tensor ag = gpu_->alloc({T, S});
    gpu_->qsa_index_select(ag, qg, bg, q0, sp);  // warm-up
    const int reps = 20;
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) gpu_->qsa_index_select(ag, qg, bg, q0, sp);
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / reps;
    std::printf("    qsa_index_select T %lld S %lld: %.1f us per call (incl. the tie-count read)\n",
                static_cast<long long>(T), static_cast<long long>(S), us);
  }
  // append: a 4096-token prompt (1024 blocks: host RoPE tables + one pooling launch) and one decode token
  Weight kn = gpu_->upload_weight("k_norm", randn(s.d, 0.3f), {s.d});
  Tensor raw = gpu_->alloc({8192, s.d}), blocks = gpu_->alloc({2049, s.d});
  for (int64_t T : {int64_t{4096}, int64_t{1}}) {
    auto kg = gpu_->upload(randn(T * s.d), {T, s.d});
    const int reps = 20;
    gpu_->synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r)
      gpu_->qsa_index_append(raw, blocks, kg, 4096 - T + (T == 1 ? 4 : 0), kn, sp);
    gpu_->synchronize();
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / reps;
    std::printf("    qsa_index_append T %lld: %.1f us per call\n", static_cast<long long>(T), us);
  }
}

}  // namespace
}  // namespace bloomery::gputest
