// ThreadPool: workers wait for a job generation, grab chunks with a shared counter, and signal completion.
#include "core/thread_pool.h"

#include <algorithm>
#include <utility>

namespace bloomery {

namespace {
thread_local bool t_in_pool_task = false;
}

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(int) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_work_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    if (job_) run_chunks(lock, *job_);  // null when the caller finished every chunk before this wake-up
  }
}

void ThreadPool::run_chunks(std::unique_lock<std::mutex>& lock,
                            const std::function<void(int64_t, int64_t)>& fn) {
  while (next_chunk_ < chunks_) {
    const int64_t c = next_chunk_++;
    if (!error_) {  // read under mu_, which is held here: once a range has thrown, the rest are skipped
      const int64_t b = c * job_chunk_, e = std::min(job_n_, b + job_chunk_);
      lock.unlock();
      run_range(fn, b, e);
      lock.lock();
    }
    if (++done_chunks_ == chunks_) cv_done_.notify_all();
  }
}

void ThreadPool::run_range(const std::function<void(int64_t, int64_t)>& fn, int64_t begin, int64_t end) {
  t_in_pool_task = true;
  try {
    fn(begin, end);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_) error_ = std::current_exception();
  }
  t_in_pool_task = false;
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t max_chunks = std::min<int64_t>((n + grain - 1) / grain, static_cast<int64_t>(size()) * 4);
  if (workers_.empty() || max_chunks <= 1 || t_in_pool_task) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> run_lock(run_mu_);
  std::unique_lock<std::mutex> lock(mu_);
  job_ = &fn;
  job_n_ = n;
  job_chunk_ = (n + max_chunks - 1) / max_chunks;
  chunks_ = (n + job_chunk_ - 1) / job_chunk_;
  next_chunk_ = 0;
  done_chunks_ = 0;
  error_ = nullptr;
  ++generation_;
  cv_work_.notify_all();
  run_chunks(lock, fn);  // the caller works too
  cv_done_.wait(lock, [&] { return done_chunks_ == chunks_; });
  job_ = nullptr;
  if (std::exception_ptr error = std::exchange(error_, nullptr)) std::rethrow_exception(error);
}

}  // namespace bloomery
