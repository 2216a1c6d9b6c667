// The one-GPU loopback: tensor-parallel ranks that are threads of one process on one device. A collective
// publishes each rank's buffer and an event recorded after its partial, meets the other ranks on the host
// (the host communicator's barrier, which carries the deadline and names a late rank), makes its stream
// wait for the others' events, and reads their buffers directly (one device, one address space). A second
// meeting keeps every buffer unchanged until every rank has read it. No data crosses to the host.
#include <cuda_runtime.h>

#include <atomic>
#include <map>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "backend/cuda/collectives/device_collective.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "parallel/communicator.h"

namespace bloomery::cuda {
namespace {

// What the ranks of one group share: per rank, the buffer of the current collective and two events.
struct Hub {
  explicit Hub(int size) : buf(size, nullptr), ready(size, nullptr), read(size, nullptr) {}
  std::vector<const float*> buf;
  std::vector<cudaEvent_t> ready, read;  // recorded by their rank; waited on by the others
};

// Rank 0 makes the hub and passes its number to the others through the host communicator.
std::mutex g_hubs_mu;
std::map<uint64_t, std::shared_ptr<Hub>> g_hubs;
std::atomic<uint64_t> g_next_hub{1};

class LoopbackCollective final : public DeviceCollective {
 public:
  LoopbackCollective(Communicator& host, int device) : host_(host), rank_(host.rank()), size_(host.size()) {
    if (size_ > kMaxLoopbackRanks)
      raise("E_TP_SIZE", Where{"", "", "--tp"}, fmt::format("at most {} ranks on one GPU", kMaxLoopbackRanks),
            std::to_string(size_));
    BLOOMERY_CUDA_CHECK(cudaSetDevice(device), "tensor-parallel loopback: select device");
    uint64_t id = 0;
    if (rank_ == 0) {
      id = g_next_hub++;
      std::lock_guard<std::mutex> lock(g_hubs_mu);
      g_hubs[id] = std::make_shared<Hub>(size_);
    }
    host_.broadcast(&id, sizeof(id), 0, "tensor-parallel loopback setup");
    {
      std::lock_guard<std::mutex> lock(g_hubs_mu);
      hub_ = g_hubs.at(id);
    }
    BLOOMERY_CUDA_CHECK(cudaEventCreateWithFlags(&hub_->ready[rank_], cudaEventDisableTiming),
                        "tensor-parallel loopback event");
    BLOOMERY_CUDA_CHECK(cudaEventCreateWithFlags(&hub_->read[rank_], cudaEventDisableTiming),
                        "tensor-parallel loopback event");
    host_.barrier("tensor-parallel loopback setup");  // every rank holds the hub and its events
    if (rank_ == 0) {
      std::lock_guard<std::mutex> lock(g_hubs_mu);
      g_hubs.erase(id);
    }
  }
  ~LoopbackCollective() override {
    cudaEventDestroy(hub_->ready[rank_]);
    cudaEventDestroy(hub_->read[rank_]);
    if (scratch_) cudaFree(scratch_);
  }

  std::string_view kind() const override { return "loopback"; }

  void all_reduce_sum(float* data, size_t n, cudaStream_t s, std::string_view what) override {
    publish(data, s, what);
    RankInputs in{};
    for (int r = 0; r < size_; ++r) in.p[r] = hub_->buf[r];
    float* sum = scratch(n);
    launch_rank_sum(sum, in, size_, n, s);
    release(s, what);  // every rank has read `data`: it may now take the sum
    BLOOMERY_CUDA_CHECK(cudaMemcpyAsync(data, sum, n * sizeof(float), cudaMemcpyDeviceToDevice, s),
                        fmt::format("tensor-parallel loopback: {}", what));
  }

  void all_gather(const float* in, size_t n, float* out, cudaStream_t s, std::string_view what) override {
    publish(in, s, what);
    for (int r = 0; r < size_; ++r)
      BLOOMERY_CUDA_CHECK(
          cudaMemcpyAsync(out + size_t(r) * n, hub_->buf[r], n * sizeof(float), cudaMemcpyDeviceToDevice, s),
          fmt::format("tensor-parallel loopback: {}", what));
    release(s, what);
  }

  void wait(cudaStream_t s, std::string_view what) override {
    BLOOMERY_CUDA_CHECK(cudaStreamSynchronize(s), fmt::format("tensor-parallel loopback: {}", what));
  }

 private:
  // This rank's buffer is ready once its stream reaches here; after the meeting, wait for everyone's.
  void publish(const float* buf, cudaStream_t s, std::string_view what) {
    hub_->buf[rank_] = buf;
    BLOOMERY_CUDA_CHECK(cudaEventRecord(hub_->ready[rank_], s), "tensor-parallel loopback event");
    host_.barrier(what);
    for (int r = 0; r < size_; ++r)
      if (r != rank_)
        BLOOMERY_CUDA_CHECK(cudaStreamWaitEvent(s, hub_->ready[r], 0), "tensor-parallel loopback wait");
  }
  // This rank has read everyone's buffers once its stream reaches here; after the meeting, nobody's buffer
  // changes before every rank's reads ran.
  void release(cudaStream_t s, std::string_view what) {
    BLOOMERY_CUDA_CHECK(cudaEventRecord(hub_->read[rank_], s), "tensor-parallel loopback event");
    host_.barrier(what);
    for (int r = 0; r < size_; ++r)
      if (r != rank_)
        BLOOMERY_CUDA_CHECK(cudaStreamWaitEvent(s, hub_->read[r], 0), "tensor-parallel loopback wait");
  }
  float* scratch(size_t n) {
    if (n > scratch_n_) {
      if (scratch_) BLOOMERY_CUDA_CHECK(cudaFree(scratch_), "tensor-parallel loopback scratch");
      BLOOMERY_CUDA_CHECK(cudaMalloc(&scratch_, n * sizeof(float)), "tensor-parallel loopback scratch");
      scratch_n_ = n;
    }
    return scratch_;
  }

  Communicator& host_;
  int rank_, size_;
  std::shared_ptr<Hub> hub_;
  float* scratch_ = nullptr;
  size_t scratch_n_ = 0;
};

}  // namespace

std::unique_ptr<DeviceCollective> make_loopback_collective(Communicator& host, int device) {
  return std::make_unique<LoopbackCollective>(host, device);
}

}  // namespace bloomery::cuda
