#include "core/thread_pool.h"

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace bloomery {

TEST(ThreadPool, CoversEveryIndexOnce) {
  ThreadPool pool(4);
  EXPECT_EQ(pool.size(), 4);
  for (int64_t n : {1, 3, 17, 1000, 100003}) {
    std::vector<std::atomic<int>> hits(n);
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i]++;
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  }
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  pool.parallel_for(8, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) pool.parallel_for(10, [&](int64_t b2, int64_t e2) { total += e2 - b2; });
  });
  EXPECT_EQ(total.load(), 80);
}

// A range that throws on a worker thread reaches parallel_for's caller (instead of ending the process), after
// every range has finished; the pool then runs the next job whole.
TEST(ThreadPool, AWorkersExceptionReachesTheCaller) {
  ThreadPool pool(4);
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> worker_ranges{0};
  try {
    pool.parallel_for(64, [&](int64_t, int64_t) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // every thread gets ranges
      if (std::this_thread::get_id() != caller) {
        ++worker_ranges;
        throw std::runtime_error("range failed on a worker");
      }
    });
    FAIL() << "no exception reached the caller";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "range failed on a worker");
  }
  EXPECT_GE(worker_ranges.load(), 1);
  std::vector<std::atomic<int>> hits(1000);
  pool.parallel_for(1000, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[i]++;
  });
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(hits[i].load(), 1) << i;
}

// Back-to-back jobs of a few items each, of changing sizes: a worker that wakes late for one job (after the
// caller took its last chunk) must not claim a chunk of the next one with the old job's bounds.
TEST(ThreadPool, ManyTinyJobsBackToBackEachCoverTheirOwnRange) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(16);
  for (int job = 0; job < 20000; ++job) {
    const int64_t n = 2 + job % 15;
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i]++;
    });
    for (int64_t i = 0; i < 16; ++i) {
      ASSERT_EQ(hits[i].load(), i < n ? 1 : 0) << "job " << job << " n=" << n << " i=" << i;
      hits[i] = 0;
    }
  }
}

}  // namespace bloomery
