// In-process tensor-parallel ranks: `size` Communicators over shared host memory, one per thread. CI runs the
// TP forward with it (CPU ranks); `bloomery run --tp N` on the CPU too. The deadline and failure rules are
// communicator.h's.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace bloomery {

class ThreadGroup {
 public:
  ThreadGroup(int size, std::chrono::milliseconds timeout);
  ~ThreadGroup();
  int size() const { return size_; }
  Communicator& rank(int r);

  // Runs fn(comm) for every rank on its own thread (rank 0 on the calling thread) and joins them. A rank that
  // throws aborts the group; the first error is rethrown: the root cause (a rank's own error or the timeout)
  // before the E_TP_RANK_FAILED of the ranks it took down.
  void run(const std::function<void(Communicator&)>& fn);

  struct Shared;  // the rendezvous state (thread_group.cc)

 private:
  int size_;
  std::shared_ptr<Shared> shared_;
  std::vector<std::unique_ptr<Communicator>> ranks_;
};

}  // namespace bloomery
