// Family-specific backend ops (qwen4_exp QSA/PLE/hyper-connections, glm5_next KDA/MLA-DSA/mHC/sigmoid
// router).
//
// Ownership: this file's op declarations are owned by helper G2 (qwen4_exp / glm5_next); helper G1 owns
// backend.h, which inherits this interface (`class Backend : public virtual FamilyOps`). Each op gets a
// default that refuses with E_BACKEND_UNSUPPORTED so a backend that lacks it still builds; the CPU backend
// overrides them in backend/cpu/cpu_family_ops.h, implemented in
// backend/cpu/{qsa,ple,hyper_connections,kda,mla_dsa,mhc,glm_moe}.cc.
//
// Conventions are those of backend.h: F32 activations [T, ...] (T tokens of one sequence), host spans for
// ids/positions, Weight handles, `allowed` masks [T, S] with 1 = may attend (backend.h attention()).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "backend/tensor.h"
#include "core/error.h"

namespace bloomery {

class Weight;

// QSA block indexer (qwen4_exp, models.md §3.8).
struct QsaIndexSpec {
  int compress = 4;        // indexer_compress_ratio: tokens per block
  int block_topk = 0;      // indexer_budget / indexer_compress_ratio
  int rot_dim = 0;         // rotary dims of block keys (the attention's rope)
  double theta = 1e4;      // rope base
  float eps = 1e-6f;       // k_layernorm eps
  int64_t pos_offset = 0;  // RoPE position of cache slot i is i + pos_offset (1 for the MTP layer cache)
};

// mHC module parameters (glm5_next, models.md §4.5).
struct MhcSpec {
  int n = 4;               // hc_mult
  float norm_eps = 1e-5f;  // eps of the unweighted input RMSNorm (rms_norm_eps)
  float hc_eps = 1e-6f;
  int sinkhorn_iters = 20;
};

// Sigmoid noaux_tc router (glm5_next, models.md §1.3).
struct SigmoidRouterSpec {
  int top_k = 1, n_group = 1, topk_group = 1;
  bool renormalize = true;
  float routed_scaling = 1.0f;
};

class FamilyOps {
 public:
  virtual ~FamilyOps() = default;

 protected:
  [[noreturn]] static void unsupported(std::string_view op) {
    raise("E_BACKEND_UNSUPPORTED", Where{"", "", std::string(op)}, "an op this backend implements",
          "an op it does not implement");
  }

 public:
  // ---- qwen4_exp hyper-connections (§3.5) -----------------------------------------------------------------
  // u[T, D] = mean_s σ(m[T, s, :]) ⊙ xn[T, s, :]   (m, xn: [T, n·D]; the gated stream read)
  virtual void hc_read_mix(Tensor& u, const Tensor& m, const Tensor& xn, int n) {
    unsupported("hc_read_mix");
  }
  // X[T, s, :] += inj[T, s] · y[T, :]   (X [T, n·D], inj [T, n], y [T, D]; the stream write)
  virtual void hc_inject(Tensor& X, const Tensor& y, const Tensor& inj) { unsupported("hc_inject"); }

  // ---- qwen4_exp PLE (§3.6) -------------------------------------------------------------------------------
  // G[T, s, :] = σ(ĝ_s) · v[T, :] with g_s = <kn_s, qn_s>/sqrt(D), ĝ = sign(g)·sqrt(max(|g|, 1e-6));
  // kn, qn [T, n·D] (normalised per stream), v [T, D].
  virtual void ple_gate(Tensor& G, const Tensor& kn, const Tensor& qn, const Tensor& v) {
    unsupported("ple_gate");
  }

  // ---- qwen4_exp QSA indexer (§3.8) -----------------------------------------------------------------------
  // Appends raw keys kraw[T, dh] at positions pos0…pos0+T−1 into raw [cap, dh]; every block completed by them
  // is pooled (f32 mean, zero-centred RMSNorm k_norm, RoPE at the block's first position) into blocks [cap/c,
  // dh].
  virtual void qsa_index_append(Tensor& raw, Tensor& blocks, const Tensor& kraw, int64_t pos0,
                                const Weight& k_norm, const QsaIndexSpec& spec) {
    unsupported("qsa_index_append");
  }
  // allowed[T, S] (S = q0 + T): for query t at position q0+t, 1 on the tokens of the top block_topk complete
  // blocks by Σ_h relu(qi[t,h]·K_b)/sqrt(dh) (stable: lower block wins ties) and on the open tail. qi [T, Hi,
  // dh] normed and rotated. Returns how many queries had an exact score tie at the cut (0 inside a recorded
  // graph step, Backend::begin_step, where the backend counts them on the device and reports them itself).
  virtual int64_t qsa_index_select(Tensor& allowed, const Tensor& qi, const Tensor& blocks, int64_t q0,
                                   const QsaIndexSpec& spec) {
    unsupported("qsa_index_select");
  }

  // ---- glm5_next mHC (§4.5) -------------------------------------------------------------------------------
  // From X[T, n·D]: pre-collapsed input h[T, D], post[T, n], comb[T, n, n] (Sinkhorn-projected, comb[j][s]).
  // fn [(2+n)n, n·D], base [(2+n)n], scale [3].
  virtual void mhc_pre(Tensor& h, Tensor& post, Tensor& comb, const Tensor& X, const Weight& fn,
                       const Weight& base, const Weight& scale, const MhcSpec& spec) {
    unsupported("mhc_pre");
  }
  // X[t, s, :] ← post[t, s] · y[t, :] + Σ_j comb[t, j, s] · X[t, j, :]
  virtual void mhc_post(Tensor& X, const Tensor& y, const Tensor& post, const Tensor& comb) {
    unsupported("mhc_post");
  }
  // out[T, D] = mean over the n streams of X[T, n·D]
  virtual void stream_mean(Tensor& out, const Tensor& X, int n) { unsupported("stream_mean"); }

  // ---- glm5_next KDA (§4.6) -------------------------------------------------------------------------------
  // g[T, H, dk] = lower · σ(exp(A_log[h]) · (f + dt_bias)) (lower < 0), or −exp(A_log[h])·softplus(f +
  // dt_bias) when has_lower is false. f [T, H·dk]; dt_bias [H·dk]; A_log [H] (any shape with H elements).
  virtual void kda_gate(Tensor& g, const Tensor& f, const Weight& dt_bias, const Weight& A_log,
                        bool has_lower, float lower) {
    unsupported("kda_gate");
  }
  // KDA delta rule with per-channel decay: q, k, g [T, H, dk]; v [T, H, dv]; beta [T, H]; state [H, dk, dv]
  // f32 (updated). q, k are L2-normalised first (x / sqrt(Σx² + 1e-6)); q scaled by dk^−0.5. out [T, H, dv].
  // chunked: the chunk-64 prompt form; else the token-by-token recurrence.
  virtual void kda_rule(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                        const Tensor& beta, Tensor& state, bool chunked) {
    unsupported("kda_rule");
  }

  // ---- glm5_next DSA indexer and MLA (§4.7) ---------------------------------------------------------------
  // Appends (k, gs)[T, dI] at positions pos0… into keys/gates [cap, dI]; every pool of P tokens completed is
  // finalised into pools [cap/P, dI]: K_p[d] = Σ_m softmax_m(gs[m,d] + ape[m,d]) · k[m,d].
  virtual void dsa_index_append(Tensor& keys, Tensor& gates, Tensor& pools, const Tensor& k, const Tensor& gs,
                                int64_t pos0, const Weight& ape) {
    unsupported("dsa_index_append");
  }
  // allowed[T, S]: for query q0+t, the tokens of the top (topk / P) complete pools by Σ_h wts[t,h] ·
  // relu(qi[t,h]·K_p / sqrt(dI)) (stable) plus the open tail. qi [T, Hi, dI]; wts [T, Hi] (already scaled).
  // Returns how many queries had an exact tie at the cut.
  virtual int64_t dsa_index_select(Tensor& allowed, const Tensor& qi, const Tensor& wts, const Tensor& pools,
                                   int64_t q0, int pool, int topk) {
    unsupported("dsa_index_select");
  }
  // NoPE MLA over the latent cache (absorbed form): q [T, H, dqk]; latent [S, L] (S ≥ q0 + T);
  // kv_b [H·(dqk+dv), L] (per head dqk rows of W_uk then dv rows of W_uv); out [T, H, dv];
  // softmax(scale · q·k) over the allowed keys of query q0+t.
  virtual void mla_attention(Tensor& out, const Tensor& q, const Tensor& latent, const Weight& kv_b,
                             int64_t q0, float scale, const Tensor& allowed) {
    unsupported("mla_attention");
  }

  // ---- glm5_next router (§1.3) ----------------------------------------------------------------------------
  // From f32 logits[T, E]: s = σ(logits); choice = s + bias (bias may be null); group filter; top-k of choice
  // (stable); weights = s[idx] / (Σ + 1e-20) · routed_scaling. ids [T, k] I32, weights [T, k] F32.
  // Returns how many tokens had an exact tie at the cut.
  virtual int64_t route_sigmoid_topk(Tensor& ids, Tensor& weights, const Tensor& logits, const Weight* bias,
                                     const SigmoidRouterSpec& spec) {
    unsupported("route_sigmoid_topk");
  }
};

}  // namespace bloomery
