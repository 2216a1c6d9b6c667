// ThreadPool: workers watch for a job generation (briefly spinning, then asleep), claim chunks with an atomic
// counter, and the thread that completes the last chunk wakes the caller.
#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace bloomery {

namespace {
thread_local bool t_in_pool_task = false;

// How long a thread watches for the next job (a worker) or the last chunk (the caller) before it sleeps:
// longer than the serial work between two loops of a decode step, short enough that an idle pool gives its
// cores back.
constexpr std::chrono::microseconds kSpin{50};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#else
  std::this_thread::yield();
#endif
}

// Polls `ready` for up to kSpin; true once it holds. After the first few hundred polls each one yields the
// core, so that where the machine is oversubscribed (CI runs tests side by side) other runnable threads go
// first and the wait costs them little.
template <class Ready>
bool spin_until(Ready ready) {
  constexpr unsigned kPausePolls = 256;
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (unsigned i = 1;; ++i) {
    if (ready()) return true;
    if (i < kPausePolls) {
      cpu_relax();
      continue;
    }
    std::this_thread::yield();
    if (i % 16 == 0 && std::chrono::steady_clock::now() >= until) return false;
  }
}
}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    spin_until([&] { return stop_.load(std::memory_order_relaxed) || generation_.load() != seen; });
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_work_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (!job_.fn) continue;  // the caller finished every chunk and withdrew the job before this wake-up
      job = job_;
      ++active_;
    }
    run_chunks(job);
    --active_;
  }
}

void ThreadPool::run_chunks(const Job& job) {
  for (int64_t c = next_chunk_++; c < job.chunks; c = next_chunk_++) {
    if (!failed_.load(std::memory_order_relaxed)) {
      const int64_t b = c * job.chunk, e = std::min(job.n, b + job.chunk);
      run_range(job, b, e);
    }
    if (++done_chunks_ == job.chunks) {
      { std::lock_guard<std::mutex> lock(mu_); }  // a caller between its check and its sleep misses nothing
      cv_done_.notify_all();
    }
  }
}

void ThreadPool::run_range(const Job& job, int64_t begin, int64_t end) {
  t_in_pool_task = true;
  try {
    (*job.fn)(begin, end);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_) error_ = std::current_exception();
    failed_ = true;
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
  Job job;
  job.fn = &fn;
  job.n = n;
  job.chunk = (n + max_chunks - 1) / max_chunks;
  job.chunks = (n + job.chunk - 1) / job.chunk;
  {
    std::lock_guard<std::mutex> lock(mu_);  // no worker is inside a job here (the last one withdrew below)
    job_ = job;
    next_chunk_ = 0;
    done_chunks_ = 0;
    failed_ = false;
    error_ = nullptr;
    ++generation_;
  }
  cv_work_.notify_all();
  run_chunks(job);  // the caller works too
  spin_until([&] { return done_chunks_.load() == job.chunks; });
  std::unique_lock<std::mutex> lock(mu_);
  cv_done_.wait(lock, [&] { return done_chunks_ == job.chunks; });
  // Withdraw the job once no worker is inside it: one that joined after the last chunk was claimed still has
  // to read the counter and leave before the next job resets it.
  while (active_ != 0) {
    lock.unlock();
    cpu_relax();
    lock.lock();
  }
  job_ = Job{};
  if (std::exception_ptr error = std::exchange(error_, nullptr)) std::rethrow_exception(error);
}

}  // namespace bloomery
