// Collectives over device memory between tensor-parallel CUDA ranks (issue 16; parallel/communicator.h is the
// host-memory contract these follow). Two kinds, chosen by CudaBackend::join_tp from where the ranks are:
//  * NCCL between ranks on distinct GPUs, in one process or many (nccl_collective.cc; libnccl is opened at
//    run time, so a build or a machine without NCCL still serves one GPU);
//  * the loopback between ranks of one process that share one GPU (loopback_collective.cc): NCCL refuses two
//    ranks on one device, and the loopback is how TP is tested on a one-GPU machine. It sums in device
//    memory in rank order, so its bytes equal the CPU ranks' ((v0 + v1) + v2) + ….
// Every call is queued on the caller's stream; the host does not wait for the data.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace bloomery {
class Communicator;
}

namespace bloomery::cuda {

class DeviceCollective {
 public:
  virtual ~DeviceCollective() = default;
  virtual std::string_view kind() const = 0;  // "nccl", "loopback"
  // data[n] ← Σ over ranks, on every rank, on stream s.
  virtual void all_reduce_sum(float* data, size_t n, cudaStream_t s, std::string_view what) = 0;
  // out[size · n]: rank r's in[n] at out[r · n]. `in` may not alias `out`.
  virtual void all_gather(const float* in, size_t n, float* out, cudaStream_t s, std::string_view what) = 0;
  // Waits until stream s has run everything queued (the host is about to read device data). A collective
  // whose peer died or hangs is named (E_TP_RANK_FAILED / E_TP_TIMEOUT) instead of blocking forever.
  virtual void wait(cudaStream_t s, std::string_view what) = 0;
};

// Every rank of `host` calls these together (they meet through `host`). `device`: this rank's GPU.
// Throws E_TP_NCCL naming what failed (library missing, init refused).
std::unique_ptr<DeviceCollective> make_nccl_collective(Communicator& host, int device,
                                                       std::chrono::milliseconds timeout);
// All ranks in this process on one device.
std::unique_ptr<DeviceCollective> make_loopback_collective(Communicator& host, int device);

// Where the card's ranks' sums are added: out[i] = ((in[0][i] + in[1][i]) + in[2][i]) + … (loopback).
constexpr int kMaxLoopbackRanks = 8;
struct RankInputs {
  const float* p[kMaxLoopbackRanks];
};
void launch_rank_sum(float* out, RankInputs in, int ranks, size_t n, cudaStream_t s);

}  // namespace bloomery::cuda
