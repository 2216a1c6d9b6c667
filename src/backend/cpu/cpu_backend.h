// The CPU backend: f32 reference ops on host memory, weights decoded to f32 at load, loops spread over a
// thread pool. The generic ops live in cpu_*.cc (G1); the family ops come from CpuFamilyOps (G2).
#pragma once

#include <memory>

#include "backend/backend.h"
#include "backend/cpu/cpu_family_ops.h"
#include "core/thread_pool.h"

namespace bloomery::cpu {

// Owns the pool; listed first among the bases so the pool exists before CpuFamilyOps takes a reference to it.
struct PoolHolder {
  explicit PoolHolder(int threads) : owned_pool_(std::make_unique<ThreadPool>(threads)) {}
  std::unique_ptr<ThreadPool> owned_pool_;
};

class CpuBackend final : private PoolHolder, public Backend, public CpuFamilyOps {
 public:
  // threads <= 0: every hardware core.
  explicit CpuBackend(int threads = 0);

  std::string_view name() const override { return "cpu"; }
  int threads() const override { return owned_pool_->size(); }
  ThreadPool& thread_pool() { return *owned_pool_; }

  Tensor alloc(std::vector<int64_t> shape, ElemType type = ElemType::F32) override;
  Tensor upload(std::span<const float> data, std::vector<int64_t> shape) override;
  std::vector<float> download(const Tensor& t) override;
  void copy(Tensor& dst, const Tensor& src) override;
  void fill(Tensor& t, float value) override;
  std::string join_tp(Communicator&, std::chrono::milliseconds) override { return "in host memory"; }
  // Host memory: the collective reduces the tensor itself.
  void tp_all_reduce(Tensor& t, Communicator& comm, std::string_view what) override {
    comm.all_reduce_sum(t.f32(), size_t(t.numel()), what);
  }

  Weight load_weight(const TensorSource& source, const WeightRecord& record, std::vector<int64_t> shape,
                     Warnings& warnings) override;
  Weight stream_weight(const TensorSource& source, const WeightRecord& record, Warnings& warnings) override;
  Weight upload_weight(std::string name, std::span<const float> data, std::vector<int64_t> shape) override;

  void matmul(Tensor& out, const Tensor& x, const Weight& w) override;
  void matmul_rows(Tensor& out, const Tensor& x, const Weight& w, int64_t row0, int64_t n) override;
  void gather_rows(Tensor& out, const Weight& table, std::span<const int64_t> ids) override;

  void rms_norm(Tensor& out, const Tensor& x, const Weight* w, float eps, NormKind kind,
                int64_t group = 0) override;
  void rms_norm_gated(Tensor& out, const Tensor& x, const Tensor& z, const Weight& w, float eps,
                      Act act) override;
  void layer_norm(Tensor& out, const Tensor& x, const Weight& w, const Weight& b, float eps) override;

  void add(Tensor& out, const Tensor& a, const Tensor& b) override;
  void add_scaled(Tensor& out, const Tensor& a, const Tensor& b, float s) override;
  void mul(Tensor& out, const Tensor& a, const Tensor& b) override;
  void scale(Tensor& out, const Tensor& x, float s) override;
  void activate(Tensor& out, const Tensor& x, Act act) override;
  void sigmoid_mul(Tensor& out, const Tensor& x, const Tensor& gate) override;
  void scale_rows(Tensor& out, const Tensor& x, const Tensor& s) override;
  void swiglu(Tensor& out, const Tensor& gate, const Tensor& up, float limit = 0.0f) override;
  void take_cols(Tensor& out, const Tensor& x, int64_t c0) override;
  void put_cols(Tensor& dst, const Tensor& src, int64_t c0) override;

  void rope(Tensor& x, std::span<const int64_t> pos, const RopeSpec& rope) override;
  void attention(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, int64_t q0, float scale,
                 const Tensor* allowed = nullptr) override;

  void route_softmax_topk(Tensor& ids, Tensor& weights, const Tensor& logits, const RouterSpec& r) override;
  void moe_experts(Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                   std::span<const ExpertWeights> experts, float swiglu_limit = 0.0f) override;

  void causal_conv1d(Tensor& out, const Tensor& x, const Weight& w, Tensor& state, int dilation,
                     Act act) override;
  void gdn_gates(Tensor& g, Tensor& beta, const Tensor& a, const Tensor& b, const Weight& A_log,
                 const Weight& dt_bias) override;
  void gated_delta_rule(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                        const Tensor& beta, Tensor& state, bool l2norm_qk, bool chunked) override;
};

// Scalar activation functions shared by the CPU ops (f32, as torch computes them).
float act_apply(Act act, float x);

// y[n] = Σ_k x[k] · w[n, k] for one input row (the matmul kernel, also used by expert and gather paths).
void dot_rows(const float* x, const float* w, int64_t K, int64_t n0, int64_t n1, float* y);

}  // namespace bloomery::cpu

namespace bloomery {
// The CPU backend with `threads` workers (<= 0: all cores).
std::unique_ptr<Backend> make_cpu_backend(int threads = 0);
}  // namespace bloomery
