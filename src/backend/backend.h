// The backend op interface: every piece of arithmetic a model forward needs, on backend-owned tensors.
//
// Models are written once against this interface (DESIGN.md "Backend"). The CPU backend (backend/cpu)
// computes in f32 with weights decoded at load; a CUDA backend implements the same calls on device memory
// later.
//
// Conventions (all ops):
//  * Activations are row-major F32 tensors whose first dimension is the token (a batch of T tokens of ONE
//    sequence per call). "Rows" = every dimension but the last, "cols" = the last dimension.
//  * `out` tensors are allocated by the caller (Backend::alloc) with the documented shape; an op may be
//  called
//    in place (out aliasing an input) only where it says so.
//  * Token ids and positions are small host arrays (std::span); a device backend copies them itself.
//  * Weights are `Weight` handles created by load_weight: the backend decides how a stored format is kept
//    (CPU: decoded f32; CUDA: stored bytes + kernels). A model never sees the format.
//  * Per-sequence state (KV caches, conv and recurrent states, indexer keys) is a set of Tensors allocated
//    through alloc() by the model's state factory; the runtime owns the state objects.
//  * Shape mismatches are programming errors and are refused with E_BACKEND_SHAPE naming the op.
//
// Family-specific ops (QSA indexer, PLE, hyper-connections, KDA, MLA/DSA, mHC) are declared in
// backend/family_ops.h, which `Backend` inherits; they are owned and implemented by the qwen4_exp / glm5_next
// work (files backend/cpu/{qsa,ple,hyper_connections,kda,mla_dsa,mhc}*.cc).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/family_ops.h"
#include "backend/tensor.h"
#include "core/error.h"
#include "parallel/communicator.h"

namespace bloomery {

class TensorSource;
struct WeightRecord;
class Weight;

// Elementwise activation functions used by the families.
enum class Act : uint8_t { None, Silu, Sigmoid, Softplus, Relu };

// RMSNorm variants of models.md §1.1 (the gated one is its own op).
enum class NormKind : uint8_t {
  Plain,       // y = w · rms(x)
  OnePlus,     // y = (1 + w) · rms(x)          (zero-centred, Qwen)
  Unweighted,  // y = rms(x)                    (GLM mHC input); w must be null
};

// Rotary embedding configuration (models.md §1.4).
struct RopeSpec {
  int rot_dim = 0;         // rotated dims per head (head_dim · partial_rotary_factor); the rest pass through
  double theta = 10000.0;  // base
  bool interleaved = false;  // false: NeoX "rotate half" (Qwen); true: GPT-J adjacent pairs
  // M-RoPE: sections of rot_dim/2 frequencies taken from position rows 0,1,2 (empty = plain 1-D RoPE). For
  // text all rows are equal and M-RoPE reduces exactly to plain RoPE, so callers pass one position row.
  std::vector<int> mrope_section;
  bool mrope_interleaved = false;
};

// Softmax top-k router (Qwen families, models.md §1.3). GLM's sigmoid router is a family op.
struct RouterSpec {
  int top_k = 1;
  bool renormalize = true;  // norm_topk_prob
};

// One routed (or shared) expert: SwiGLU y = W_down (act(W_gate x) ⊙ (W_up x)).
struct ExpertWeights {
  const Weight* gate = nullptr;
  const Weight* up = nullptr;
  const Weight* down = nullptr;
};

// A weight as the backend keeps it. Created only by Backend::load_weight / upload_weight; read by ops.
class Weight {
 public:
  Weight() = default;
  const std::string& name() const { return name_; }
  const std::vector<int64_t>& shape() const { return shape_; }  // logical (decoded) shape
  int64_t rows() const { return shape_.empty() ? 1 : shape_[0]; }
  int64_t cols() const {
    int64_t c = 1;
    for (size_t i = 1; i < shape_.size(); ++i) c *= shape_[i];
    return c;
  }
  int64_t numel() const { return rows() * cols(); }
  bool defined() const { return !shape_.empty(); }
  // The dense f32 tensor when the backend keeps one (CPU); undefined for a row-streamed weight.
  const Tensor& dense() const { return dense_; }
  // True when rows are read from the checkpoint on demand (the PLE table): only gather_rows may use it.
  bool streamed() const { return streamed_; }
  // Backend-private data (a streamed weight's reader, a device weight's stored-format buffers).
  const std::shared_ptr<void>& impl() const { return impl_; }

 private:
  friend class Backend;
  std::string name_;
  std::vector<int64_t> shape_;
  Tensor dense_;
  bool streamed_ = false;
  std::shared_ptr<void> impl_;
};

class Backend : public virtual FamilyOps {
 public:
  ~Backend() override = default;
  virtual std::string_view name() const = 0;
  // Worker threads the backend uses (CPU); 1 for device backends.
  virtual int threads() const = 0;

  // ---- memory --------------------------------------------------------------------------------------------
  // Memory the backend computes in: free and total bytes (device memory for CUDA, available RAM for CPU);
  // 0 = unknown. The loader's memory plan refuses a model that does not fit before allocating anything.
  struct MemoryInfo {
    uint64_t free_bytes = 0, total_bytes = 0;
  };
  virtual MemoryInfo memory_info() const { return {}; }
  // A zero-filled tensor of the given shape.
  virtual Tensor alloc(std::vector<int64_t> shape, ElemType type = ElemType::F32) = 0;
  virtual Tensor upload(std::span<const float> data, std::vector<int64_t> shape) = 0;
  virtual std::vector<float> download(const Tensor& t) = 0;
  virtual void copy(Tensor& dst, const Tensor& src) = 0;  // same numel, any shapes
  virtual void fill(Tensor& t, float value) = 0;
  // For each tensor of logits [rows, V], the index of its last row's largest value, the lowest index among
  // equal maxima (greedy decoding without bringing the rows back). Default: download each row and scan it
  // here.
  virtual std::vector<int32_t> argmax_last_rows(std::span<const Tensor> logits) {
    std::vector<int32_t> ids;
    for (const Tensor& t : logits) {
      const int64_t V = t.cols();
      const std::vector<float> row = download(t.view({t.rows(), V}).slice(t.rows() - 1, 1));
      int32_t best = 0;
      for (int64_t i = 1; i < V; ++i)
        if (row[i] > row[best]) best = static_cast<int32_t>(i);
      ids.push_back(best);
    }
    return ids;
  }
  // A sampled draw of one row where its logits live: llama-server's cuts (top-k, top-p, min-p on the
  // temperature-1 distribution), then the temperature on the survivors, then one draw from a counter-based
  // generator of (seed, step), so a seeded request draws the same tokens again on the same backend.
  struct RowDraw {
    float temperature = 1.0f;  // > 0 (a greedy row takes argmax_last_rows)
    int top_k = 0;             // 0: off
    float top_p = 1.0f;        // 1: off
    float min_p = 0.0f;        // 0: off
    uint64_t seed = 0;
    uint64_t step = 0;  // one draw per step of a sequence
  };
  // Whether draw_last_rows runs here (the card: only the ids come back instead of the rows). Default: no, the
  // caller downloads the rows and samples them itself.
  virtual bool draws_rows() const { return false; }
  // For each tensor of logits [rows, V], one draw from its last row with draws[i].
  virtual std::vector<int32_t> draw_last_rows(std::span<const Tensor> logits,
                                              std::span<const RowDraw> draws) {
    raise("E_BACKEND_UNSUPPORTED", Where{"", "", "draw_last_rows"}, "a backend that draws rows (draws_rows)",
          std::string(name()));
  }

  // ---- tensor parallel (models.md §2.7; parallel/communicator.h) -----------------------------------------
  // This backend becomes rank comm.rank() of a TP group: every rank calls it once, together, before its
  // model loads. A device backend sets up its device collective here. Returns how the collectives move data
  // (the start screen's line).
  virtual std::string join_tp(Communicator& comm, std::chrono::milliseconds collective_timeout) {
    (void)comm;
    (void)collective_timeout;
    return "through host memory";
  }
  // t ← Σ over comm's ranks, in place, the same bytes on every rank. The default goes through host memory
  // (download, the host collective, copy back): right for any backend and any communicator (threads, TCP).
  // The CPU backend reduces its host memory directly; the CUDA backend reduces on the card when a device
  // collective is attached (NCCL between GPUs, the loopback between ranks sharing one GPU).
  virtual void tp_all_reduce(Tensor& t, Communicator& comm, std::string_view what) {
    std::vector<float> h = download(t);
    comm.all_reduce_sum(h.data(), h.size(), what);
    Tensor back = upload(h, t.shape());
    copy(t, back);
  }
  // [R, n] on every rank → [R, size·n], rank r's columns at [r·n, (r+1)·n) (a vocabulary-split head's
  // logits). Default through host memory, as above.
  virtual Tensor tp_gather_cols(const Tensor& local, Communicator& comm, std::string_view what) {
    const int64_t R = local.rows(), n = local.cols(), size = comm.size();
    const std::vector<float> mine = download(local);
    std::vector<float> all(size_t(size * R * n));
    comm.all_gather(mine.data(), mine.size(), all.data(), what);
    std::vector<float> out(all.size());
    for (int64_t r = 0; r < size; ++r)
      for (int64_t i = 0; i < R; ++i)
        std::copy_n(&all[size_t((r * R + i) * n)], n, &out[size_t((i * size + r) * n)]);
    return upload(out, {R, size * n});
  }

  // ---- step graphs ---------------------------------------------------------------------------------------
  // begin_step(key) … end_step() bracket the ops of one decode step so that a backend may record them once
  // per step shape `key` and replay the recording (the CUDA backend's graph mode, on unless
  // BLOOMERY_CUDA_GRAPHS=0).
  // Between the two calls nothing may read device results on the host; the step's results are there once
  // end_step returns. abort_step() drops a step whose ops threw. Default: nothing (every op runs as called).
  virtual void begin_step(uint64_t key) {}
  virtual void end_step() {}
  virtual void abort_step() noexcept {}
  // A model layer of the current step ended (models call it in their layer loops): a recording backend may
  // hand what it recorded so far to the device here, which runs it while the host records the next layers.
  virtual void step_layer_done() {}
  // How decode steps reach the device, for the server's start screen ("" when there is nothing to say).
  virtual std::string decode_steps() const { return ""; }
  // Whether the products of prompt-sized passes round their activations to BF16 (the card's plain BF16 prompt
  // GEMM mode). A sequence's state then depends on how its tokens were cut into passes to that rounding, as
  // it does with BF16 caches; the speculative-decoding tests hold such states to the BF16 tolerance.
  virtual bool rounds_prompt_activations() const { return false; }

  // ---- weights -------------------------------------------------------------------------------------------
  // Loads one logical weight of a checkpoint (validated by the format layer); `shape` is the logical shape
  // the model declared (it must have the record's numel). Throws the format's E_ errors.
  virtual Weight load_weight(const TensorSource& source, const WeightRecord& record,
                             std::vector<int64_t> shape, Warnings& warnings) = 0;
  // A weight whose rows are read from the checkpoint on demand (PLE n-gram table): never decoded whole.
  virtual Weight stream_weight(const TensorSource& source, const WeightRecord& record,
                               Warnings& warnings) = 0;
  // A weight from host f32 data (tests, derived weights such as a concatenated conv kernel).
  virtual Weight upload_weight(std::string name, std::span<const float> data, std::vector<int64_t> shape) = 0;

  // ---- linear algebra ------------------------------------------------------------------------------------
  // out[T, N] = x[T, K] · W[N, K]ᵀ.  W may have more than 2 dims (its rows are shape[0], cols the rest).
  virtual void matmul(Tensor& out, const Tensor& x, const Weight& w) = 0;
  // out = post · act(pre · x·Wᵀ): a product with the elementwise tail models put after it (the hyper-
  // connection reads' 1/n scale and activation, sigmoid gates); then, with row_scale, each row t times
  // row_scale[t] (a per-token gate, [T] or [T, 1]); with accumulate, added to out instead of stored (out +=
  // …: a residual or a second branch summed in the product's store). Each step rounds as the separate ops do,
  // so a fused backend gives the same bits. Default: matmul, then scale / activate / scale / row scale / add.
  struct Epilogue {
    float pre = 1.0f;
    Act act = Act::None;
    float post = 1.0f;
    const Tensor* row_scale = nullptr;
    bool accumulate = false;
    bool elementwise_only() const { return !row_scale && !accumulate; }
  };
  virtual void matmul_epilogue(Tensor& out, const Tensor& x, const Weight& w, const Epilogue& e) {
    if (!e.elementwise_only()) {  // the separate ops: into a temporary, scaled, then added or stored
      Tensor t = alloc(out.shape());
      matmul_epilogue(t, x, w, {e.pre, e.act, e.post});
      if (e.row_scale) scale_rows(t, t, *e.row_scale);
      if (e.accumulate)
        add(out, out, t);
      else
        copy(out, t);
      return;
    }
    matmul(out, x, w);
    if (e.pre != 1.0f) scale(out, out, e.pre);
    if (e.act != Act::None) activate(out, out, e.act);
    if (e.post != 1.0f) scale(out, out, e.post);
  }
  // Several products of one input (the projections a block takes from its normalised input): *out_i =
  // e_i(x · W_iᵀ). Default: matmul_epilogue for each, in order. A backend may run them in one pass (the CUDA
  // decode GEMV: one launch for all, since a dependent kernel costs a few microseconds however small); the
  // bits are those of the separate calls.
  struct Product {
    Tensor* out;
    const Weight* w;
    Epilogue e{};
  };
  virtual void matmul_group(std::span<const Product> products, const Tensor& x) {
    for (const Product& p : products) matmul_epilogue(*p.out, x, *p.w, p.e);
  }
  // out[T, n] = x[T, K] · W[row0 : row0+n, K]ᵀ (a block of a weight's rows, e.g. one head group).
  virtual void matmul_rows(Tensor& out, const Tensor& x, const Weight& w, int64_t row0, int64_t n) = 0;
  // out[T, D] = table[ids[t], :] (embedding gather; works for dense and streamed weights).
  virtual void gather_rows(Tensor& out, const Weight& table, std::span<const int64_t> ids) = 0;
  // Hint: a coming gather_rows will read these rows of a streamed table. A backend that keeps the table off
  // the card starts fetching them (page-in, copy to staging) in the background. Default: nothing.
  virtual void prefetch_rows(const Weight& table, std::span<const int64_t> ids) {}

  // ---- norms ---------------------------------------------------------------------------------------------
  // x viewed as [R, C] with C = x.cols(); every run of `group` channels (0 = C) is normalised on its own with
  // rms over the group. w (null for Unweighted) has `group` elements (shared by all groups, e.g. q_norm per
  // head) or C elements (each group its own slice, models.md "grouped RMSNorm1p"). In place allowed.
  virtual void rms_norm(Tensor& out, const Tensor& x, const Weight* w, float eps, NormKind kind,
                        int64_t group = 0) = 0;
  // Gated RMSNorm over groups of w.numel() channels: y = w · rms(x) · act(z). In place allowed (out = x).
  virtual void rms_norm_gated(Tensor& out, const Tensor& x, const Tensor& z, const Weight& w, float eps,
                              Act act) = 0;
  // LayerNorm over the last dim with weight and bias (GLM indexer key norm). In place allowed.
  virtual void layer_norm(Tensor& out, const Tensor& x, const Weight& w, const Weight& b, float eps) = 0;
  // A block's stream write and the next read's norm (qwen4_exp hyper-connections): hc_inject(X, y, inj),
  // then xn = rms_norm(X, w, eps, kind, group). Default: those two ops; a backend may make it one pass.
  virtual void hc_inject_norm(Tensor& X, const Tensor& y, const Tensor& inj, Tensor& xn, const Weight* w,
                              float eps, NormKind kind, int64_t group) {
    hc_inject(X, y, inj);
    rms_norm(xn, X, w, eps, kind, group);
  }
  // The hyper-connection read's up product and mix (qwen4_exp): m = a · upᵀ [T, n·D], then
  // hc_read_mix(u, m, xn, n). Default: those two ops; a backend may make it one pass.
  virtual void hc_up_read_mix(Tensor& u, const Tensor& a, const Weight& up, const Tensor& xn, int n) {
    Tensor m = alloc({a.rows(), up.rows()});
    matmul(m, a, up);
    hc_read_mix(u, m, xn, n);
  }

  // ---- elementwise (all allow in place) ------------------------------------------------------------------
  virtual void add(Tensor& out, const Tensor& a, const Tensor& b) = 0;                  // a + b
  virtual void add_scaled(Tensor& out, const Tensor& a, const Tensor& b, float s) = 0;  // a + s·b
  virtual void mul(Tensor& out, const Tensor& a, const Tensor& b) = 0;                  // a ⊙ b
  virtual void scale(Tensor& out, const Tensor& x, float s) = 0;                        // s·x
  virtual void activate(Tensor& out, const Tensor& x, Act act) = 0;                     // act(x)
  // out = x ⊙ σ(gate)  (attention output gate)
  virtual void sigmoid_mul(Tensor& out, const Tensor& x, const Tensor& gate) = 0;
  // out[r, :] = x[r, :] · s[r]  (s has x.rows() elements; per-token scalar gates)
  virtual void scale_rows(Tensor& out, const Tensor& x, const Tensor& s) = 0;
  // out = act(min(gate, limit)) ⊙ clamp(up, −limit, limit); limit ≤ 0 means no clamp (SwiGLU core).
  virtual void swiglu(Tensor& out, const Tensor& gate, const Tensor& up, float limit = 0.0f) = 0;
  // out[R, n] = x[R, c0 : c0+n]   (column slice copy; x viewed as [R, C])
  virtual void take_cols(Tensor& out, const Tensor& x, int64_t c0) = 0;
  // x's columns cut into consecutive blocks, one per output (each out_i [R, n_i], Σ n_i ≤ x.cols(); a
  // fused projection's parts). Default: take_cols each; a backend may copy them all in one pass.
  virtual void split_cols(std::span<Tensor* const> outs, const Tensor& x) {
    int64_t c0 = 0;
    for (Tensor* o : outs) {
      take_cols(*o, x, c0);
      c0 += o->cols();
    }
  }
  // dst[R, c0 : c0+n] = src[R, n]  (column slice write; concatenation along the last dim)
  virtual void put_cols(Tensor& dst, const Tensor& src, int64_t c0) = 0;

  // ---- positional ----------------------------------------------------------------------------------------
  // In place on x[T, H, hd] (first rope.rot_dim dims of every head); pos has T entries (token positions).
  virtual void rope(Tensor& x, std::span<const int64_t> pos, const RopeSpec& rope) = 0;

  // ---- attention -----------------------------------------------------------------------------------------
  // Softmax attention with GQA: q[T, Hq, d], keys k[S, Hkv, d], values v[S, Hkv, dv] (S = cached length
  // including this call's tokens), out[T, Hq, dv]. Query t sits at key index q0 + t and sees keys j ≤ q0 + t
  // (causal). `allowed` (optional, [T, S], 1 = may attend, 0 = masked) narrows the causal set (sparse
  // selection). Query head h uses KV head h / (Hq / Hkv). Softmax in f32; a row with no key gives zeros.
  virtual void attention(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, int64_t q0,
                         float scale, const Tensor* allowed = nullptr) = 0;

  // ---- mixture of experts --------------------------------------------------------------------------------
  // p = softmax(logits[T, E]); top-k per row (ties: lower index first); optional renormalisation.
  // ids[T, k] (I32) and weights[T, k] (F32) are outputs.
  virtual void route_softmax_topk(Tensor& ids, Tensor& weights, const Tensor& logits,
                                  const RouterSpec& r) = 0;
  // out[T, D] = Σ_j weights[t, j] · Expert_{ids[t, j]}(x[t]) with SwiGLU experts (swiglu limit as in
  // swiglu()). Overwrites out.
  virtual void moe_experts(Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                           std::span<const ExpertWeights> experts, float swiglu_limit = 0.0f) = 0;

  // ---- linear attention ----------------------------------------------------------------------------------
  // Causal depthwise conv over time (models.md §1.5): x[T, C], w [C, 1, K] or [C, K], state[C, (K−1)·dil]
  // holds the previous inputs (oldest first) and is updated. out[T, C] = act(conv). Not in place.
  virtual void causal_conv1d(Tensor& out, const Tensor& x, const Weight& w, Tensor& state, int dilation,
                             Act act) = 0;
  // GDN gates per value head: g = −exp(A_log) · softplus(a + dt_bias), beta = σ(b); a, b, g, beta [T, Hv].
  virtual void gdn_gates(Tensor& g, Tensor& beta, const Tensor& a, const Tensor& b, const Weight& A_log,
                         const Weight& dt_bias) = 0;
  // Gated delta rule (models.md §1.6, GDN: one decay per value head). q, k [T, Hk, dk]; v [T, Hv, dv];
  // g [T, Hv] (log decay, ≤ 0); beta [T, Hv]; state [Hv, dk, dv] f32, updated. out[T, Hv, dv].
  // Value head j uses key head j / (Hv / Hk). l2norm_qk: q and k are L2-normalised (eps 1e-6) first; q is
  // always scaled by dk^−0.5. chunked: the chunk-64 prompt form (same result up to rounding) instead of the
  // step form.
  virtual void gated_delta_rule(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& g, const Tensor& beta, Tensor& state, bool l2norm_qk,
                                bool chunked) = 0;
  // A GDN layer's mixer after its conv, for one entry's rows in the step form (qwen4_exp decode): q, k, v are
  // c's column blocks [T, Hk·dk | Hk·dk | Hv·dv] (Hv = A_log.numel(), dv = norm.numel()); the gates from a,
  // b [T, Hv]; the delta rule on state with q, k L2-normalised; out[T, Hv·dv] = rms_norm_gated(o, z, norm,
  // eps, gate_act). Default: split_cols, gdn_gates, gated_delta_rule (step form), rms_norm_gated; a backend
  // may run it in one pass (o, the gates and the parts never stored).
  virtual void gdn_step_gated(Tensor& out, const Tensor& c, const Tensor& z, const Tensor& a, const Tensor& b,
                              const Weight& A_log, const Weight& dt_bias, const Weight& norm, Tensor& state,
                              int64_t Hk, int64_t dk, float eps, Act gate_act) {
    const int64_t T = c.rows(), Hv = A_log.numel(), dv = norm.numel(), kd = Hk * dk;
    Tensor q = alloc({T, Hk, dk}), k = alloc({T, Hk, dk}), v = alloc({T, Hv, dv});
    Tensor q2 = q.view({T, kd}), k2 = k.view({T, kd}), v2 = v.view({T, Hv * dv});
    Tensor* const parts[] = {&q2, &k2, &v2};
    split_cols(parts, c);
    Tensor g = alloc({T, Hv}), beta = alloc({T, Hv});
    gdn_gates(g, beta, a, b, A_log, dt_bias);
    Tensor o = alloc({T, Hv, dv});
    gated_delta_rule(o, q, k, v, g, beta, state, true, false);
    rms_norm_gated(out, o.view({T, Hv * dv}), z, norm, eps, gate_act);
  }

 protected:
  // For implementations: builds a Weight around their own data.
  static Weight make_weight(std::string name, std::vector<int64_t> shape, Tensor dense, bool streamed = false,
                            std::shared_ptr<void> impl = nullptr) {
    Weight w;
    w.name_ = std::move(name);
    w.shape_ = std::move(shape);
    w.dense_ = std::move(dense);
    w.streamed_ = streamed;
    w.impl_ = std::move(impl);
    return w;
  }
};

// Refuses a shape mismatch inside an op (E_BACKEND_SHAPE).
[[noreturn]] inline void backend_shape_error(std::string_view op, std::string expected, std::string found) {
  raise("E_BACKEND_SHAPE", Where{"", "", std::string(op)}, std::move(expected), std::move(found));
}

// Refuses with E_BACKEND_SHAPE unless `ok`: the one argument check every backend's ops share. A macro so that
// the messages are built only when the check fails: the checks run on every op of every step, and building
// their strings eagerly was ~5 % of a CPU decode step on the trained qwen4_exp (perf, 2026-12-02).
#define BLOOMERY_NEED(ok, op, expected, found)                             \
  do {                                                                     \
    if (!(ok)) ::bloomery::backend_shape_error((op), (expected), (found)); \
  } while (0)

}  // namespace bloomery
