// The CUDA backend: the generic ops of backend.h on device memory, weights kept on the card in their stored
// formats (NVFP4 nibbles + E4M3 scales + f32 global, MXFP8 bytes + E8M0, FP8 blocks with an f32 grid, BF16).
// Family ops: the qwen4_exp ones are in family/qwen4_ops.cc, glm5_next's (mHC, KDA, DSA indexer, NoPE MLA,
// sigmoid router) in family/glm_ops.cc.
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "backend/backend.h"
#include "backend/cuda/collectives/device_collective.h"
#include "backend/cuda/device_pool.h"
#include "backend/cuda/env_switch.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/profile/op_times.h"
#include "backend/cuda/step_graph.h"
#include "formats/decode.h"

namespace bloomery::cuda {

// A weight as the card holds it: the stored-format view the kernels read, the buffers that own its bytes,
// and (for small dense parameters: norms, conv kernels, gate vectors) an f32 copy in Weight::dense().
struct CudaWeight {
  DeviceWeight dw;
  std::vector<std::shared_ptr<void>> buffers;
};

// A device buffer that only grows (per-call scratch: ids, positions, expert activations).
// Inside a graph step the old buffer is freed only after the step ran (captured nodes still point at it).
class Scratch {
 public:
  void* get(size_t bytes);
  ~Scratch();
  void set_graphs(StepGraphs* g) { graphs_ = g; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  StepGraphs* graphs_ = nullptr;
};

class CudaBackend final : public Backend {
 public:
  // device: CUDA device ordinal. Throws E_CUDA when it cannot be used.
  explicit CudaBackend(int device = 0);
  ~CudaBackend() override;

  std::string_view name() const override { return "cuda"; }
  int threads() const override { return 1; }
  cudaStream_t stream() const { return stream_; }
  // Waits for every queued kernel (tests, timing).
  void synchronize();
  // Free and total device memory (cudaMemGetInfo).
  MemoryInfo memory_info() const override;
  // The activation allocator (cached blocks count as free for a plan made after warm-up).
  DevicePool& pool() { return pool_; }

  Tensor alloc(std::vector<int64_t> shape, ElemType type = ElemType::F32) override;
  Tensor upload(std::span<const float> data, std::vector<int64_t> shape) override;
  std::vector<float> download(const Tensor& t) override;
  void copy(Tensor& dst, const Tensor& src) override;
  void fill(Tensor& t, float value) override;

  // alloc's zero fill: deferred to the first access that can see it (default), or a memset at every alloc
  // (BLOOMERY_CUDA_EAGER_ZERO=1 at start, or between steps for the bench's A/B).
  void set_zero_fill_eager(bool eager) { zero_fill_eager_ = eager; }

  // Per-op device times (BLOOMERY_CUDA_OP_TIMES=1, eager steps only), resolved at synchronize().
  OpTimes& op_times() { return op_times_; }

  // Graph mode (step_graph.h): as BLOOMERY_CUDA_GRAPHS asked at construction (on when unset).
  void begin_step(uint64_t key) override;
  void end_step() override;
  void step_layer_done() override { graphs_.layer_done(stream_); }
  std::string decode_steps() const override;
  bool rounds_prompt_activations() const override;
  void abort_step() noexcept override;
  StepGraphs& step_graphs() { return graphs_; }
  // Graph mode on or off between steps (bench A/B); on needs a backend built in graph mode (its stream).
  void set_step_graphs(bool on);

  Weight load_weight(const TensorSource& source, const WeightRecord& record, std::vector<int64_t> shape,
                     Warnings& warnings) override;
  Weight stream_weight(const TensorSource& source, const WeightRecord& record, Warnings& warnings) override;
  Weight upload_weight(std::string name, std::span<const float> data, std::vector<int64_t> shape) override;

  void matmul(Tensor& out, const Tensor& x, const Weight& w) override;
  void matmul_rows(Tensor& out, const Tensor& x, const Weight& w, int64_t row0, int64_t n) override;
  // The epilogue in the GEMV's store (one kernel), or after the GEMM; off: the separate ops (bench A/B,
  // BLOOMERY_CUDA_FUSE_EPILOGUE=0).
  void matmul_epilogue(Tensor& out, const Tensor& x, const Weight& w, const Backend::Epilogue& e) override;
  void set_fuse_epilogues(bool on) { fuse_epilogues_ = on; }
  void matmul_group(std::span<const Backend::Product> products, const Tensor& x) override;
  void set_group_products(bool on) { group_products_ = on; }
  // The fused block ops: split_cols in one launch, hc_inject_norm in one pass, a product's row scale and
  // accumulating store in the decode GEMV's store. Off: the Backend defaults (separate ops; bench --ab
  // block-ops, BLOOMERY_CUDA_BLOCK_OPS=0).
  void set_block_ops(bool on) { block_ops_ = on; }
  // GDN after its conv in one pass (gdn_step_gated), under the block ops; off: the separate ops (bench --ab
  // gdn-gated, BLOOMERY_CUDA_GDN_GATED=0).
  void set_gdn_step_gated(bool on) { gdn_step_gated_ = on; }
  void gather_rows(Tensor& out, const Weight& table, std::span<const int64_t> ids) override;
  void prefetch_rows(const Weight& table, std::span<const int64_t> ids) override;

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
  void split_cols(std::span<Tensor* const> outs, const Tensor& x) override;
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
  void gdn_step_gated(Tensor& out, const Tensor& c, const Tensor& z, const Tensor& a, const Tensor& b,
                      const Weight& A_log, const Weight& dt_bias, const Weight& norm, Tensor& state,
                      int64_t Hk, int64_t dk, float eps, Act gate_act) override;

  // qwen4_exp family ops (family/qwen4_ops.cc).
  void hc_read_mix(Tensor& u, const Tensor& m, const Tensor& xn, int n) override;
  void hc_inject(Tensor& X, const Tensor& y, const Tensor& inj) override;
  void hc_inject_norm(Tensor& X, const Tensor& y, const Tensor& inj, Tensor& xn, const Weight* w, float eps,
                      NormKind kind, int64_t group) override;
  void hc_up_read_mix(Tensor& u, const Tensor& a, const Weight& up, const Tensor& xn, int n) override;
  void ple_gate(Tensor& G, const Tensor& kn, const Tensor& qn, const Tensor& v) override;
  void qsa_index_append(Tensor& raw, Tensor& blocks, const Tensor& kraw, int64_t pos0, const Weight& k_norm,
                        const QsaIndexSpec& spec) override;
  int64_t qsa_index_select(Tensor& allowed, const Tensor& qi, const Tensor& blocks, int64_t q0,
                           const QsaIndexSpec& spec) override;

  // glm5_next family ops (family/glm_ops.cc).
  void mhc_pre(Tensor& h, Tensor& post, Tensor& comb, const Tensor& X, const Weight& fn, const Weight& base,
               const Weight& scale, const MhcSpec& spec) override;
  void mhc_post(Tensor& X, const Tensor& y, const Tensor& post, const Tensor& comb) override;
  void stream_mean(Tensor& out, const Tensor& X, int n) override;
  void kda_gate(Tensor& g, const Tensor& f, const Weight& dt_bias, const Weight& A_log, bool has_lower,
                float lower) override;
  void kda_rule(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                const Tensor& beta, Tensor& state, bool chunked) override;
  void dsa_index_append(Tensor& keys, Tensor& gates, Tensor& pools, const Tensor& k, const Tensor& gs,
                        int64_t pos0, const Weight& ape) override;
  int64_t dsa_index_select(Tensor& allowed, const Tensor& qi, const Tensor& wts, const Tensor& pools,
                           int64_t q0, int pool, int topk) override;
  void mla_attention(Tensor& out, const Tensor& q, const Tensor& latent, const Weight& kv_b, int64_t q0,
                     float scale, const Tensor& allowed) override;
  int64_t route_sigmoid_topk(Tensor& ids, Tensor& weights, const Tensor& logits, const Weight* bias,
                             const SigmoidRouterSpec& spec) override;

  // A weight from stored bytes already validated by the format layer (load_weight's upload step; tests).
  Weight upload_stored(const std::string& name, std::vector<int64_t> shape, const WeightBytes& stored);

  // Tensor parallel (cuda_tp.cc): join_tp picks the device collective from where the ranks are (NCCL for
  // ranks on distinct GPUs, the loopback for ranks of this process sharing this GPU, else host memory;
  // BLOOMERY_TP_COLLECTIVE=nccl|loopback|host forces one). Collective steps run eagerly (not recorded).
  std::string join_tp(Communicator& comm, std::chrono::milliseconds collective_timeout) override;
  void tp_all_reduce(Tensor& t, Communicator& comm, std::string_view what) override;
  Tensor tp_gather_cols(const Tensor& local, Communicator& comm, std::string_view what) override;

  // Sampling on the card (not yet part of Backend): one token per row of logits [R, V].
  std::vector<int32_t> sample(const Tensor& logits, const SampleParams& p);
  // The rows gathered into one [C, V] block, one greedy sample launch, C ids copied back.
  std::vector<int32_t> argmax_last_rows(std::span<const Tensor> logits) override;
  // BLOOMERY_CUDA_DRAWS=0: sampled rows go back to the host sampler (the serving path before the card drew).
  bool draws_rows() const override { return draws_rows_; }
  std::vector<int32_t> draw_last_rows(std::span<const Tensor> logits,
                                      std::span<const RowDraw> draws) override;

 private:
  // Copies a host array into this call's scratch region `slot` (0..3) and returns the device pointer.
  void* stage(int slot, const void* host, size_t bytes);
  // gather_rows on a streamed (host-resident) table (cuda_host_table.cc).
  void gather_streamed(Tensor& out, const Weight& table, std::span<const int64_t> ids);
  // Builds a Weight around a CudaWeight (adds the f32 dense copy of small dense weights).
  Weight wrap(std::string name, std::vector<int64_t> shape, std::shared_ptr<CudaWeight> cw);
  // y = x · W[row0 : row0 + n]ᵀ on raw pointers (GEMV for few rows, tiled GEMM for many).
  void linear(float* y, const float* x, int64_t T, const DeviceWeight& dw, int64_t row0, int64_t n,
              const cuda::Epilogue& e = {});
  void linear_checked(Tensor& out, const Tensor& x, const Weight& w, int64_t row0, int64_t n,
                      const cuda::Epilogue& e);

  // qwen4_exp's QSA tie count inside captured steps: accumulated on the card, read after the step.
  void report_graph_ties();
  // A top-k op's device tie counter (the step's inside a capture; else a zeroed int kept alive by `hold`) and
  // its count for the caller (0 inside a capture: reported after the step).
  int* tie_counter(std::shared_ptr<void>& hold, const char* op);
  int64_t read_ties(const int* d, const char* op);

  int device_ = 0;
  std::unique_ptr<DeviceCollective> collective_;  // set by join_tp (null: no TP, or through host memory)
  StepGraphs graphs_{step_graphs_requested(), step_graph_segment_layers()};
  // The legacy default stream, or in graph mode a created stream (the legacy one cannot be captured). It
  // is a blocking stream, so the synchronous copies of upload/download still order with it.
  cudaStream_t stream_ = nullptr;
  DevicePool pool_;  // activation tensors (alloc); weights own their own allocations
  Scratch scratch_[4];
  OpTimes op_times_;
  bool zero_fill_eager_ = env_is("BLOOMERY_CUDA_EAGER_ZERO", "1");
  bool fuse_epilogues_ = !env_is("BLOOMERY_CUDA_FUSE_EPILOGUE", "0");
  bool gdn_step_gated_ = !env_is("BLOOMERY_CUDA_GDN_GATED", "0");
  // matmul_group in one launch per width (the 2026-12-02 A/B, --ab gemv-group: tg32 C=1 86.1 -> 96.5 tok/s,
  // C=4 141.7 -> 149.9, every round). BLOOMERY_CUDA_GEMV_GROUP=0: one matmul_epilogue each.
  bool group_products_ = !env_is("BLOOMERY_CUDA_GEMV_GROUP", "0");
  bool block_ops_ = !env_is("BLOOMERY_CUDA_BLOCK_OPS", "0");
  bool draws_rows_ = !env_is("BLOOMERY_CUDA_DRAWS", "0");
  int* graph_ties_ = nullptr;  // device counter (graph mode)
  bool graph_ties_used_ = false;
  int graph_ties_seen_ = 0;
};

// The device-side view of a weight this backend made (refuses a weight from another backend).
const DeviceWeight& device_weight(const Weight& w, std::string_view op);

}  // namespace bloomery::cuda

namespace bloomery {
// The CUDA backend on `device`.
std::unique_ptr<Backend> make_cuda_backend(int device = 0);
}  // namespace bloomery
