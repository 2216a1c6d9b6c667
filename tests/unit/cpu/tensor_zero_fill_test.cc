// Deferred zero fill (tensor.h): the fill a backend postpones must run before anything can see the contents,
// and only an op that overwrites the whole storage may drop it. The CUDA backend relies on this to skip the
// memsets of op outputs; its device-side check is tests/gpu (LazyZeroFill).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "backend/tensor.h"

namespace bloomery {
namespace {

// A host tensor whose zero fill is deferred as the CUDA backend defers it; `fills` counts the fills run.
struct Deferred {
  std::vector<float> host;
  int fills = 0;
  Tensor t;
  explicit Deferred(std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    host.assign(static_cast<size_t>(n), 7.0f);  // stale contents a missed fill would expose
    auto st = std::make_shared<Storage>();
    st->data = host.data();
    st->bytes = host.size() * sizeof(float);
    st->pending_zero = [this](Storage& s) {
      ++fills;
      std::fill(static_cast<float*>(s.data), static_cast<float*>(s.data) + s.bytes / 4, 0.0f);
    };
    t = Tensor(std::move(st), ElemType::F32, std::move(shape));
  }
};

TEST(TensorZeroFill, ReadingRunsTheFillOnce) {
  Deferred d({2, 3});
  EXPECT_EQ(d.t.f32()[5], 0.0f);
  EXPECT_EQ(d.fills, 1);
  d.t.f32()[0] = 1.0f;
  EXPECT_EQ(d.t.f32()[0], 1.0f);  // a second access does not fill again
  EXPECT_EQ(d.fills, 1);
}

TEST(TensorZeroFill, WholeOverwriteDropsTheFill) {
  Deferred d({2, 3});
  Deferred x({2, 3});
  float* out = d.t.out_f32({&x.t});
  EXPECT_EQ(d.fills, 0);
  EXPECT_EQ(out[0], 7.0f);  // the op is about to write it
  d.t.f32();                // nothing pending any more
  EXPECT_EQ(d.fills, 0);
  EXPECT_EQ(x.fills, 0);  // out_f32 does not touch its inputs' fills
}

TEST(TensorZeroFill, InPlaceOnAFreshTensorSeesZeros) {
  Deferred d({4});
  Tensor alias = d.t.view({2, 2});
  d.t.out_f32({&alias});  // the op reads the same storage: the zeros must be there first
  EXPECT_EQ(d.fills, 1);
  EXPECT_EQ(d.host[3], 0.0f);
}

TEST(TensorZeroFill, PartialWriteKeepsTheRestZero) {
  Deferred d({4, 2});
  Tensor rows = d.t.slice(1, 2);  // a view of part of the storage
  rows.out_f32();
  EXPECT_EQ(d.fills, 1);
  EXPECT_EQ(d.host[0], 0.0f);
  EXPECT_EQ(d.host[7], 0.0f);
  Deferred e({4, 2});
  e.t.slice(0, 4).view({8}).out_f32();  // a view of the whole storage counts as whole
  EXPECT_EQ(e.fills, 0);
}

TEST(TensorZeroFill, EagerStorageIsUntouched) {
  std::vector<float> host(3, 5.0f);
  auto st = std::make_shared<Storage>();
  st->data = host.data();
  st->bytes = 12;
  Tensor t(st, ElemType::F32, {3});
  EXPECT_EQ(t.out_f32()[1], 5.0f);
  EXPECT_EQ(t.f32()[2], 5.0f);
}

}  // namespace
}  // namespace bloomery
