// The CUDA backend's fused block ops against the Backend defaults they replace (the separate ops, which the
// CPU backend runs and the goldens hold): split_cols in one launch, hc_inject_norm in one pass, GDN after its
// conv in one pass, and a
// product's row scale and accumulating store in the decode GEMV. Each fused op computes in the separate ops'
// order and rounding, so the bits must be equal; the CPU side checks that both are the right math.
#include "backend/cuda/kernels.h"
#include "backend_util.h"

namespace bloomery::gputest {
namespace {

class BlockOps : public BackendPair {
 protected:
  void TearDown() override {
    if (gpu_) gpu_->set_block_ops(true);  // the default, for the tests that follow
  }
  std::vector<float> bits(const Tensor& t) { return gpu_->download(t); }
};

// Outputs of several widths, all of x's columns or fewer, 2-4 parts, T = 1 and a prompt's rows.
TEST_F(BlockOps, SplitColsEqualsTakeCols) {
  const std::vector<std::vector<int64_t>> cuts = {{128, 128, 256}, {512, 128}, {16, 16, 32, 32}, {64, 100}};
  for (int64_t R : {1, 7, 300}) {
    for (const auto& widths : cuts) {
      int64_t C = 0;
      for (int64_t w : widths) C += w;
      C += widths.size() == 2 ? 13 : 0;  // columns past the last part stay unread
      const auto x = randn(static_cast<size_t>(R * C));
      Tensor xg = gpu_->upload(x, {R, C}), xc = cpu_->upload(x, {R, C});
      std::vector<Tensor> fused, separate, ref;
      for (int64_t w : widths) {
        fused.push_back(gpu_->alloc({R, w}));
        separate.push_back(gpu_->alloc({R, w}));
        ref.push_back(cpu_->alloc({R, w}));
      }
      std::vector<Tensor*> pf, ps, pc;
      for (size_t i = 0; i < widths.size(); ++i) {
        pf.push_back(&fused[i]);
        ps.push_back(&separate[i]);
        pc.push_back(&ref[i]);
      }
      gpu_->set_block_ops(true);
      gpu_->split_cols(pf, xg);
      gpu_->set_block_ops(false);
      gpu_->split_cols(ps, xg);
      cpu_->split_cols(pc, xc);
      for (size_t i = 0; i < widths.size(); ++i) {
        const std::string what = "R=" + std::to_string(R) + " part " + std::to_string(i);
        expect_close(bits(fused[i]), bits(separate[i]), 0, 0, what + " fused vs take_cols");
        expect_close(bits(fused[i]), cpu_->download(ref[i]), 0, 0, what + " vs cpu");
      }
    }
  }
  // Parts wider than x are refused by name.
  Tensor x = gpu_->alloc({2, 10}), a = gpu_->alloc({2, 6}), b = gpu_->alloc({2, 6});
  Tensor* const bad[] = {&a, &b};
  EXPECT_THROW(gpu_->split_cols(bad, x), Error);
}

// The stream write and the next read's norm: per-stream (n·D) and shared (D) weights, the norm kinds the
// models use, real (D 2560) and fixture (D 64) widths, T = 1, 3 and a prompt's 40 rows.
TEST_F(BlockOps, InjectNormEqualsInjectThenNorm) {
  const int n = 4;
  for (int64_t D : {2560, 64}) {
    for (int64_t T : {1, 3, 40}) {
      for (bool per_stream : {true, false}) {
        for (NormKind kind : {NormKind::OnePlus, NormKind::Plain}) {
          const auto X0 = randn(static_cast<size_t>(T * n * D), 2.0f);
          const auto y = randn(static_cast<size_t>(T * D));
          const auto inj = randn(static_cast<size_t>(T * n));
          const int64_t wn = per_stream ? n * D : D;
          const auto wv = randn(static_cast<size_t>(wn), 0.1f);
          Weight wg = gpu_->upload_weight("norm", wv, {wn}), wc = cpu_->upload_weight("norm", wv, {wn});
          const std::string what = "D=" + std::to_string(D) + " T=" + std::to_string(T) +
                                   (per_stream ? " per-stream" : " shared") +
                                   (kind == NormKind::OnePlus ? " 1+w" : " w");
          std::vector<std::vector<float>> outX, outN;
          for (bool fused : {true, false}) {
            gpu_->set_block_ops(fused);
            Tensor X = gpu_->upload(X0, {T, n * D}), xn = gpu_->alloc({T, n * D});
            gpu_->hc_inject_norm(X, gpu_->upload(y, {T, D}), gpu_->upload(inj, {T, n}), xn, &wg, 1e-6f, kind,
                                 D);
            outX.push_back(bits(X));
            outN.push_back(bits(xn));
          }
          expect_close(outX[0], outX[1], 0, 0, what + " X");
          expect_close(outN[0], outN[1], 0, 0, what + " xn");
          Tensor Xc = cpu_->upload(X0, {T, n * D}), xc = cpu_->alloc({T, n * D});
          cpu_->hc_inject_norm(Xc, cpu_->upload(y, {T, D}), cpu_->upload(inj, {T, n}), xc, &wc, 1e-6f, kind,
                               D);
          expect_close(outX[0], cpu_->download(Xc), 1e-6, 1e-7, what + " X vs cpu");
          expect_close(outN[0], cpu_->download(xc), 1e-5, 1e-6, what + " xn vs cpu");
        }
      }
    }
  }
}

// out += s ⊙ e(x·Wᵀ) in the GEMV's store against the product, scale_rows and add: BF16 and NVFP4 weights
// (the shared expert's down projection in both layouts), row scale with and without accumulation and
// accumulation alone, decode rows T = 1, 2, 5, 8 and a prompt's 12 rows (the default composition both ways).
TEST_F(BlockOps, RowScaledAccumulatingProductEqualsSeparateOps) {
  const int64_t n = 2560, k = 640;
  for (FormatId f : {FormatId::BF16, FormatId::NVFP4}) {
    auto stored = make_stored(f, n, k, rng_);
    Weight w = gpu_->upload_stored("w", {n, k}, stored->wb);
    for (int64_t T : {1, 2, 5, 8, 12}) {
      const auto x = randn(static_cast<size_t>(T * k), 0.5f);
      const auto y0 = randn(static_cast<size_t>(T * n));
      const auto s = randn(static_cast<size_t>(T));
      Tensor xg = gpu_->upload(x, {T, k}), sg = gpu_->upload(s, {T, 1});
      struct Case {
        const char* name;
        Backend::Epilogue e;
      };
      const Case cases[] = {{"scale+accumulate", {.row_scale = &sg, .accumulate = true}},
                            {"scale", {.act = Act::Silu, .row_scale = &sg}},
                            {"accumulate", {.pre = 0.5f, .accumulate = true}}};
      for (const Case& c : cases) {
        std::vector<std::vector<float>> out;
        for (bool fused : {true, false}) {
          gpu_->set_block_ops(fused);
          Tensor y = gpu_->upload(y0, {T, n});
          gpu_->matmul_epilogue(y, xg, w, c.e);
          out.push_back(bits(y));
        }
        expect_close(out[0], out[1], 0, 0,
                     std::string(format_name(f)) + " T=" + std::to_string(T) + " " + c.name);
      }
    }
  }
}

// The hyper-connection read's up product and mix in one pass (hc_up_read_mix) against the product and the mix
// as two ops: the real shape (up [4·2560, 320]) in both layouts' formats and the fixture's (4 × 64, 32), one
// decode row (fused: hc_up_mix_applies takes one row) and 2, 3, 8, 9 (the two ops both ways). Each m is
// summed as the split-K GEMV sums it, so the bits must equal the two ops' with that GEMV (the tensor-core
// GEMV, the default for BF16 at 2-8 rows, rounds its activations and is off here); against the CPU (decoded
// weights, f32) within hc_read_mix's bound up to 8 rows (9 rows take the prompt GEMM, whose bounds are
// gemm_tc_test's).
TEST_F(BlockOps, UpReadMixEqualsProductThenMix) {
  const int n = 4;
  const bool tc = cuda::gemv_tc();
  cuda::set_gemv_tc(false);
  for (auto [D, K] : {std::pair<int64_t, int64_t>{2560, 320}, {64, 32}}) {
    for (FormatId f : {FormatId::BF16, FormatId::MXFP8}) {
      auto stored = make_stored(f, n * D, K, rng_);
      Weight wg = gpu_->upload_stored("up", {n * D, K}, stored->wb);
      Weight wc = cpu_->upload_weight("up", stored->decoded, {n * D, K});
      for (int64_t T : {1, 2, 3, 8, 9}) {
        const auto a = randn(static_cast<size_t>(T * K), 0.3f), xn = randn(static_cast<size_t>(T * n * D));
        Tensor ag = gpu_->upload(a, {T, K}), xg = gpu_->upload(xn, {T, n * D});
        Tensor ac = cpu_->upload(a, {T, K}), xc = cpu_->upload(xn, {T, n * D});
        std::vector<std::vector<float>> out;
        for (bool fused : {true, false}) {
          gpu_->set_block_ops(fused);
          Tensor u = gpu_->alloc({T, D});
          gpu_->fill(u, std::nanf(""));
          gpu_->hc_up_read_mix(u, ag, wg, xg, n);
          out.push_back(bits(u));
        }
        Tensor uc = cpu_->alloc({T, D});
        cpu_->hc_up_read_mix(uc, ac, wc, xc, n);
        const std::string what =
            std::string(format_name(f)) + " D=" + std::to_string(D) + " T=" + std::to_string(T);
        expect_close(out[0], out[1], 0, 0, what + " fused vs product then mix");
        if (T <= cuda::kGemvMaxRows) expect_close(out[0], cpu_->download(uc), 1e-4, 1e-5, what + " vs cpu");
      }
    }
  }
  cuda::set_gemv_tc(tc);
}

// GDN after its conv in one pass against split_cols, gdn_gates, the step form and rms_norm_gated: the
// full-size heads, a fixture's, and odd widths (dv not a warp multiple, a norm whose threads take two
// columns); one token and a few in one call; both gate activations. Outputs and the updated state bit for
// bit.
TEST_F(BlockOps, GdnStepGatedEqualsSeparateOps) {
  struct Dims {
    int64_t Hk, Hv, dk, dv;
  };
  for (const Dims d : {Dims{16, 48, 128, 128}, Dims{2, 4, 32, 32}, Dims{1, 2, 48, 80}}) {
    const int64_t kd = d.Hk * d.dk, vd = d.Hv * d.dv, C = 2 * kd + vd;
    const auto A_log = uniform(static_cast<size_t>(d.Hv), -1.0f, 1.0f), dt = randn(static_cast<size_t>(d.Hv));
    const auto nw = uniform(static_cast<size_t>(d.dv), 0.5f, 1.5f);
    Weight Ag = gpu_->upload_weight("A_log", A_log, {d.Hv}), Dg = gpu_->upload_weight("dt_bias", dt, {d.Hv});
    Weight Ng = gpu_->upload_weight("norm", nw, {d.dv});
    Weight Ac = cpu_->upload_weight("A_log", A_log, {d.Hv}), Dc = cpu_->upload_weight("dt_bias", dt, {d.Hv});
    Weight Nc = cpu_->upload_weight("norm", nw, {d.dv});
    const auto init = randn(static_cast<size_t>(d.Hv * d.dk * d.dv), 0.1f);
    for (int64_t T : {1, 3}) {
      for (Act act : {Act::Silu, Act::Sigmoid}) {
        const auto c = randn(static_cast<size_t>(T * C)), z = randn(static_cast<size_t>(T * vd));
        const auto a = randn(static_cast<size_t>(T * d.Hv)), b = randn(static_cast<size_t>(T * d.Hv));
        std::vector<std::vector<float>> out, state;
        for (bool fused : {true, false}) {
          gpu_->set_block_ops(fused);
          Tensor cg = gpu_->upload(c, {T, C}), zg = gpu_->upload(z, {T, vd}), ag = gpu_->upload(a, {T, d.Hv}),
                 bg = gpu_->upload(b, {T, d.Hv}), sg = gpu_->upload(init, {d.Hv, d.dk, d.dv});
          Tensor og = gpu_->alloc({T, vd});
          gpu_->fill(og, std::nanf(""));
          gpu_->gdn_step_gated(og, cg, zg, ag, bg, Ag, Dg, Ng, sg, d.Hk, d.dk, 1e-6f, act);
          out.push_back(bits(og));
          state.push_back(bits(sg));
        }
        Tensor cc = cpu_->upload(c, {T, C}), zc = cpu_->upload(z, {T, vd}), ac = cpu_->upload(a, {T, d.Hv}),
               bc = cpu_->upload(b, {T, d.Hv}), sc = cpu_->upload(init, {d.Hv, d.dk, d.dv});
        Tensor oc = cpu_->alloc({T, vd});
        cpu_->gdn_step_gated(oc, cc, zc, ac, bc, Ac, Dc, Nc, sc, d.Hk, d.dk, 1e-6f, act);
        const std::string what = "Hk " + std::to_string(d.Hk) + " Hv " + std::to_string(d.Hv) + " dk " +
                                 std::to_string(d.dk) + " dv " + std::to_string(d.dv) + " T " +
                                 std::to_string(T) + (act == Act::Silu ? " silu" : " sigmoid");
        expect_close(out[0], out[1], 0, 0, what + ": fused vs separate ops, out");
        expect_close(state[0], state[1], 0, 0, what + ": fused vs separate ops, state");
        EXPECT_LE(max_rel(out[0], cpu_->download(oc)), 1e-4) << what << " vs cpu, out";
        EXPECT_LE(max_rel(state[0], cpu_->download(sc)), 1e-4) << what << " vs cpu, state";
      }
    }
  }
  // Widths the kernel cannot take are refused by name, before any launch.
  gpu_->set_block_ops(true);
  Tensor c = gpu_->alloc({1, 3 * 256}), z = gpu_->alloc({1, 256}), a = gpu_->alloc({1, 1}),
         b = gpu_->alloc({1, 1});
  Tensor st = gpu_->alloc({1, 256, 256}), o = gpu_->alloc({1, 256});
  const std::vector<float> zero = {0.0f};
  Weight A = gpu_->upload_weight("A_log", zero, {1}), D = gpu_->upload_weight("dt_bias", zero, {1});
  Weight N = gpu_->upload_weight("norm", std::vector<float>(256, 1.0f), {256});
  EXPECT_THROW(gpu_->gdn_step_gated(o, c, z, a, b, A, D, N, st, 1, 256, 1e-6f, Act::Silu), Error);
}

}  // namespace
}  // namespace bloomery::gputest
