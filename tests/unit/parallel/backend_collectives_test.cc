// Backend::tp_all_reduce / tp_gather_cols: the default through host memory (download, the host collective,
// copy back: what CUDA ranks in separate processes on one GPU take) gives the same bytes as the CPU
// backend's in-place reduction, in rank order, and the gather puts rank r's columns at [r·n, (r+1)·n).
#include <chrono>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "parallel/thread_group.h"

namespace bloomery {
namespace {

using namespace std::chrono_literals;

TEST(BackendCollectives, HostStagedDefaultEqualsTheInPlaceReductionAndGathersColumnsByRank) {
  const int size = 3;
  const float lead[3] = {1e8f, 1.0f, -1e8f};  // the f32 sum depends on the order: (1e8 + 1) − 1e8 = 0
  ThreadGroup g(size, 5000ms);
  std::vector<std::vector<float>> staged(size), direct(size), gathered(size);
  std::vector<std::string> joined(size);
  g.run([&](Communicator& c) {
    cpu::CpuBackend be(1);
    joined[c.rank()] = be.join_tp(c, 5000ms);
    std::vector<float> v(2 * 37);
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = i == 0 ? lead[c.rank()] : 0.37f * float(c.rank() + 1) * float(i);
    Tensor a = be.upload(v, {2, 37}), b = be.upload(v, {2, 37});
    be.Backend::tp_all_reduce(a, c, "staged sum");  // the base class's host-memory path
    be.tp_all_reduce(b, c, "in-place sum");
    staged[c.rank()] = be.download(a);
    direct[c.rank()] = be.download(b);
    // Rank r's [2, 2] block holds 100·r + 10·row + col.
    std::vector<float> mine;
    for (int row = 0; row < 2; ++row)
      for (int col = 0; col < 2; ++col) mine.push_back(float(100 * c.rank() + 10 * row + col));
    gathered[c.rank()] = be.download(be.Backend::tp_gather_cols(be.upload(mine, {2, 2}), c, "gather"));
  });
  for (int r = 0; r < size; ++r) {
    EXPECT_EQ(joined[r], "in host memory");
    EXPECT_EQ(staged[r][0], (lead[0] + lead[1]) + lead[2]);
    ASSERT_EQ(staged[r].size(), direct[0].size());
    EXPECT_EQ(0, std::memcmp(staged[r].data(), direct[0].data(), direct[0].size() * 4)) << "rank " << r;
    EXPECT_EQ(0, std::memcmp(direct[r].data(), direct[0].data(), direct[0].size() * 4)) << "rank " << r;
    EXPECT_EQ(gathered[r], (std::vector<float>{0, 1, 100, 101, 200, 201, 10, 11, 110, 111, 210, 211}));
  }
}

}  // namespace
}  // namespace bloomery
