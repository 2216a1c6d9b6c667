// The collectives tensor-parallel ranks use (serving.md §1.3, R-5; design next-capabilities §2): all-reduce,
// all-gather, broadcast and barrier, on host memory. Implementations: ThreadGroup (ranks as threads of one
// process; CI and `bloomery run --tp N`) and SocketComm (a process per rank, --nodes). The models'
// collectives on device memory (NCCL, the one-GPU loopback) follow the same contract and meet through one of
// these (backend/cuda/collectives/device_collective.h).
//
// Contract shared by every implementation:
//  * Every rank calls the same collectives in the same order with the same sizes.
//  * all_reduce_sum adds the ranks' values in fixed rank order, ((v0 + v1) + v2) + …, so every rank gets the
//    same bytes on every run: indexers and routers fed with them select the same things on all ranks.
//  * Every call has a deadline (--collective-timeout-ms). A rank that does not arrive in time is named
//    (E_TP_TIMEOUT); once a group has failed, every rank's next or pending call throws E_TP_RANK_FAILED
//    naming the rank and what it missed, so no rank hangs.
//  * Ranks that meet at different collectives (kind or size) all fail with E_TP_MISMATCH instead of reading
//    each other's buffers.
//  * `what` names the collective in those messages ("layer 3 mixer all-reduce").
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace bloomery {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // data[n] ← Σ over ranks in rank order, on every rank.
  virtual void all_reduce_sum(float* data, size_t n, std::string_view what) = 0;
  // out[size · n]: rank r's in[n] at out[r · n], on every rank. `in` may not alias `out`.
  virtual void all_gather(const float* in, size_t n, float* out, std::string_view what) = 0;
  // root's bytes[n] copied to every rank's `data`. `idle`: the caller waits for work (a follower waiting for
  // rank 0's next step plan), which may take any time: no deadline for it, though a group failure still
  // wakes it. The root's side keeps its deadline, so a dead follower is still found.
  virtual void broadcast(void* data, size_t bytes, int root, std::string_view what, bool idle = false) = 0;
  // `deadline` overrides the collective timeout for this one call (0: the timeout), e.g. the end of loading
  // (serving.md: 120 s for load), where ranks legitimately differ by more than a step.
  virtual void barrier(std::string_view what, std::chrono::milliseconds deadline = {}) = 0;
  // Collectives this rank has entered so far (a follower tells a step refused before any collective, which
  // rank 0 refuses the same way, from one that failed halfway).
  virtual uint64_t collectives() const = 0;
  // This rank gives up (its own work threw): the others' pending and later calls fail at once, naming it.
  virtual void abort(std::string_view why) = 0;
};

}  // namespace bloomery
