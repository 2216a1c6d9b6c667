// What qwen3_next and qwen4_exp share: the config fields both read (sizes, GDN shape, experts, RoPE, the
// linear/attention layer schedule) and the softmax top-k MoE block with its σ-gated shared expert (models.md
// §1.3): its declarations, binding and math.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/model.h"
#include "models/tp_shard.h"

namespace bloomery {

struct QwenConfig {
  int64_t V, D, L, H, Hkv, hd;     // vocab, hidden, layers, attention heads, KV heads, head dim
  int64_t Hk, Hv, dk, dv, conv_k;  // GDN key/value heads and dims, conv kernel
  int64_t E, top_k, I, Is;         // experts, experts per token, expert / shared expert intermediate sizes
  bool norm_topk, tie;
  float eps;
  double theta;            // RoPE base
  int64_t rot;             // rotated dims per head: head_dim · partial_rotary_factor
  int64_t max_pos;         // max_position_embeddings (0 = unknown)
  std::vector<bool> attn;  // per layer: an attention layer (else linear attention / GDN)
};

// Reads the shared fields. partial_rotary_default: the family's default for partial_rotary_factor.
// layer_types: "linear_attention" is GDN; with strict_types only "full_attention" is the other accepted name
// (E_CFG_FIELD_TYPE), else every other name is an attention layer; without layer_types every
// full_attention_interval-th layer is attention.
QwenConfig read_qwen_config(const nlohmann::json& c, double partial_rotary_default, bool strict_types);

// The softmax-routed MoE with a σ-gated shared expert.
struct QwenMoe {
  const Weight *router = nullptr, *sh_gate = nullptr, *sh_up = nullptr, *sh_down = nullptr,
               *sh_gate_w = nullptr;
  std::vector<ExpertWeights> experts;
};

// Declares / binds the block's tensors under `p` (e.g. "model.layers.3.mlp."). `c` holds the rank's sizes;
// under TP the experts and the shared expert are split on their intermediate dimension (router and shared
// gate replicated).
void declare_qwen_moe(std::vector<TensorDecl>& d, const std::string& p, const QwenConfig& c, bool optional,
                      const TpShard& tp);
QwenMoe bind_qwen_moe(const WeightSet& w, const std::string& p, const QwenConfig& c);

// y[T, D] = Σ_topk p_e · Expert_e(x) + σ(w_sg · x) · SharedExpert(x). Token-wise: any number of rows (the
// rows of several sequences at once). Overwrites y.
void qwen_moe(Backend& be, const QwenMoe& m, const QwenConfig& c, const Tensor& x, Tensor& y);

}  // namespace bloomery
