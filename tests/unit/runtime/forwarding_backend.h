// A test backend that passes every op to another backend (the CPU one) and lets a test watch some of them:
// allocations (to count the bytes a model's state takes), gathers and prefetch hints of row tables (to check
// that a readahead names the rows the forward then reads). Override the hooks, not the ops.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"

namespace bloomery::test {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : in_(std::move(inner)) {}
  Backend& inner() { return *in_; }

  // ---- hooks ----
  virtual void on_alloc(const Tensor& t) {}
  virtual void on_gather(const Weight& table, std::span<const int64_t> ids) {}
  virtual void on_prefetch(const Weight& table, std::span<const int64_t> ids) {}
  virtual void on_begin_step(uint64_t key) {}
  virtual void on_end_step() {}
  virtual void on_abort_step() {}
  virtual void on_step_layer_done() {}
  virtual void on_host_transfer(const char* what) {}  // upload / download

  // ---- Backend ----
  std::string_view name() const override { return in_->name(); }
  int threads() const override { return in_->threads(); }
  MemoryInfo memory_info() const override { return in_->memory_info(); }
  Tensor alloc(std::vector<int64_t> shape, ElemType type = ElemType::F32) override {
    Tensor t = in_->alloc(std::move(shape), type);
    on_alloc(t);
    return t;
  }
  Tensor upload(std::span<const float> data, std::vector<int64_t> shape) override {
    on_host_transfer("upload");
    return in_->upload(data, std::move(shape));
  }
  std::string join_tp(Communicator& comm, std::chrono::milliseconds timeout) override {
    return in_->join_tp(comm, timeout);
  }
  void tp_all_reduce(Tensor& t, Communicator& comm, std::string_view what) override {
    in_->tp_all_reduce(t, comm, what);
  }
  Tensor tp_gather_cols(const Tensor& local, Communicator& comm, std::string_view what) override {
    return in_->tp_gather_cols(local, comm, what);
  }
  std::vector<float> download(const Tensor& t) override {
    on_host_transfer("download");
    return in_->download(t);
  }
  void begin_step(uint64_t key) override {
    on_begin_step(key);
    in_->begin_step(key);
  }
  void end_step() override {
    on_end_step();
    in_->end_step();
  }
  void step_layer_done() override {
    on_step_layer_done();
    in_->step_layer_done();
  }
  void abort_step() noexcept override {
    on_abort_step();
    in_->abort_step();
  }
  void copy(Tensor& dst, const Tensor& src) override { in_->copy(dst, src); }
  void fill(Tensor& t, float value) override { in_->fill(t, value); }
  Weight load_weight(const TensorSource& source, const WeightRecord& record, std::vector<int64_t> shape,
                     Warnings& warnings) override {
    return in_->load_weight(source, record, std::move(shape), warnings);
  }
  Weight stream_weight(const TensorSource& source, const WeightRecord& record, Warnings& warnings) override {
    return in_->stream_weight(source, record, warnings);
  }
  Weight upload_weight(std::string name, std::span<const float> data, std::vector<int64_t> shape) override {
    return in_->upload_weight(std::move(name), data, std::move(shape));
  }
  void matmul(Tensor& out, const Tensor& x, const Weight& w) override { in_->matmul(out, x, w); }
  void matmul_rows(Tensor& out, const Tensor& x, const Weight& w, int64_t row0, int64_t n) override {
    in_->matmul_rows(out, x, w, row0, n);
  }
  void gather_rows(Tensor& out, const Weight& table, std::span<const int64_t> ids) override {
    on_gather(table, ids);
    in_->gather_rows(out, table, ids);
  }
  void prefetch_rows(const Weight& table, std::span<const int64_t> ids) override {
    on_prefetch(table, ids);
    in_->prefetch_rows(table, ids);
  }
  void rms_norm(Tensor& out, const Tensor& x, const Weight* w, float eps, NormKind kind,
                int64_t group = 0) override {
    in_->rms_norm(out, x, w, eps, kind, group);
  }
  void rms_norm_gated(Tensor& out, const Tensor& x, const Tensor& z, const Weight& w, float eps,
                      Act act) override {
    in_->rms_norm_gated(out, x, z, w, eps, act);
  }
  void layer_norm(Tensor& out, const Tensor& x, const Weight& w, const Weight& b, float eps) override {
    in_->layer_norm(out, x, w, b, eps);
  }
  void add(Tensor& out, const Tensor& a, const Tensor& b) override { in_->add(out, a, b); }
  void add_scaled(Tensor& out, const Tensor& a, const Tensor& b, float s) override {
    in_->add_scaled(out, a, b, s);
  }
  void mul(Tensor& out, const Tensor& a, const Tensor& b) override { in_->mul(out, a, b); }
  void scale(Tensor& out, const Tensor& x, float s) override { in_->scale(out, x, s); }
  void activate(Tensor& out, const Tensor& x, Act act) override { in_->activate(out, x, act); }
  void sigmoid_mul(Tensor& out, const Tensor& x, const Tensor& gate) override {
    in_->sigmoid_mul(out, x, gate);
  }
  void scale_rows(Tensor& out, const Tensor& x, const Tensor& s) override { in_->scale_rows(out, x, s); }
  void swiglu(Tensor& out, const Tensor& gate, const Tensor& up, float limit = 0.0f) override {
    in_->swiglu(out, gate, up, limit);
  }
  void take_cols(Tensor& out, const Tensor& x, int64_t c0) override { in_->take_cols(out, x, c0); }
  void put_cols(Tensor& dst, const Tensor& src, int64_t c0) override { in_->put_cols(dst, src, c0); }
  void rope(Tensor& x, std::span<const int64_t> pos, const RopeSpec& r) override { in_->rope(x, pos, r); }
  void attention(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, int64_t q0, float scale,
                 const Tensor* allowed = nullptr) override {
    in_->attention(out, q, k, v, q0, scale, allowed);
  }
  void route_softmax_topk(Tensor& ids, Tensor& weights, const Tensor& logits, const RouterSpec& r) override {
    in_->route_softmax_topk(ids, weights, logits, r);
  }
  void moe_experts(Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                   std::span<const ExpertWeights> experts, float swiglu_limit = 0.0f) override {
    in_->moe_experts(out, x, ids, weights, experts, swiglu_limit);
  }
  void causal_conv1d(Tensor& out, const Tensor& x, const Weight& w, Tensor& state, int dilation,
                     Act act) override {
    in_->causal_conv1d(out, x, w, state, dilation, act);
  }
  void gdn_gates(Tensor& g, Tensor& beta, const Tensor& a, const Tensor& b, const Weight& A_log,
                 const Weight& dt_bias) override {
    in_->gdn_gates(g, beta, a, b, A_log, dt_bias);
  }
  void gated_delta_rule(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                        const Tensor& beta, Tensor& state, bool l2norm_qk, bool chunked) override {
    in_->gated_delta_rule(out, q, k, v, g, beta, state, l2norm_qk, chunked);
  }

  // ---- FamilyOps ----
  void hc_read_mix(Tensor& u, const Tensor& m, const Tensor& xn, int n) override {
    in_->hc_read_mix(u, m, xn, n);
  }
  void hc_inject(Tensor& X, const Tensor& y, const Tensor& inj) override { in_->hc_inject(X, y, inj); }
  void ple_gate(Tensor& G, const Tensor& kn, const Tensor& qn, const Tensor& v) override {
    in_->ple_gate(G, kn, qn, v);
  }
  void qsa_index_append(Tensor& raw, Tensor& blocks, const Tensor& kraw, int64_t pos0, const Weight& k_norm,
                        const QsaIndexSpec& spec) override {
    in_->qsa_index_append(raw, blocks, kraw, pos0, k_norm, spec);
  }
  int64_t qsa_index_select(Tensor& allowed, const Tensor& qi, const Tensor& blocks, int64_t q0,
                           const QsaIndexSpec& spec) override {
    return in_->qsa_index_select(allowed, qi, blocks, q0, spec);
  }
  void mhc_pre(Tensor& h, Tensor& post, Tensor& comb, const Tensor& X, const Weight& fn, const Weight& base,
               const Weight& scale, const MhcSpec& spec) override {
    in_->mhc_pre(h, post, comb, X, fn, base, scale, spec);
  }
  void mhc_post(Tensor& X, const Tensor& y, const Tensor& post, const Tensor& comb) override {
    in_->mhc_post(X, y, post, comb);
  }
  void stream_mean(Tensor& out, const Tensor& X, int n) override { in_->stream_mean(out, X, n); }
  void kda_gate(Tensor& g, const Tensor& f, const Weight& dt_bias, const Weight& A_log, bool has_lower,
                float lower) override {
    in_->kda_gate(g, f, dt_bias, A_log, has_lower, lower);
  }
  void kda_rule(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                const Tensor& beta, Tensor& state, bool chunked) override {
    in_->kda_rule(out, q, k, v, g, beta, state, chunked);
  }
  void dsa_index_append(Tensor& keys, Tensor& gates, Tensor& pools, const Tensor& k, const Tensor& gs,
                        int64_t pos0, const Weight& ape) override {
    in_->dsa_index_append(keys, gates, pools, k, gs, pos0, ape);
  }
  int64_t dsa_index_select(Tensor& allowed, const Tensor& qi, const Tensor& wts, const Tensor& pools,
                           int64_t q0, int pool, int topk) override {
    return in_->dsa_index_select(allowed, qi, wts, pools, q0, pool, topk);
  }
  void mla_attention(Tensor& out, const Tensor& q, const Tensor& latent, const Weight& kv_b, int64_t q0,
                     float scale, const Tensor& allowed) override {
    in_->mla_attention(out, q, latent, kv_b, q0, scale, allowed);
  }
  int64_t route_sigmoid_topk(Tensor& ids, Tensor& weights, const Tensor& logits, const Weight* bias,
                             const SigmoidRouterSpec& spec) override {
    return in_->route_sigmoid_topk(ids, weights, logits, bias, spec);
  }

 private:
  std::unique_ptr<Backend> in_;
};

}  // namespace bloomery::test
