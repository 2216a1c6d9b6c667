// CudaBackend: device memory, shape checks and launches of the small ops (elementwise, norms, rope,
// attention). Weights are in cuda_weights.cc, matmul dispatch in gemm/linear.cc, the router and experts in
// moe/moe_experts.cc, conv1d and GDN in linear_attn/linear_attn_ops.cc, the streamed PLE table in
// cuda_host_table.cc, the qwen4_exp family ops in family/qwen4_ops.cc.
#include "backend/cuda/cuda_backend.h"
#include "backend/op_checks.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm/gemm_internal.h"
#include "backend/cuda/op_args.h"

namespace bloomery::cuda {

void* Scratch::get(size_t bytes) {
  if (bytes > bytes_) {
    // Inside a step captured nodes may still read the old buffer: it goes once the step has run (cudaFree
    // outside a step synchronises, so no kernel still reads it).
    if (ptr_)
      StepGraphs::free_after_step(graphs_, [p = ptr_] { BLOOMERY_CUDA_CHECK(cudaFree(p), "scratch free"); });
    ptr_ = nullptr;
    const size_t want = std::max(bytes, bytes_ * 2);
    BLOOMERY_CUDA_CHECK(cudaMalloc(&ptr_, want), "scratch alloc " + std::to_string(want) + " bytes");
    bytes_ = want;
  }
  return ptr_;
}

Scratch::~Scratch() {
  if (ptr_) cudaFree(ptr_);
}

CudaBackend::CudaBackend(int device) : device_(device) {
  BLOOMERY_CUDA_CHECK(cudaSetDevice(device), "select device " + std::to_string(device));
  if (graphs_.enabled()) {
    BLOOMERY_CUDA_CHECK(cudaStreamCreate(&stream_), "create the step stream (graph mode)");
    for (Scratch& s : scratch_) s.set_graphs(&graphs_);
  }
}

CudaBackend::~CudaBackend() {
  if (graph_ties_) cudaFree(graph_ties_);
  if (stream_) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
}

// ---- graph steps
// -------------------------------------------------------------------------------------------

void CudaBackend::begin_step(uint64_t key) {
  if (!graphs_.enabled()) return;
  if (!graph_ties_) {
    BLOOMERY_CUDA_CHECK(cudaMalloc(&graph_ties_, sizeof(int)), "step graph tie counter");
    BLOOMERY_CUDA_CHECK(cudaMemset(graph_ties_, 0, sizeof(int)), "step graph tie counter");
  }
  graphs_.begin(stream_, key);
}

std::string CudaBackend::decode_steps() const {
  if (!graphs_.enabled()) return "eager kernel launches (BLOOMERY_CUDA_GRAPHS=0)";
  const int n = graphs_.segment_layers();
  return "CUDA graphs, recorded " + (n > 0 ? std::to_string(n) + " layer(s)" : std::string("a whole step")) +
         " at a time and replayed (BLOOMERY_CUDA_GRAPHS=0 launches eagerly)";
}

bool CudaBackend::rounds_prompt_activations() const {
  return gemm_mode() == GemmMode::Bf16;
}

void CudaBackend::set_step_graphs(bool on) {
  if (on && !stream_)
    raise("E_CUDA_GRAPH", Where{"", "", "set_step_graphs"}, "a backend created in graph mode",
          "a backend on the legacy default stream, which cannot be captured");
  graphs_.set_enabled(on);
}

void CudaBackend::end_step() {
  graphs_.end(stream_);
  report_graph_ties();
}

void CudaBackend::abort_step() noexcept {
  graphs_.abort(stream_);
}

// The device tie counter of one op call: the step's counter inside a capture, else a zeroed scratch int.
int* CudaBackend::tie_counter(std::shared_ptr<void>& hold, const char* op) {
  if (graphs_.capturing()) {
    graph_ties_used_ = true;
    return graph_ties_;
  }
  hold = pool_.get(sizeof(int), std::string(op) + " tie counter");
  int* d = static_cast<int*>(hold.get());
  BLOOMERY_CUDA_CHECK(cudaMemsetAsync(d, 0, sizeof(int), stream_), std::string(op) + " tie counter");
  return d;
}

int64_t CudaBackend::read_ties(const int* d, const char* op) {
  if (graphs_.capturing()) return 0;  // reported after the step
  int host = 0;
  BLOOMERY_CUDA_CHECK(cudaMemcpyAsync(&host, d, sizeof(int), cudaMemcpyDeviceToHost, stream_),
                      std::string(op) + " tie count");
  BLOOMERY_CUDA_CHECK(cudaStreamSynchronize(stream_), std::string(op) + " tie count");
  return host;
}

void CudaBackend::report_graph_ties() {
  if (!graph_ties_used_) return;
  graph_ties_used_ = false;
  int ties = 0;  // the step has run (end_step waited for it)
  BLOOMERY_CUDA_CHECK(cudaMemcpy(&ties, graph_ties_, sizeof(int), cudaMemcpyDeviceToHost),
                      "step graph tie counter");
  if (graph_ties_seen_ == 0 && ties > 0)
    std::fprintf(
        stderr,
        "bloomery: an indexer / router top-k decided by an exact score tie (%d in CUDA graph steps)\n", ties);
  graph_ties_seen_ = ties;
}

void CudaBackend::synchronize() {
  graphs_.not_capturable("synchronize");
  BLOOMERY_CUDA_CHECK(cudaStreamSynchronize(stream_), "synchronize");
  if (op_times_.enabled()) op_times_.resolve();
}

Backend::MemoryInfo CudaBackend::memory_info() const {
  size_t free_b = 0, total_b = 0;
  BLOOMERY_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b), "memory info of device " + std::to_string(device_));
  return {free_b, total_b};
}

void* CudaBackend::stage(int slot, const void* host, size_t bytes) {
  void* d = scratch_[slot].get(bytes + 16);
  // Inside a step the bytes go through pinned memory that outlives it (a captured copy reads them later).
  if (bytes && graphs_.in_step()) host = graphs_.arena().put(host, bytes);
  if (bytes)
    BLOOMERY_CUDA_CHECK(cudaMemcpyAsync(d, host, bytes, cudaMemcpyHostToDevice, stream_),
                        "stage " + std::to_string(bytes) + " bytes");
  return d;
}

// ---- memory
// ------------------------------------------------------------------------------------------------

Tensor CudaBackend::alloc(std::vector<int64_t> shape, ElemType type) {
  int64_t n = 1;
  for (int64_t d : shape) {
    BLOOMERY_NEED(d >= 0, "alloc", "non-negative dims", shape_string(shape));
    n *= d;
  }
  const size_t bytes = static_cast<size_t>(n) * elem_size(type);
  auto st = std::make_shared<Storage>();
  st->owner = pool_.get(bytes, "alloc " + shape_string(shape));
  st->data = st->owner.get();
  st->bytes = bytes;
  // The zero fill alloc promises is deferred to the tensor's first access that can see it (tensor.h): most
  // decode tensors are op outputs written whole, and their memsets were a third of a step's graph nodes.
  // When it does run it is queued on the stream at that point, before the op that reads it.
  if (bytes && !zero_fill_eager_)
    st->pending_zero = [this](Storage& s) {
      OpScope op_scope(op_times_, stream_, "alloc (zero fill)");
      BLOOMERY_CUDA_CHECK(cudaMemsetAsync(s.data, 0, s.bytes, stream_),
                          "alloc zero fill of " + std::to_string(s.bytes) + " bytes");
    };
  else if (bytes) {
    OpScope op_scope(op_times_, stream_, "alloc (zero fill)");
    BLOOMERY_CUDA_CHECK(cudaMemsetAsync(st->data, 0, bytes, stream_), "alloc " + shape_string(shape));
  }
  return Tensor(std::move(st), type, std::move(shape));
}

Tensor CudaBackend::upload(std::span<const float> data, std::vector<int64_t> shape) {
  OpScope op_scope(op_times_, stream_, "upload");
  graphs_.not_capturable("upload");
  Tensor t = alloc(std::move(shape));
  BLOOMERY_NEED(static_cast<size_t>(t.numel()) == data.size(), "upload", t.shape_str(),
                std::to_string(data.size()));
  BLOOMERY_CUDA_CHECK(cudaMemcpy(t.f32(), data.data(), data.size() * 4, cudaMemcpyHostToDevice),
                      "upload " + t.shape_str());
  return t;
}

std::vector<float> CudaBackend::download(const Tensor& t) {
  graphs_.not_capturable("download");
  if (collective_) collective_->wait(stream_, "download " + t.shape_str());  // names a rank that hangs
  std::vector<float> r(static_cast<size_t>(t.numel()));
  if (t.type() == ElemType::I32) {
    std::vector<int32_t> ints(r.size());
    BLOOMERY_CUDA_CHECK(cudaMemcpy(ints.data(), t.i32(), ints.size() * 4, cudaMemcpyDeviceToHost),
                        "download " + t.shape_str());
    for (size_t i = 0; i < r.size(); ++i) r[i] = static_cast<float>(ints[i]);
  } else if (t.type() == ElemType::BF16) {  // the bits, widened exactly here
    std::vector<uint16_t> bits(r.size());
    BLOOMERY_CUDA_CHECK(cudaMemcpy(bits.data(), t.bf16(), bits.size() * 2, cudaMemcpyDeviceToHost),
                        "download " + t.shape_str());
    for (size_t i = 0; i < r.size(); ++i) r[i] = std::bit_cast<float>(static_cast<uint32_t>(bits[i]) << 16);
  } else {
    BLOOMERY_CUDA_CHECK(cudaMemcpy(r.data(), t.f32(), r.size() * 4, cudaMemcpyDeviceToHost),
                        "download " + t.shape_str());
  }
  return r;
}

void CudaBackend::copy(Tensor& dst, const Tensor& src) {
  OpScope op_scope(op_times_, stream_, "copy");
  same_numel("copy", dst, src);
  check_copy_types(dst, src);
  if (dst.type() != src.type()) {  // f32 <-> bf16: a cache write rounds, a cache read widens (elementwise)
    const void* s = src.bytes_ptr();
    void* d = dst.out_bytes({&src});
    const char *sb = static_cast<const char*>(s), *db = static_cast<const char*>(d);
    BLOOMERY_NEED(!(db < sb + src.nbytes() && sb < db + dst.nbytes()), "copy",
                  "f32 <-> bf16 between separate memory", "overlapping " + src.shape_str());
    if (dst.type() == ElemType::BF16)
      round_to_bf16(static_cast<uint16_t*>(d), static_cast<const float*>(s), src.numel(), stream_);
    else
      widen_bf16(static_cast<float*>(d), static_cast<const uint16_t*>(s), src.numel(), stream_);
    return;
  }
  const size_t bytes = src.nbytes();
  const char* s = static_cast<const char*>(src.bytes_ptr());
  char* d = static_cast<char*>(dst.out_bytes({&src}));
  const std::string what = "copy " + src.shape_str();
  if (d == s || bytes == 0) return;
  if (d < s + bytes && s < d + bytes) {  // overlapping ranges: go through scratch (memmove semantics)
    void* tmp = scratch_[3].get(bytes);
    BLOOMERY_CUDA_CHECK(cudaMemcpyAsync(tmp, s, bytes, cudaMemcpyDeviceToDevice, stream_), what);
    BLOOMERY_CUDA_CHECK(cudaMemcpyAsync(d, tmp, bytes, cudaMemcpyDeviceToDevice, stream_), what);
    return;
  }
  BLOOMERY_CUDA_CHECK(cudaMemcpyAsync(d, s, bytes, cudaMemcpyDeviceToDevice, stream_), what);
}

void CudaBackend::fill(Tensor& t, float value) {
  OpScope op_scope(op_times_, stream_, "fill");
  if (t.type() == ElemType::BF16)
    fill_bf16(t.out_bf16(), t.numel(), value, stream_);
  else
    cuda::fill(t.out_f32(), t.numel(), value, stream_);
}

// ---- elementwise
// -------------------------------------------------------------------------------------------

void CudaBackend::add(Tensor& out, const Tensor& a, const Tensor& b) {
  OpScope op_scope(op_times_, stream_, "elementwise");
  same_numel("add", out, a);
  same_numel("add", a, b);
  binary(Binary::Add, out.out_f32({&a, &b}), a.f32(), b.f32(), 0.0f, a.numel(), stream_);
}

void CudaBackend::add_scaled(Tensor& out, const Tensor& a, const Tensor& b, float s) {
  OpScope op_scope(op_times_, stream_, "elementwise");
  same_numel("add_scaled", out, a);
  same_numel("add_scaled", a, b);
  binary(Binary::AddScaled, out.out_f32({&a, &b}), a.f32(), b.f32(), s, a.numel(), stream_);
}

void CudaBackend::mul(Tensor& out, const Tensor& a, const Tensor& b) {
  OpScope op_scope(op_times_, stream_, "elementwise");
  same_numel("mul", out, a);
  same_numel("mul", a, b);
  binary(Binary::Mul, out.out_f32({&a, &b}), a.f32(), b.f32(), 0.0f, a.numel(), stream_);
}

void CudaBackend::scale(Tensor& out, const Tensor& x, float s) {
  OpScope op_scope(op_times_, stream_, "elementwise");
  same_numel("scale", out, x);
  cuda::scale(out.out_f32({&x}), x.f32(), s, x.numel(), stream_);
}

void CudaBackend::activate(Tensor& out, const Tensor& x, Act act) {
  OpScope op_scope(op_times_, stream_, "elementwise");
  same_numel("activate", out, x);
  cuda::activate(out.out_f32({&x}), x.f32(), act_code(act), x.numel(), stream_);
}

void CudaBackend::sigmoid_mul(Tensor& out, const Tensor& x, const Tensor& gate) {
  OpScope op_scope(op_times_, stream_, "elementwise");
  same_numel("sigmoid_mul", out, x);
  same_numel("sigmoid_mul", x, gate);
  binary(Binary::SigmoidMul, out.out_f32({&x, &gate}), x.f32(), gate.f32(), 0.0f, x.numel(), stream_);
}

void CudaBackend::scale_rows(Tensor& out, const Tensor& x, const Tensor& s) {
  OpScope op_scope(op_times_, stream_, "elementwise");
  same_numel("scale_rows", out, x);
  BLOOMERY_NEED(s.numel() == x.rows(), "scale_rows", std::to_string(x.rows()) + " scalars", s.shape_str());
  cuda::scale_rows(out.out_f32({&x, &s}), x.f32(), s.f32(), x.rows(), x.cols(), stream_);
}

void CudaBackend::swiglu(Tensor& out, const Tensor& gate, const Tensor& up, float limit) {
  OpScope op_scope(op_times_, stream_, "elementwise");
  same_numel("swiglu", out, gate);
  same_numel("swiglu", gate, up);
  cuda::swiglu(out.out_f32({&gate, &up}), gate.f32(), up.f32(), limit, gate.numel(), stream_);
}

void CudaBackend::take_cols(Tensor& out, const Tensor& x, int64_t c0) {
  OpScope op_scope(op_times_, stream_, "copy cols");
  const int64_t R = x.rows(), C = x.cols(), n = out.cols();
  BLOOMERY_NEED(out.rows() == R && c0 >= 0 && c0 + n <= C, "take_cols",
                "out [" + std::to_string(R) + ", n] within x " + x.shape_str(),
                out.shape_str() + " at " + std::to_string(c0));
  copy_cols(out.out_f32({&x}), n, 0, x.f32(), C, c0, R, n, stream_);
}

void CudaBackend::split_cols(std::span<Tensor* const> outs, const Tensor& x) {
  if (!block_ops_ || outs.size() < 2 || outs.size() > static_cast<size_t>(kSplitMax))
    return Backend::split_cols(outs, x);
  OpScope op_scope(op_times_, stream_, "split cols");
  const int64_t R = x.rows(), C = x.cols();
  SplitCols a;
  for (Tensor* o : outs) {
    BLOOMERY_NEED(o->rows() == R && a.total + o->cols() <= C, "split_cols",
                  "outputs [" + std::to_string(R) + ", n_i] whose widths fit x " + x.shape_str(),
                  o->shape_str() + " at column " + std::to_string(a.total));
    a.c0[a.count++] = a.total;
    a.total += o->cols();
  }
  for (int p = 0; p < a.count; ++p) a.out[p] = outs[p]->out_f32({&x});
  cuda::split_cols(a, x.f32(), C, R, stream_);
}

void CudaBackend::put_cols(Tensor& dst, const Tensor& src, int64_t c0) {
  OpScope op_scope(op_times_, stream_, "copy cols");
  const int64_t R = dst.rows(), C = dst.cols(), n = src.cols();
  BLOOMERY_NEED(src.rows() == R && c0 >= 0 && c0 + n <= C, "put_cols",
                "src [" + std::to_string(R) + ", n] within dst " + dst.shape_str(),
                src.shape_str() + " at " + std::to_string(c0));
  copy_cols(dst.f32(), C, c0, src.f32(), n, 0, R, n, stream_);
}

// ---- norms
// ---------------------------------------------------------------------------------------------------

void CudaBackend::rms_norm(Tensor& out, const Tensor& x, const Weight* w, float eps, NormKind kind,
                           int64_t group) {
  OpScope op_scope(op_times_, stream_, "norm");
  const int64_t C = x.cols(), R = x.rows();
  const RmsNormShape sh = check_rms_norm_args(out, x, w, kind, group);
  group = sh.group;
  const bool per_group = sh.per_group;
  const float* wp = kind == NormKind::Unweighted ? nullptr : param_f32(*w, "rms_norm");
  cuda::rms_norm(out.out_f32({&x}), x.f32(), wp, eps, static_cast<int>(kind), R * (C / group), group,
                 C / group, per_group, stream_);
}

void CudaBackend::rms_norm_gated(Tensor& out, const Tensor& x, const Tensor& z, const Weight& w, float eps,
                                 Act act) {
  OpScope op_scope(op_times_, stream_, "norm");
  const int64_t G = w.numel();
  BLOOMERY_NEED(G > 0 && x.numel() % G == 0 && z.numel() == x.numel() && out.numel() == x.numel(),
                "rms_norm_gated", "x, z, out of equal size, a multiple of " + std::to_string(G),
                x.shape_str() + " " + z.shape_str());
  cuda::rms_norm_gated(out.out_f32({&x, &z}), x.f32(), z.f32(), param_f32(w, "rms_norm_gated"), eps,
                       act_code(act), x.numel() / G, G, stream_);
}

void CudaBackend::layer_norm(Tensor& out, const Tensor& x, const Weight& w, const Weight& b, float eps) {
  OpScope op_scope(op_times_, stream_, "norm");
  const int64_t C = x.cols(), R = x.rows();
  BLOOMERY_NEED(w.numel() == C && b.numel() == C && out.numel() == x.numel(), "layer_norm",
                "weight and bias of " + std::to_string(C),
                shape_string(w.shape()) + " " + shape_string(b.shape()));
  cuda::layer_norm(out.out_f32({&x}), x.f32(), param_f32(w, "layer_norm"), param_f32(b, "layer_norm"), eps, R,
                   C, stream_);
}

// ---- positional, attention
// ---------------------------------------------------------------------------------

void CudaBackend::rope(Tensor& x, std::span<const int64_t> pos, const RopeSpec& rope) {
  OpScope op_scope(op_times_, stream_, "rope");
  BLOOMERY_NEED(x.ndim() == 3 && x.dim(0) == static_cast<int64_t>(pos.size()), "rope",
                "x [T, H, hd] with T = " + std::to_string(pos.size()), x.shape_str());
  const int rot = rope.rot_dim;
  BLOOMERY_NEED(rot > 0 && rot % 2 == 0 && rot <= x.dim(2), "rope",
                "an even rot_dim <= " + std::to_string(x.dim(2)), std::to_string(rot));
  // inv_freq exactly as the CPU backend computes it, so both rotate by bit-identical angles.
  std::vector<float> inv_freq(rot / 2);
  for (int i = 0; i < rot / 2; ++i)
    inv_freq[i] =
        1.0f / std::pow(static_cast<float>(rope.theta), static_cast<float>(2 * i) / static_cast<float>(rot));
  const auto* dpos = static_cast<const int64_t*>(stage(0, pos.data(), pos.size_bytes()));
  const auto* dfreq = static_cast<const float*>(stage(1, inv_freq.data(), inv_freq.size() * 4));
  cuda::rope(x.f32(), dpos, dfreq, x.dim(0), x.dim(1), x.dim(2), rot, rope.interleaved, stream_);
}

void CudaBackend::attention(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, int64_t q0,
                            float scale, const Tensor* allowed) {
  OpScope op_scope(op_times_, stream_, "attention");
  check_attention_args(out, q, k, v, q0, allowed);
  const int64_t T = q.dim(0), Hq = q.dim(1), d = q.dim(2);
  const int64_t S = k.dim(0), Hkv = k.dim(1), dv = v.dim(2);
  // Split-KV partials only pay off for few query rows; prompts never split (no scratch).
  float* part =
      T * Hq < 264
          ? static_cast<float*>(scratch_[2].get(static_cast<size_t>(attention_part_floats(T, Hq, dv)) * 4))
          : nullptr;
  // K and V go as bytes with their type: the kernels read f32 or BF16 caches (-ctk/-ctv) alike.
  cuda::attention(out.out_f32({&q, &k, &v, allowed}), q.f32(), k.bytes_ptr(), v.bytes_ptr(),
                  k.type() == ElemType::BF16, allowed ? allowed->f32() : nullptr, T, Hq, d, S, Hkv, dv, q0,
                  scale, part, stream_);
}

}  // namespace bloomery::cuda

namespace bloomery {
std::unique_ptr<Backend> make_cuda_backend(int device) {
  return std::make_unique<cuda::CudaBackend>(device);
}
}  // namespace bloomery
