// qwen4_exp gated-residual hyper-connections (§3.5): the stream read mix and the stream write.
#include <cmath>

#include <gtest/gtest.h>

#include "backend/cpu/hyper_connections.h"
#include "cpu_test_util.h"

namespace bloomery {

using test::randv;

TEST(HyperConnections, ReadMixAndInject) {
  auto be = make_cpu_backend(2);
  const int64_t T = 3, n = 4, D = 5;
  auto m = randv(T * n * D, 1, -3.0f, 3.0f), xn = randv(T * n * D, 2), y = randv(T * D, 3),
       inj = randv(T * n, 4);
  Tensor u = be->alloc({T, D}), mt = be->upload(m, {T, n * D}), xt = be->upload(xn, {T, n * D});
  be->hc_read_mix(u, mt, xt, n);
  auto gu = be->download(u);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < D; ++d) {
      double acc = 0;
      for (int64_t s = 0; s < n; ++s) {
        const int64_t i = (t * n + s) * D + d;
        acc += xn[i] / (1.0 + std::exp(-m[i]));
      }
      EXPECT_NEAR(gu[t * D + d], acc / n, 1e-6);
    }
  Tensor X = be->upload(xn, {T, n * D}), yt = be->upload(y, {T, D}), it = be->upload(inj, {T, n});
  be->hc_inject(X, yt, it);
  auto gx = be->download(X);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t s = 0; s < n; ++s)
      for (int64_t d = 0; d < D; ++d)
        EXPECT_NEAR(gx[(t * n + s) * D + d], xn[(t * n + s) * D + d] + inj[t * n + s] * y[t * D + d], 1e-6);
}

TEST(HyperConnections, GroupedZeroCentredNorm) {
  auto x = randv(8, 5), w = randv(8, 6, -0.3f, 0.3f);
  std::vector<float> y(8);
  cpu::grouped_rmsnorm1p(x.data(), w.data(), 2, 4, 1e-6f, y.data());
  for (int g = 0; g < 2; ++g) {
    double ss = 0;
    for (int i = 0; i < 4; ++i) ss += x[g * 4 + i] * x[g * 4 + i];
    for (int i = 0; i < 4; ++i)
      EXPECT_NEAR(y[g * 4 + i], x[g * 4 + i] / std::sqrt(ss / 4 + 1e-6) * (1.0 + w[g * 4 + i]), 1e-5);
  }
}

}  // namespace bloomery
