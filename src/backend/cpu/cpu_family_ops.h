// CPU implementations of the family-specific ops of backend/family_ops.h (qwen4_exp / glm5_next).
//
// Ownership: helper G2. The overrides are defined next to their math in backend/cpu/{qsa,ple,
// hyper_connections,kda,mla_dsa,mhc,glm_moe}.cc. `pool()` gives the CPU backend's thread pool.
#pragma once

#include "backend/family_ops.h"
#include "core/thread_pool.h"

namespace bloomery::cpu {

class CpuFamilyOps : public virtual FamilyOps {
 public:
  explicit CpuFamilyOps(ThreadPool& pool) : pool_(pool) {}

  void hc_read_mix(Tensor& u, const Tensor& m, const Tensor& xn, int n) override;
  void hc_inject(Tensor& X, const Tensor& y, const Tensor& inj) override;
  void ple_gate(Tensor& G, const Tensor& kn, const Tensor& qn, const Tensor& v) override;
  void qsa_index_append(Tensor& raw, Tensor& blocks, const Tensor& kraw, int64_t pos0, const Weight& k_norm,
                        const QsaIndexSpec& spec) override;
  int64_t qsa_index_select(Tensor& allowed, const Tensor& qi, const Tensor& blocks, int64_t q0,
                           const QsaIndexSpec& spec) override;
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

 protected:
  ThreadPool& pool() const { return pool_; }

 private:
  ThreadPool& pool_;
};

}  // namespace bloomery::cpu
