// Tensor-parallel ranks in separate processes or on separate hosts, over TCP (serving.md §1.3 `--nodes
// host:port,… --node-rank R`). Rank 0 is the coordinator: it listens on the first address, every other rank
// connects to it and says its rank. Collectives are a star through rank 0, which adds the ranks' values in
// rank order, so every rank gets the same bytes (communicator.h). This is the control plane and the CPU
// ranks' data plane; CUDA ranks would pass NCCL's unique id over it and move tensors with NCCL.
//
// Failures: a peer that closes its connection (a dead process) is named at once (E_TP_RANK_FAILED); a
// peer later than the deadline is named (E_TP_TIMEOUT); a rank that gives up tells the others why
// (E_TP_RANK_ABORTED), so no rank waits forever.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "parallel/communicator.h"

namespace bloomery {

struct NodeAddress {
  std::string host;
  int port = 0;
};
// "host:port,host:port,…" (at least one); E_TP_NODES naming the bad entry.
std::vector<NodeAddress> parse_nodes(std::string_view list);

class SocketComm final : public Communicator {
 public:
  // Rank 0 listens on `coordinator` and waits for size − 1 ranks; rank r > 0 connects (retrying until
  // `connect_timeout`). Throws E_TP_CONNECT naming the address and what failed.
  static std::unique_ptr<SocketComm> connect(int rank, int size, const NodeAddress& coordinator,
                                             std::chrono::milliseconds collective_timeout,
                                             std::chrono::milliseconds connect_timeout);
  ~SocketComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  uint64_t collectives() const override { return calls_; }
  void all_reduce_sum(float* data, size_t n, std::string_view what) override;
  void all_gather(const float* in, size_t n, float* out, std::string_view what) override;
  void broadcast(void* data, size_t bytes, int root, std::string_view what, bool idle = false) override;
  void barrier(std::string_view what, std::chrono::milliseconds deadline = {}) override;
  void abort(std::string_view why) override;

 private:
  SocketComm(int rank, int size, std::chrono::milliseconds timeout)
      : rank_(rank), size_(size), timeout_(timeout) {}
  struct Header {
    uint32_t op = 0;  // collective kind, or kAbort
    uint32_t pad = 0;
    uint64_t bytes = 0;
  };
  // Rank 0: read one message of kind `op` and `bytes` from rank r; others: from rank 0.
  void recv_msg(int peer_fd, int peer_rank, uint32_t op, void* data, uint64_t bytes, std::string_view what,
                bool idle, std::chrono::milliseconds deadline = {});
  void send_msg(int peer_fd, int peer_rank, uint32_t op, const void* data, uint64_t bytes,
                std::string_view what);
  int fd_of(int r) const { return rank_ == 0 ? fds_[r] : fds_[0]; }
  [[noreturn]] void fail(std::string id, std::string_view what, std::string expected, std::string found);

  int rank_, size_;
  std::chrono::milliseconds timeout_;
  std::vector<int> fds_;  // rank 0: one per rank (fds_[0] unused); others: fds_[0] = rank 0
  uint64_t calls_ = 0;
  bool failed_ = false;
  std::vector<uint8_t> buf_;
};

}  // namespace bloomery
