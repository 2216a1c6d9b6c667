// ThreadGroup collectives: results, rank-order determinism, and the watchdog rules of communicator.h.
#include "parallel/thread_group.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"

namespace bloomery {
namespace {

using namespace std::chrono_literals;

TEST(ThreadGroup, AllReduceSumsInRankOrderOnEveryRank) {
  // Values chosen so the f32 sum depends on the order: ((1e8 + 1) + -1e8) + 1 = 1, not 2.
  const float vals[4] = {1e8f, 1.0f, -1e8f, 1.0f};
  ThreadGroup g(4, 2000ms);
  std::vector<std::vector<float>> got(4);
  g.run([&](Communicator& c) {
    std::vector<float> v(257);
    for (size_t i = 0; i < v.size(); ++i) v[i] = i == 0 ? vals[c.rank()] : float(c.rank() + 1) * float(i);
    c.all_reduce_sum(v.data(), v.size(), "test");
    got[c.rank()] = v;
  });
  const float expect0 = ((vals[0] + vals[1]) + vals[2]) + vals[3];
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(got[r][0], expect0);
    EXPECT_EQ(0, std::memcmp(got[r].data(), got[0].data(), got[0].size() * 4)) << "rank " << r;
    for (size_t i = 1; i < got[r].size(); ++i) ASSERT_EQ(got[r][i], 10.0f * float(i));
  }
}

TEST(ThreadGroup, AllGatherBroadcastBarrier) {
  ThreadGroup g(3, 2000ms);
  std::vector<std::vector<float>> gathered(3);
  std::vector<std::vector<int>> bcast(3);
  std::atomic<int> before{0};
  std::vector<int> seen(3);
  g.run([&](Communicator& c) {
    const std::vector<float> mine = {float(c.rank()), float(10 * c.rank())};
    std::vector<float> out(6);
    c.all_gather(mine.data(), 2, out.data(), "gather");
    gathered[c.rank()] = out;
    std::vector<int> b = {c.rank() == 2 ? 7 : -1, c.rank() == 2 ? 9 : -1};
    c.broadcast(b.data(), b.size() * sizeof(int), 2, "bcast");
    bcast[c.rank()] = b;
    ++before;
    c.barrier("barrier");
    seen[c.rank()] = before.load();  // every rank incremented before anyone passed the barrier
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(gathered[r], (std::vector<float>{0, 0, 1, 10, 2, 20}));
    EXPECT_EQ(bcast[r], (std::vector<int>{7, 9}));
    EXPECT_EQ(seen[r], 3);
  }
}

TEST(ThreadGroup, ManyCollectivesBackToBack) {
  ThreadGroup g(4, 2000ms);
  std::vector<float> last(4);
  g.run([&](Communicator& c) {
    float v = 0;
    for (int i = 0; i < 500; ++i) {
      float x = float(c.rank() + i);
      c.all_reduce_sum(&x, 1, "loop");
      v += x;
    }
    last[c.rank()] = v;
  });
  float want = 0;
  for (int i = 0; i < 500; ++i) want += float(4 * i + 6);
  for (float v : last) EXPECT_EQ(v, want);
}

TEST(ThreadGroup, HungRankIsNamedWithinTheDeadline) {
  ThreadGroup g(3, 400ms);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    g.run([&](Communicator& c) {
      float x = 1;
      c.all_reduce_sum(&x, 1, "warm-up");
      if (c.rank() == 1) std::this_thread::sleep_for(1500ms);  // stalls past the deadline
      c.all_reduce_sum(&x, 1, "layer 2 mixer all-reduce");
    });
    FAIL() << "a stalled rank was not detected";
  } catch (const Error& e) {
    EXPECT_EQ(e.id(), "E_TP_TIMEOUT") << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 1 did not arrive"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("layer 2 mixer"), std::string::npos) << e.what();
  }
  // Detected at the deadline (the join waits for the sleeper, so bound the whole run loosely).
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

TEST(ThreadGroup, DeadRankStopsTheOthersAtOnceAndIsNamed) {
  ThreadGroup g(4, 30000ms);  // a long deadline: the failure must not wait for it
  std::atomic<int> secondary{0};
  const auto t0 = std::chrono::steady_clock::now();
  try {
    g.run([&](Communicator& c) {
      float x = 1;
      c.all_reduce_sum(&x, 1, "step 0");
      if (c.rank() == 3) raise("E_TEST_KILLED", Where{}, "alive", "killed");
      try {
        c.all_reduce_sum(&x, 1, "step 1");
      } catch (const Error& e) {
        if (e.id() == "E_TP_RANK_FAILED" && std::string(e.what()).find("rank 3") != std::string::npos)
          ++secondary;
        throw;
      }
    });
    FAIL() << "a dead rank was not detected";
  } catch (const Error& e) {
    EXPECT_EQ(e.id(), "E_TEST_KILLED");  // the root cause wins over the ranks it took down
  }
  EXPECT_EQ(secondary.load(), 3);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

TEST(ThreadGroup, RanksAtDifferentCollectivesFailInsteadOfMixingBuffers) {
  ThreadGroup g(2, 2000ms);
  try {
    g.run([&](Communicator& c) {
      std::vector<float> v(c.rank() == 0 ? 4 : 8, 1.0f);  // rank 1 is one collective "ahead" in size
      c.all_reduce_sum(v.data(), v.size(), "layer 0 mixer all-reduce");
    });
    FAIL() << "a size mismatch went unnoticed";
  } catch (const Error& e) {
    EXPECT_EQ(e.id(), "E_TP_MISMATCH") << e.what();
  }
}

}  // namespace
}  // namespace bloomery
