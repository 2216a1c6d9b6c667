// A fixed pool of worker threads for data-parallel loops (matmul rows, attention heads, experts).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace bloomery {

class ThreadPool {
 public:
  // threads <= 0: one per hardware core. The calling thread also works, so `threads` is the total.
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over disjoint ranges covering [0, n), at least `grain` items each, and returns when
  // all are done. Runs inline when n is small or when called from inside a pool task (no nesting). The first
  // exception a range throws, on any thread, is rethrown here once every range has finished or been skipped
  // (ranges not yet started when it was thrown are skipped); the pool stays usable.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

 private:
  // One parallel_for's ranges: chunks of `chunk` items over [0, n).
  struct Job {
    const std::function<void(int64_t, int64_t)>* fn = nullptr;
    int64_t n = 0, chunk = 0, chunks = 0;
  };

  void worker_loop();
  // Claims chunks of `job` (one atomic add each) and runs them until none is left; a chunk claimed after a
  // range has thrown is counted done without running. The thread that completes the last chunk wakes the
  // caller if it sleeps.
  void run_chunks(const Job& job);
  // One range; its exception is kept in error_ (the first one wins).
  void run_range(const Job& job, int64_t begin, int64_t end);

  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // one parallel_for at a time

  // The published job, its generation and stop_ change under mu_ (so that sleepers on the condition variables
  // miss no wake-up). Workers between jobs and a caller waiting for its last chunk first watch the atomics
  // without the lock for a few microseconds: a decode step of a small model is hundreds of loops of about a
  // microsecond each, and a futex wake-up per loop cost more than the loop's work (docs/performance.md).
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  Job job_;  // read by a worker under mu_ as it joins the job
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  // Workers inside the current job. A worker joins under mu_ while the job is published; the caller withdraws
  // the job under mu_ only once none is inside, so no late worker claims from the next job's counter.
  std::atomic<int> active_{0};
  std::atomic<int64_t> next_chunk_{0}, done_chunks_{0};
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;  // the current job's first exception (under mu_)
};

}  // namespace bloomery
