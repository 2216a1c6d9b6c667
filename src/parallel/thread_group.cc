// ThreadGroup: every collective is two rendezvous around a read-only exchange. Each rank posts a pointer to
// its input; once all have arrived every rank reads all inputs (in rank order, so every rank computes the
// same bytes), then a second rendezvous guarantees nobody still reads an input before its owner overwrites
// it.
#include "parallel/thread_group.h"

#include <cstring>
#include <exception>
#include <thread>

#include "core/error.h"

namespace bloomery {

struct ThreadGroup::Shared {
  int size = 1;
  std::chrono::milliseconds timeout{10000};
  std::mutex m;
  std::condition_variable cv;
  uint64_t gen = 0;                // rendezvous completed so far
  int arrived = 0;                 // ranks waiting at rendezvous `gen`
  std::vector<uint64_t> reached;   // per rank: 1 + the last rendezvous it arrived at
  std::vector<const void*> slots;  // per rank: its input of the current collective
  std::vector<uint64_t> sigs;      // per rank: which collective it is in (kind and byte count)
  bool failed = false;
  ErrorInfo failure;  // the root cause, told to every rank that calls afterwards

  [[noreturn]] void throw_failed(int rank, std::string_view what) {
    raise("E_TP_RANK_FAILED", Where{"", "", std::string(what)}, "every rank alive at the collective",
          "the group failed first: " + format_error(failure), fmt::format("seen by rank {}", rank));
  }

  // Waits until every rank has arrived at the current rendezvous; throws on timeout or group failure.
  void rendezvous(int rank, std::string_view what, bool idle = false,
                  std::chrono::milliseconds deadline = {}) {
    const std::chrono::milliseconds wait = deadline.count() > 0 ? deadline : timeout;
    std::unique_lock lk(m);
    if (failed) throw_failed(rank, what);
    const uint64_t g = gen;
    reached[rank] = g + 1;
    if (++arrived == size) {
      // The last to arrive checks, before anyone can move on and post again, that all are in one collective.
      for (int r = 1; r < size; ++r)
        if (sigs[r] != sigs[0]) {
          failed = true;
          failure = ErrorInfo{"E_TP_MISMATCH",
                              Where{"", "", std::string(what)},
                              "every rank at the same collective with the same size",
                              fmt::format("rank {} at {:#x}, rank 0 at {:#x}", r, sigs[r], sigs[0]),
                              {}};
          cv.notify_all();
          throw Error(failure);
        }
      arrived = 0;
      ++gen;
      cv.notify_all();
      return;
    }
    const auto ready = [&] { return gen != g || failed; };
    bool done = true;
    if (idle)
      cv.wait(lk, ready);
    else
      done = cv.wait_for(lk, wait, ready);
    if (gen != g) return;  // completed (maybe just before another rank failed): this collective is good
    if (!done) {
      std::string missing;
      for (int r = 0; r < size; ++r)
        if (reached[r] != g + 1) missing += (missing.empty() ? "rank " : ", rank ") + std::to_string(r);
      failed = true;
      failure =
          ErrorInfo{"E_TP_TIMEOUT", Where{"", "", std::string(what)},
                    fmt::format("all {} ranks within {} ms", size, wait.count()), missing + " did not arrive",
                    fmt::format("seen by rank {} at collective #{}", rank, g)};
      cv.notify_all();
      throw Error(failure);
    }
    throw_failed(rank, what);
  }

  void abort(int rank, std::string_view why) {
    std::lock_guard lk(m);
    if (failed) return;
    failed = true;
    failure = ErrorInfo{"E_TP_RANK_ABORTED",
                        Where{"", "", "rank " + std::to_string(rank)},
                        "every rank running",
                        std::string(why),
                        {}};
    cv.notify_all();
  }

  void post(int rank, const void* p, uint64_t sig) {
    std::lock_guard lk(m);
    slots[rank] = p;
    sigs[rank] = sig;
  }
};

namespace {

class ThreadComm final : public Communicator {
 public:
  ThreadComm(std::shared_ptr<ThreadGroup::Shared> s, int rank) : s_(std::move(s)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return s_->size; }

  uint64_t collectives() const override { return calls_; }

  void all_reduce_sum(float* data, size_t n, std::string_view what) override {
    ++calls_;
    if (s_->size == 1) return;
    enter(data, 1, n * 4, what);
    tmp_.assign(static_cast<const float*>(s_->slots[0]), static_cast<const float*>(s_->slots[0]) + n);
    for (int r = 1; r < s_->size; ++r) {
      const float* v = static_cast<const float*>(s_->slots[r]);
      for (size_t i = 0; i < n; ++i) tmp_[i] += v[i];
    }
    s_->rendezvous(rank_, what);
    std::memcpy(data, tmp_.data(), n * sizeof(float));
  }

  void all_gather(const float* in, size_t n, float* out, std::string_view what) override {
    ++calls_;
    enter(in, 2, n * 4, what);
    for (int r = 0; r < s_->size; ++r) std::memcpy(out + size_t(r) * n, s_->slots[r], n * sizeof(float));
    s_->rendezvous(rank_, what);
  }

  void broadcast(void* data, size_t bytes, int root, std::string_view what, bool idle) override {
    ++calls_;
    s_->post(rank_, data, sig(3, bytes));
    s_->rendezvous(rank_, what, idle && rank_ != root);
    if (rank_ != root) std::memcpy(data, s_->slots[root], bytes);
    s_->rendezvous(rank_, what);
  }

  void barrier(std::string_view what, std::chrono::milliseconds deadline) override {
    ++calls_;
    s_->post(rank_, nullptr, sig(4, 0));
    s_->rendezvous(rank_, what, false, deadline);
  }
  void abort(std::string_view why) override { s_->abort(rank_, why); }

 private:
  static uint64_t sig(uint64_t kind, uint64_t bytes) { return kind << 56 | bytes; }
  // Post the input and meet the others (the rendezvous checks they are in the same collective).
  void enter(const void* p, uint64_t kind, uint64_t bytes, std::string_view what) {
    s_->post(rank_, p, sig(kind, bytes));
    s_->rendezvous(rank_, what);
  }

  std::shared_ptr<ThreadGroup::Shared> s_;
  int rank_;
  uint64_t calls_ = 0;
  std::vector<float> tmp_;
};

}  // namespace

ThreadGroup::ThreadGroup(int size, std::chrono::milliseconds timeout) : size_(size) {
  if (size < 1) raise("E_TP_SIZE", Where{"", "", "--tp"}, "at least 1 rank", std::to_string(size));
  shared_ = std::make_shared<Shared>();
  shared_->size = size;
  shared_->timeout = timeout;
  shared_->reached.assign(size, 0);
  shared_->slots.assign(size, nullptr);
  shared_->sigs.assign(size, 0);
  for (int r = 0; r < size; ++r) ranks_.push_back(std::make_unique<ThreadComm>(shared_, r));
}

ThreadGroup::~ThreadGroup() = default;

Communicator& ThreadGroup::rank(int r) {
  return *ranks_.at(r);
}

void ThreadGroup::run(const std::function<void(Communicator&)>& fn) {
  std::vector<std::exception_ptr> errors(size_);
  auto body = [&](int r) {
    try {
      fn(*ranks_[r]);
    } catch (const std::exception& e) {
      errors[r] = std::current_exception();
      ranks_[r]->abort(e.what());
    } catch (...) {
      errors[r] = std::current_exception();
      ranks_[r]->abort("an unknown exception");
    }
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < size_; ++r) threads.emplace_back(body, r);
  body(0);
  for (std::thread& t : threads) t.join();
  // The root cause first: a rank's own error, not the E_TP_RANK_FAILED it caused elsewhere.
  std::exception_ptr first, secondary;
  for (const std::exception_ptr& e : errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const Error& err) {
      if (err.id() == "E_TP_RANK_FAILED") {
        if (!secondary) secondary = e;
        continue;
      }
      if (!first) first = e;
    } catch (...) {
      if (!first) first = e;
    }
  }
  if (first) std::rethrow_exception(first);
  if (secondary) std::rethrow_exception(secondary);
}

}  // namespace bloomery
