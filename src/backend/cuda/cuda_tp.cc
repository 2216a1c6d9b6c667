// CudaBackend as a tensor-parallel rank: which device collective its sums and gathers take, and the calls
// themselves. The choice is made from a map of where every rank is (host, process, device), which every rank
// builds the same way, so all ranks take the same kind.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace bloomery::cuda {
namespace {

struct Place {
  char host[64] = {};
  int64_t pid = 0;
  int64_t device = 0;
};

bool same_gpu(const Place& a, const Place& b) {
  return std::strncmp(a.host, b.host, sizeof(a.host)) == 0 && a.device == b.device;
}
bool same_process(const Place& a, const Place& b) {
  return std::strncmp(a.host, b.host, sizeof(a.host)) == 0 && a.pid == b.pid;
}

}  // namespace

std::string CudaBackend::join_tp(Communicator& comm, std::chrono::milliseconds collective_timeout) {
  BLOOMERY_CUDA_CHECK(cudaSetDevice(device_),
                      "tensor-parallel rank: select device " + std::to_string(device_));
  // Ranks of one process run side by side: each needs its own stream (the legacy one is the process's).
  if (!stream_) BLOOMERY_CUDA_CHECK(cudaStreamCreate(&stream_), "tensor-parallel rank: create its stream");
  const int size = comm.size(), rank = comm.rank();
  std::vector<Place> at(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    Place p;
    if (r == rank) {
      gethostname(p.host, sizeof(p.host) - 1);
      p.pid = int64_t(getpid());
      p.device = device_;
    }
    comm.broadcast(&p, sizeof(p), r, "tensor-parallel device map");
    at[size_t(r)] = p;
  }
  bool shared_gpu = false, one_gpu = true, one_process = true;
  std::pair<int, int> sharing{-1, -1};
  for (int a = 0; a < size; ++a) {
    one_gpu = one_gpu && same_gpu(at[size_t(a)], at[0]);
    one_process = one_process && same_process(at[size_t(a)], at[0]);
    for (int b = a + 1; b < size; ++b)
      if (!shared_gpu && same_gpu(at[size_t(a)], at[size_t(b)])) {
        shared_gpu = true;
        sharing = {a, b};
      }
  }
  const char* env = std::getenv("BLOOMERY_TP_COLLECTIVE");
  std::string want = env && *env ? env : "auto";
  if (want != "auto" && want != "nccl" && want != "loopback" && want != "host")
    raise("E_TP_COLLECTIVE", Where{"", "", "BLOOMERY_TP_COLLECTIVE"}, "auto, nccl, loopback or host", want);
  if (want == "auto") want = !shared_gpu ? "nccl" : (one_gpu && one_process) ? "loopback" : "host";
  if (want == "nccl" && shared_gpu)
    raise("E_TP_COLLECTIVE", Where{"", "", "BLOOMERY_TP_COLLECTIVE"}, "every rank on its own GPU (NCCL)",
          fmt::format("ranks {} and {} share GPU {} of {}", sharing.first, sharing.second,
                      at[size_t(sharing.first)].device, at[size_t(sharing.first)].host));
  if (want == "loopback" && !(one_gpu && one_process))
    raise("E_TP_COLLECTIVE", Where{"", "", "BLOOMERY_TP_COLLECTIVE"},
          "every rank a thread of this process on one GPU (the loopback)",
          "ranks on several GPUs or processes");
  if (want == "nccl") {
    collective_ = make_nccl_collective(comm, device_, collective_timeout);
    return fmt::format("on the card through NCCL (GPU {} of {})", device_, at[size_t(rank)].host);
  }
  if (want == "loopback") {
    collective_ = make_loopback_collective(comm, device_);
    return fmt::format("on the card through the one-GPU loopback ({} ranks on GPU {})", size, device_);
  }
  return "through host memory (ranks share a GPU across processes; NCCL needs one GPU per rank)";
}

void CudaBackend::tp_all_reduce(Tensor& t, Communicator& comm, std::string_view what) {
  if (!collective_) return Backend::tp_all_reduce(t, comm, what);
  graphs_.not_capturable("tensor-parallel all-reduce");
  collective_->all_reduce_sum(t.f32(), size_t(t.numel()), stream_, what);
}

Tensor CudaBackend::tp_gather_cols(const Tensor& local, Communicator& comm, std::string_view what) {
  if (!collective_) return Backend::tp_gather_cols(local, comm, what);
  graphs_.not_capturable("tensor-parallel all-gather");
  const int64_t R = local.rows(), n = local.cols(), size = comm.size();
  Tensor all = alloc({size * R, n});  // rank r's [R, n] block at rows [r·R, (r+1)·R)
  collective_->all_gather(local.f32(), size_t(R * n), all.out_f32({&local}), stream_, what);
  Tensor out = alloc({R, size * n});
  float* o = out.out_f32();
  for (int64_t r = 0; r < size; ++r)
    BLOOMERY_CUDA_CHECK(cudaMemcpy2DAsync(o + r * n, size_t(size * n) * sizeof(float), all.f32() + r * R * n,
                                          size_t(n) * sizeof(float), size_t(n) * sizeof(float), size_t(R),
                                          cudaMemcpyDeviceToDevice, stream_),
                        fmt::format("{}: rank {}'s columns", what, r));
  return out;
}

}  // namespace bloomery::cuda
