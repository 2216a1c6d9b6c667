// NCCL between tensor-parallel ranks on distinct GPUs (one process per GPU, or several GPUs' ranks as
// threads of one). NCCL's own bootstrap: rank 0 makes the unique id and the host communicator (threads or
// the --nodes TCP star) hands it to every rank. libnccl.so.2 is opened at run time, not linked: a machine
// without NCCL still runs one GPU, and TP over GPUs there is refused by name (E_TP_NCCL).
//
// Order of the sum: NCCL's ring adds each element's partials in an order fixed for the run, and every rank
// gets the same bytes (the reduce-scatter owner's sum, then gathered); for two ranks it is v0 + v1 exactly,
// the CPU ranks' bytes. Waits: a stream that NCCL holds longer than the collective deadline, or an
// asynchronous NCCL error (a peer gone), aborts the communicator and is named instead of hanging the host.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include "backend/cuda/collectives/device_collective.h"
#include "core/error.h"

#ifdef BLOOMERY_HAVE_NCCL_H
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "backend/cuda/cuda_check.h"
#include "parallel/communicator.h"

namespace bloomery::cuda {
namespace {

// The NCCL entry points bloomery calls, looked up once.
struct NcclApi {
  ncclResult_t (*get_version)(int*) = nullptr;
  ncclResult_t (*get_unique_id)(ncclUniqueId*) = nullptr;
  ncclResult_t (*comm_init_rank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*comm_destroy)(ncclComm_t) = nullptr;
  ncclResult_t (*comm_abort)(ncclComm_t) = nullptr;
  ncclResult_t (*comm_get_async_error)(ncclComm_t, ncclResult_t*) = nullptr;
  ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                             cudaStream_t) = nullptr;
  ncclResult_t (*all_gather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) = nullptr;
  const char* (*get_error_string)(ncclResult_t) = nullptr;
  std::string error;  // why it could not be opened ("" = ready)
};

const NcclApi& nccl() {
  static NcclApi api;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = dlerror();
      api.error = e ? e : "libnccl.so.2 not found";
      return;
    }
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      if (!fn && api.error.empty()) api.error = fmt::format("libnccl.so.2 has no {}", name);
    };
    sym(api.get_version, "ncclGetVersion");
    sym(api.get_unique_id, "ncclGetUniqueId");
    sym(api.comm_init_rank, "ncclCommInitRank");
    sym(api.comm_destroy, "ncclCommDestroy");
    sym(api.comm_abort, "ncclCommAbort");
    sym(api.comm_get_async_error, "ncclCommGetAsyncError");
    sym(api.all_reduce, "ncclAllReduce");
    sym(api.all_gather, "ncclAllGather");
    sym(api.get_error_string, "ncclGetErrorString");
  });
  return api;
}

[[noreturn]] void nccl_fail(std::string_view what, ncclResult_t r) {
  raise("E_TP_NCCL", Where{"", "", std::string(what)}, "ncclSuccess", nccl().get_error_string(r));
}

void check(ncclResult_t r, std::string_view what) {
  if (r != ncclSuccess) nccl_fail(what, r);
}

class NcclCollective final : public DeviceCollective {
 public:
  NcclCollective(Communicator& host, int device, std::chrono::milliseconds timeout)
      : rank_(host.rank()), size_(host.size()), timeout_(timeout) {
    const NcclApi& api = nccl();
    // Every rank says whether it has NCCL before any waits inside NCCL's init for the others.
    float have = api.error.empty() ? 1.0f : 0.0f;
    host.all_reduce_sum(&have, 1, "NCCL available on every rank");
    if (!api.error.empty())
      raise("E_TP_NCCL", Where{"", "", "--tp"}, "libnccl.so.2 (NCCL) for ranks on separate GPUs", api.error);
    if (have != float(size_))
      raise("E_TP_NCCL", Where{"", "", "--tp"}, "NCCL on every rank",
            fmt::format("{} of {} ranks without it", size_ - int(have), size_));
    BLOOMERY_CUDA_CHECK(cudaSetDevice(device), "NCCL rank: select device " + std::to_string(device));
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (rank_ == 0) check(api.get_unique_id(&id), "ncclGetUniqueId");
    host.broadcast(&id, sizeof(id), 0, "NCCL unique id");
    check(api.comm_init_rank(&comm_, size_, id, rank_), "ncclCommInitRank");
    BLOOMERY_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "NCCL wait event");
  }
  ~NcclCollective() override {
    if (done_) cudaEventDestroy(done_);
    if (comm_) (aborted_ ? void() : void(nccl().comm_destroy(comm_)));
  }

  std::string_view kind() const override { return "nccl"; }

  void all_reduce_sum(float* data, size_t n, cudaStream_t s, std::string_view what) override {
    live(what);
    check(nccl().all_reduce(data, data, n, ncclFloat32, ncclSum, comm_, s), what);
  }
  void all_gather(const float* in, size_t n, float* out, cudaStream_t s, std::string_view what) override {
    live(what);
    check(nccl().all_gather(in, out, n, ncclFloat32, comm_, s), what);
  }

  void wait(cudaStream_t s, std::string_view what) override {
    BLOOMERY_CUDA_CHECK(cudaEventRecord(done_, s), "NCCL wait event");
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (;;) {
      const cudaError_t q = cudaEventQuery(done_);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) BLOOMERY_CUDA_CHECK(q, fmt::format("wait for {}", what));
      ncclResult_t async = ncclSuccess;
      check(nccl().comm_get_async_error(comm_, &async), "ncclCommGetAsyncError");
      if (async != ncclSuccess && async != ncclInProgress) {
        abort_comm();
        raise("E_TP_RANK_FAILED", Where{"", "", std::string(what)}, "every rank's collectives on the card",
              fmt::format("NCCL: {} (seen by rank {})", nccl().get_error_string(async), rank_));
      }
      if (std::chrono::steady_clock::now() > deadline) {
        abort_comm();
        raise("E_TP_TIMEOUT", Where{"", "", std::string(what)},
              fmt::format("the card's collectives within {} ms", timeout_.count()),
              fmt::format("a rank did not arrive (seen by rank {})", rank_));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

 private:
  void live(std::string_view what) const {
    if (aborted_)
      raise("E_TP_RANK_FAILED", Where{"", "", std::string(what)}, "a live group", "it failed before");
  }
  void abort_comm() {
    if (aborted_) return;
    aborted_ = true;
    nccl().comm_abort(comm_);
  }

  int rank_, size_;
  std::chrono::milliseconds timeout_;
  ncclComm_t comm_ = nullptr;
  cudaEvent_t done_ = nullptr;
  bool aborted_ = false;
};

}  // namespace

std::unique_ptr<DeviceCollective> make_nccl_collective(Communicator& host, int device,
                                                       std::chrono::milliseconds timeout) {
  return std::make_unique<NcclCollective>(host, device, timeout);
}

}  // namespace bloomery::cuda

#else  // built without nccl.h

namespace bloomery::cuda {

std::unique_ptr<DeviceCollective> make_nccl_collective(Communicator&, int, std::chrono::milliseconds) {
  raise("E_TP_NCCL", Where{"", "", "--tp"}, "a build with NCCL's header (nccl.h in the CUDA toolkit)",
        "this binary was built without it");
}

}  // namespace bloomery::cuda

#endif
