// DevicePool (the CUDA backend's activation allocator): blocks are reused by size class, the accounting is
// right, and a reused block handed out by CudaBackend::alloc is zero-filled again.
#include <gtest/gtest.h>

#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device_pool.h"
#include "backend_util.h"

namespace bloomery::gputest {
namespace {

TEST(DevicePool, SizeClassesCoverTheRequestWithBoundedWaste) {
  for (size_t b : {size_t(1), size_t(255), size_t(256), size_t(70000), size_t(1) << 20, size_t(3) << 20,
                   size_t(100) << 20, size_t(1234567891)}) {
    const size_t c = cuda::DevicePool::size_class(b);
    EXPECT_GE(c, b) << b;
    EXPECT_LE(c, b + b / 4 + (2u << 20)) << b;  // ≤ 25 % + one 2 MiB rounding
  }
}

TEST(DevicePool, FreedBlocksAreReusedAndCounted) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  cuda::DevicePool pool;
  void* first = nullptr;
  {
    auto a = pool.get(1000, "test");
    first = a.get();
    EXPECT_EQ(pool.live_bytes(), cuda::DevicePool::size_class(1000));
    EXPECT_EQ(pool.cached_bytes(), 0u);
  }
  EXPECT_EQ(pool.live_bytes(), 0u);
  EXPECT_EQ(pool.cached_bytes(), cuda::DevicePool::size_class(1000));
  auto b = pool.get(1000, "test");
  EXPECT_EQ(b.get(), first);  // same class: the cached block, no new cudaMalloc
  auto c = pool.get(1 << 20, "test");
  EXPECT_NE(c.get(), first);
  b.reset();
  c.reset();
  pool.trim();
  EXPECT_EQ(pool.cached_bytes(), 0u);
}

TEST(DevicePool, BackendAllocZeroFillsReusedBlocks) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  cuda::CudaBackend be(0);
  const float* where = nullptr;
  {
    Tensor t = be.alloc({64, 33});
    be.fill(t, 7.0f);
    where = t.f32();
  }
  Tensor u = be.alloc({64, 33});
  EXPECT_EQ(u.f32(), where);  // the freed block came back
  for (float v : be.download(u)) ASSERT_EQ(v, 0.0f);
}

TEST(DevicePool, TensorsMayOutliveTheBackend) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  Tensor keep;
  {
    cuda::CudaBackend be(0);
    keep = be.alloc({16});
  }
  keep = Tensor();  // frees through cudaFree, not into the destroyed pool
  SUCCEED();
}

}  // namespace
}  // namespace bloomery::gputest
