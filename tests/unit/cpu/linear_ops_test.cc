// Matmul, norms, elementwise, router and experts against naive loops.
#include <cmath>
#include <cstring>

#include <gtest/gtest.h>

#include "cpu_test_util.h"

namespace bloomery {

using test::max_abs_diff;
using test::randv;

TEST(CpuOps, MatmulMatchesNaiveAndIsThreadCountInvariant) {
  const int64_t T = 5, K = 70, N = 33;
  auto xv = randv(T * K, 1), wv = randv(N * K, 2);
  std::vector<float> ref(T * N);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += double(xv[t * K + k]) * wv[n * K + k];
      ref[t * N + n] = float(s);
    }
  std::vector<float> first;
  for (int threads : {1, 4}) {
    auto be = make_cpu_backend(threads);
    Weight w = be->upload_weight("w", wv, {N, K});
    Tensor x = be->upload(xv, {T, K});
    Tensor y = be->alloc({T, N});
    be->matmul(y, x, w);
    auto got = be->download(y);
    EXPECT_LT(max_abs_diff(got, ref), 1e-5f);
    if (first.empty())
      first = got;
    else
      EXPECT_EQ(got, first);
    // A block of rows equals the same columns of the full product.
    Tensor y2 = be->alloc({T, 7});
    be->matmul_rows(y2, x, w, 10, 7);
    auto part = be->download(y2);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < 7; ++j) EXPECT_EQ(part[t * 7 + j], got[t * N + 10 + j]);
  }
}

// The matmul's sums in the order it documents (16 partial sums over k, their sum, then the tail), whatever
// clone of its dot product the CPU runs (an AVX2 one where present): the bits are those of this scalar loop,
// for lengths with and without a tail, several tokens and a block of weight rows.
TEST(CpuOps, MatmulBitsAreTheSixteenPartialSumsInOrder) {
  const auto dot16 = [](const float* a, const float* b, int64_t K) {
    float acc[16] = {};
    int64_t k = 0;
    for (; k + 16 <= K; k += 16)
      for (int j = 0; j < 16; ++j) acc[j] = acc[j] + a[k + j] * b[k + j];
    float tail = 0.0f;
    for (; k < K; ++k) tail = tail + a[k] * b[k];
    float s = 0.0f;
    for (int j = 0; j < 16; ++j) s = s + acc[j];
    return s + tail;
  };
  auto be = make_cpu_backend(2);
  for (int64_t K : {16, 70, 256, 1000}) {
    const int64_t T = 9, N = 37;
    auto xv = randv(T * K, 3), wv = randv(N * K, 4);
    Weight w = be->upload_weight("w", wv, {N, K});
    Tensor x = be->upload(xv, {T, K});
    Tensor y = be->alloc({T, N - 5});
    be->matmul_rows(y, x, w, 5, N - 5);
    const auto got = be->download(y);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < N - 5; ++n) {
        const float want = dot16(xv.data() + t * K, wv.data() + (n + 5) * K, K);
        ASSERT_EQ(0, std::memcmp(&want, &got[t * (N - 5) + n], 4))
            << "K " << K << " token " << t << " row " << n << ": " << got[t * (N - 5) + n] << " vs " << want;
      }
  }
}

TEST(CpuOps, MatmulRefusesWrongShape) {
  auto be = make_cpu_backend(1);
  Weight w = be->upload_weight("w", randv(12, 3), {3, 4});
  Tensor x = be->alloc({2, 5});
  Tensor y = be->alloc({2, 3});
  try {
    be->matmul(y, x, w);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.id(), "E_BACKEND_SHAPE");
  }
}

TEST(CpuOps, RmsNormVariants) {
  auto be = make_cpu_backend(2);
  const int64_t R = 3, H = 2, G = 4, C = H * G;
  auto xv = randv(R * C, 4), wv = randv(C, 5);
  Tensor x = be->upload(xv, {R, C});
  const float eps = 1e-6f;
  auto rms = [&](int64_t r, int64_t c0, int64_t n) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += double(xv[r * C + c0 + i]) * xv[r * C + c0 + i];
    return 1.0 / std::sqrt(ss / n + eps);
  };
  {  // zero-centred over the whole row
    Weight w = be->upload_weight("w", wv, {C});
    Tensor y = be->alloc({R, C});
    be->rms_norm(y, x, &w, eps, NormKind::OnePlus);
    auto got = be->download(y);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c)
        EXPECT_NEAR(got[r * C + c], xv[r * C + c] * rms(r, 0, C) * (1 + wv[c]), 1e-5);
  }
  {  // grouped, one weight slice per group (plain)
    Weight w = be->upload_weight("w", wv, {C});
    Tensor y = be->alloc({R, C});
    be->rms_norm(y, x, &w, eps, NormKind::Plain, G);
    auto got = be->download(y);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c)
        EXPECT_NEAR(got[r * C + c], wv[c] * xv[r * C + c] * rms(r, c / G * G, G), 1e-5);
  }
  {  // per head with a shared weight (q_norm), in place
    std::vector<float> wh(wv.begin(), wv.begin() + G);
    Weight w = be->upload_weight("w", wh, {G});
    Tensor y = be->upload(xv, {R, C});
    be->rms_norm(y, y, &w, eps, NormKind::OnePlus, G);
    auto got = be->download(y);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c)
        EXPECT_NEAR(got[r * C + c], xv[r * C + c] * rms(r, c / G * G, G) * (1 + wh[c % G]), 1e-5);
  }
  {  // gated with silu
    std::vector<float> wh(wv.begin(), wv.begin() + G);
    auto zv = randv(R * C, 6);
    Weight w = be->upload_weight("w", wh, {G});
    Tensor z = be->upload(zv, {R, C});
    Tensor y = be->alloc({R, C});
    be->rms_norm_gated(y, x, z, w, eps, Act::Silu);
    auto got = be->download(y);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) {
        float zz = zv[r * C + c];
        EXPECT_NEAR(got[r * C + c],
                    wh[c % G] * xv[r * C + c] * rms(r, c / G * G, G) * zz / (1 + std::exp(-zz)), 1e-5);
      }
  }
}

TEST(CpuOps, RouterPicksLargestAndRenormalises) {
  auto be = make_cpu_backend(1);
  std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.5f, 0.3f, 1.5f};
  Tensor l = be->upload(logits, {1, 6});
  Tensor ids = be->alloc({1, 3}, ElemType::I32);
  Tensor w = be->alloc({1, 3});
  be->route_softmax_topk(ids, w, l, RouterSpec{3, true});
  EXPECT_EQ(ids.i32()[0], 1);
  EXPECT_EQ(ids.i32()[1], 3);  // tie between 3 and 5: lower index first
  EXPECT_EQ(ids.i32()[2], 5);
  auto wv = be->download(w);
  EXPECT_NEAR(wv[0] + wv[1] + wv[2], 1.0f, 1e-6);
  EXPECT_NEAR(wv[0] / wv[1], std::exp(0.5f), 1e-5);
}

TEST(CpuOps, ExpertsAreWeightedSwiGLU) {
  auto be = make_cpu_backend(3);
  const int64_t D = 6, I = 4, E = 3, T = 2, k = 2;
  std::vector<Weight> ws;
  std::vector<std::vector<float>> raw;
  for (int e = 0; e < E * 3; ++e) {
    bool down = e % 3 == 2;
    raw.push_back(randv(D * I, 10 + e));
    ws.push_back(be->upload_weight("e" + std::to_string(e), raw.back(),
                                   down ? std::vector<int64_t>{D, I} : std::vector<int64_t>{I, D}));
  }
  std::vector<ExpertWeights> experts;
  for (int e = 0; e < E; ++e) experts.push_back({&ws[3 * e], &ws[3 * e + 1], &ws[3 * e + 2]});
  auto xv = randv(T * D, 20);
  Tensor x = be->upload(xv, {T, D});
  Tensor ids = be->alloc({T, k}, ElemType::I32);
  int32_t idv[] = {2, 0, 1, 2};
  std::copy(idv, idv + 4, ids.i32());
  Tensor wt = be->upload(std::vector<float>{0.7f, 0.3f, 0.4f, 0.6f}, {T, k});
  Tensor out = be->alloc({T, D});
  be->moe_experts(out, x, ids, wt, experts, 0.0f);
  auto got = be->download(out);
  float wts[] = {0.7f, 0.3f, 0.4f, 0.6f};
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < D; ++c) {
      double acc = 0;
      for (int j = 0; j < k; ++j) {
        int e = idv[t * k + j];
        const auto &G = raw[3 * e], &U = raw[3 * e + 1], &Dn = raw[3 * e + 2];
        for (int64_t i = 0; i < I; ++i) {
          double g = 0, u = 0;
          for (int64_t d = 0; d < D; ++d) {
            g += G[i * D + d] * xv[t * D + d];
            u += U[i * D + d] * xv[t * D + d];
          }
          acc += wts[t * k + j] * Dn[c * I + i] * (g / (1 + std::exp(-g)) * u);
        }
      }
      EXPECT_NEAR(got[t * D + c], acc, 1e-5);
    }
}

// Greedy without the rows: each tensor's last row, the lowest index among equal maxima (the sampler's rule).
TEST(CpuOps, ArgmaxOfLastRowsTakesTheLowestAmongEqualMaxima) {
  auto be = make_cpu_backend(1);
  Tensor a = be->upload(std::vector<float>{9, 0, 0, /* last row */ 1, 5, 5}, {2, 3});
  Tensor b = be->upload(std::vector<float>{-2, -1, -1, -3}, {1, 4});
  const std::vector<Tensor> rows = {a, b};
  EXPECT_EQ(be->argmax_last_rows(rows), (std::vector<int32_t>{1, 1}));
  EXPECT_TRUE(be->argmax_last_rows({}).empty());
}

}  // namespace bloomery
