// A fixed pool of worker threads for data-parallel loops (matmul rows, attention heads, experts).
#pragma once

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
  void worker_loop(int index);
  // Takes the current job's chunks until none is left, with mu_ held by `lock` (released while a range runs);
  // a chunk taken after a range has thrown is counted done without running.
  void run_chunks(std::unique_lock<std::mutex>& lock, const std::function<void(int64_t, int64_t)>& fn);
  // One range, called without mu_ held; its exception is kept in error_ (the first one wins).
  void run_range(const std::function<void(int64_t, int64_t)>& fn, int64_t begin, int64_t end);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0, job_chunk_ = 0;
  int64_t next_chunk_ = 0, chunks_ = 0, done_chunks_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;  // the current job's first exception (under mu_)
  std::mutex run_mu_;         // one parallel_for at a time
};

}  // namespace bloomery
