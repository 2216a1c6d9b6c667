// The config reader and softmax MoE block shared by qwen3_next and qwen4_exp (see qwen_common.h).
#include "models/qwen_common.h"

#include "models/model_registry.h"

namespace bloomery {

QwenConfig read_qwen_config(const nlohmann::json& c, double partial_rotary_default, bool strict_types) {
  QwenConfig k{};
  k.V = cfg_int(c, "vocab_size");
  k.D = cfg_int(c, "hidden_size");
  k.L = cfg_int(c, "num_hidden_layers");
  k.H = cfg_int(c, "num_attention_heads");
  k.Hkv = cfg_int(c, "num_key_value_heads");
  k.hd = cfg_int(c, "head_dim", k.D / k.H);
  k.Hk = cfg_int(c, "linear_num_key_heads");
  k.Hv = cfg_int(c, "linear_num_value_heads");
  k.dk = cfg_int(c, "linear_key_head_dim");
  k.dv = cfg_int(c, "linear_value_head_dim");
  k.conv_k = cfg_int(c, "linear_conv_kernel_dim", 4);
  k.E = cfg_int(c, "num_experts");
  k.top_k = cfg_int(c, "num_experts_per_tok");
  k.I = cfg_int(c, "moe_intermediate_size");
  k.Is = cfg_int(c, "shared_expert_intermediate_size");
  k.norm_topk = cfg_bool(c, "norm_topk_prob", true);
  k.tie = cfg_bool(c, "tie_word_embeddings", false);
  k.eps = static_cast<float>(cfg_num(c, "rms_norm_eps", 1e-6));
  k.max_pos = cfg_int(c, "max_position_embeddings", 0);
  // RoPE: rope_parameters (transformers 5) or the legacy top-level keys.
  const nlohmann::json empty = nlohmann::json::object();
  const nlohmann::json& rp =
      c.contains("rope_parameters") && c["rope_parameters"].is_object() ? c["rope_parameters"] : empty;
  k.theta = cfg_num(rp, "rope_theta", cfg_num(c, "rope_theta", 10000.0));
  const double partial =
      cfg_num(rp, "partial_rotary_factor", cfg_num(c, "partial_rotary_factor", partial_rotary_default));
  k.rot = static_cast<int64_t>(static_cast<double>(k.hd) * partial);
  // Layer schedule: layer_types when present, else every full_attention_interval-th layer.
  if (c.contains("layer_types") && c["layer_types"].is_array()) {
    const auto& lt = c["layer_types"];
    if (static_cast<int64_t>(lt.size()) != k.L)
      raise("E_CFG_FIELD_TYPE", Where{"config.json", "", "layer_types"}, std::to_string(k.L) + " entries",
            std::to_string(lt.size()));
    for (const auto& t : lt) {
      const std::string s = t.is_string() ? t.get<std::string>() : "";
      if (s.empty() || (strict_types && s != "linear_attention" && s != "full_attention"))
        raise("E_CFG_FIELD_TYPE", Where{"config.json", "", "layer_types"},
              "linear_attention or full_attention", t.dump());
      k.attn.push_back(s != "linear_attention");
    }
  } else {
    const int64_t interval = cfg_int(c, "full_attention_interval", 4);
    for (int64_t i = 0; i < k.L; ++i) k.attn.push_back((i + 1) % interval == 0);
  }
  return k;
}

void declare_qwen_moe(std::vector<TensorDecl>& d, const std::string& p, const QwenConfig& c, bool optional,
                      const TpShard& tp) {
  auto add = [&](const std::string& n, std::vector<int64_t> s, TensorCut cut = {}) {
    d.push_back({p + n, std::move(s), optional, false, std::move(cut)});
  };
  add("gate.weight", {c.E, c.D});
  for (int64_t e = 0; e < c.E; ++e) {
    const std::string ep = "experts." + std::to_string(e) + ".";
    add(ep + "gate_proj.weight", {c.I, c.D}, tp.rows(c.I));
    add(ep + "up_proj.weight", {c.I, c.D}, tp.rows(c.I));
    add(ep + "down_proj.weight", {c.D, c.I}, tp.cols(c.I));
  }
  add("shared_expert.gate_proj.weight", {c.Is, c.D}, tp.rows(c.Is));
  add("shared_expert.up_proj.weight", {c.Is, c.D}, tp.rows(c.Is));
  add("shared_expert.down_proj.weight", {c.D, c.Is}, tp.cols(c.Is));
  add("shared_expert_gate.weight", {1, c.D});
}

QwenMoe bind_qwen_moe(const WeightSet& w, const std::string& p, const QwenConfig& c) {
  QwenMoe m;
  m.router = &w.get(p + "gate.weight");
  for (int64_t e = 0; e < c.E; ++e) {
    const std::string ep = p + "experts." + std::to_string(e) + ".";
    m.experts.push_back(
        {&w.get(ep + "gate_proj.weight"), &w.get(ep + "up_proj.weight"), &w.get(ep + "down_proj.weight")});
  }
  m.sh_gate = &w.get(p + "shared_expert.gate_proj.weight");
  m.sh_up = &w.get(p + "shared_expert.up_proj.weight");
  m.sh_down = &w.get(p + "shared_expert.down_proj.weight");
  m.sh_gate_w = &w.get(p + "shared_expert_gate.weight");
  return m;
}

void qwen_moe(Backend& be, const QwenMoe& m, const QwenConfig& c, const Tensor& x, Tensor& y) {
  const int64_t T = x.rows();
  // Every product of x first: the router, the shared expert's gate and up, and its sigmoid gate.
  Tensor logits = be.alloc({T, c.E});
  Tensor g = be.alloc({T, c.Is}), u = be.alloc({T, c.Is}), sg = be.alloc({T, 1});
  const Backend::Product of_x[] = {
      {&logits, m.router}, {&g, m.sh_gate}, {&u, m.sh_up}, {&sg, m.sh_gate_w, {.act = Act::Sigmoid}}};
  be.matmul_group(of_x, x);
  Tensor ids = be.alloc({T, c.top_k}, ElemType::I32), wts = be.alloc({T, c.top_k});
  be.route_softmax_topk(ids, wts, logits, RouterSpec{static_cast<int>(c.top_k), c.norm_topk});
  be.moe_experts(y, x, ids, wts, m.experts);
  be.swiglu(g, g, u);
  be.matmul_epilogue(y, g, *m.sh_down, {.row_scale = &sg, .accumulate = true});  // y += sg ⊙ shared(x)
}

}  // namespace bloomery
