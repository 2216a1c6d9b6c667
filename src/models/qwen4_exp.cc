// qwen4_exp (Qwen3.8-Flash-Next): 4 gated-residual streams, GDN and QSA token mixers, MoE, PLE hashed
// n-grams, and the MTP draft layer. The math follows models.md §3 and transformers' modeling_qwen4_exp.py, in
// order.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cpu/ple_hash.h"
#include "models/model.h"
#include "models/model_registry.h"

namespace bloomery {

namespace {

using Shape = std::vector<int64_t>;

// ---------------------------------------------------------------------------------------------- config

struct Qwen4Config {
  int64_t V, D, L, H, Hkv, hd;
  int64_t Hk, Hv, dk, dv, conv_k;
  int64_t E, top_k, I, Is;
  bool norm_topk;
  int64_t n, r;                        // hc_count, hc_lowrank
  std::vector<int64_t> ple_layer_ids;  // one-indexed
  int64_t ple_dim, ple_conv_k, ngram_size, heads_per_ngram, ngram_base, ngram_div, seed;
  int64_t Hi, dI, budget, compress;
  double theta;
  int64_t rot;
  float eps;
  int64_t eos;
  bool tie;
  Act gdn_gate_act;
  std::vector<bool> is_qsa;  // per layer
};

Qwen4Config read_config(const nlohmann::json& c) {
  Qwen4Config k{};
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
  k.n = cfg_int(c, "hc_count", 4);
  k.r = cfg_int(c, "hc_lowrank", 320);
  if (c.contains("ple_layer_ids") && c["ple_layer_ids"].is_array())
    for (const auto& v : c["ple_layer_ids"]) k.ple_layer_ids.push_back(v.get<int64_t>());
  k.ple_dim = cfg_int(c, "ple_embed_dim", k.D);
  k.ple_conv_k = cfg_int(c, "ple_conv_kernel_size", 4);
  k.ngram_size = cfg_int(c, "ngram_size", 3);
  k.heads_per_ngram = cfg_int(c, "heads_per_ngram", 8);
  k.ngram_base = cfg_int(c, "ngram_vocab_size_base", 20000000);
  k.ngram_div = cfg_int(c, "make_ngram_vocab_size_divisible_by", 128);
  k.seed = cfg_int(c, "seed", 1234);
  k.Hi = cfg_int(c, "indexer_n_heads");
  k.dI = cfg_int(c, "indexer_head_dim");
  k.budget = cfg_int(c, "indexer_budget");
  k.compress = cfg_int(c, "indexer_compress_ratio");
  if (cfg_int(c, "indexer_kv_heads", 1) != 1)
    raise("E_CFG_FIELD_VALUE", Where{"config.json", "", "indexer_kv_heads"}, "1",
          std::to_string(cfg_int(c, "indexer_kv_heads")));
  if (k.compress <= 0 || k.budget % k.compress != 0)
    raise("E_CFG_FIELD_VALUE", Where{"config.json", "", "indexer_budget"},
          "a multiple of indexer_compress_ratio", std::to_string(k.budget));
  // RoPE: rope_parameters (transformers 5) or legacy top-level keys; partial_rotary_factor defaults to 1.0
  // here.
  const nlohmann::json empty = nlohmann::json::object();
  const nlohmann::json& rp =
      c.contains("rope_parameters") && c["rope_parameters"].is_object() ? c["rope_parameters"] : empty;
  k.theta = cfg_num(rp, "rope_theta", cfg_num(c, "rope_theta", 10000.0));
  const double prf = cfg_num(rp, "partial_rotary_factor", cfg_num(c, "partial_rotary_factor", 1.0));
  k.rot = static_cast<int64_t>(static_cast<double>(k.hd) * prf);
  if (k.rot > k.dI)
    raise("E_CFG_FIELD_VALUE", Where{"config.json", "", "partial_rotary_factor"},
          "rotary dims <= indexer_head_dim " + std::to_string(k.dI), std::to_string(k.rot));
  k.eps = static_cast<float>(cfg_num(c, "rms_norm_eps", 1e-6));
  const auto eos = cfg_eos_ids(c);
  k.eos = eos.empty() ? -1 : eos[0];
  if (!k.ple_layer_ids.empty() && k.eos < 0)
    raise("E_CFG_FIELD_MISSING", Where{"config.json", "", "eos_token_id"}, "set when PLE layers exist",
          "absent");
  k.tie = cfg_bool(c, "tie_word_embeddings", false);
  const std::string ogt = cfg_str(c, "output_gate_type", "");
  const std::string act = ogt.empty() ? cfg_str(c, "hidden_act", "silu") : ogt;
  k.gdn_gate_act = act == "sigmoid" ? Act::Sigmoid : Act::Silu;
  // layer_types: "linear_attention" = GDN; "full_attention" / "qwen_sparse_attention" = QSA.
  if (c.contains("layer_types") && c["layer_types"].is_array()) {
    for (const auto& t : c["layer_types"]) k.is_qsa.push_back(t.get<std::string>() != "linear_attention");
  } else {
    const int64_t every = cfg_int(c, "full_attention_interval", 4);
    for (int64_t i = 0; i < k.L; ++i) k.is_qsa.push_back((i + 1) % every == 0);
  }
  if (static_cast<int64_t>(k.is_qsa.size()) != k.L)
    raise("E_CFG_FIELD_VALUE", Where{"config.json", "", "layer_types"}, std::to_string(k.L) + " entries",
          std::to_string(k.is_qsa.size()));
  for (int64_t id : k.ple_layer_ids)
    if (id < 1 || id > k.L || k.is_qsa[id - 1])
      raise("E_CFG_FIELD_VALUE", Where{"config.json", "", "ple_layer_ids"},
            "one-indexed ids of linear-attention layers", std::to_string(id));
  return k;
}

// ---------------------------------------------------------------------------------------------- weights

struct HyperConn {
  const Weight *norm = nullptr, *down = nullptr, *up = nullptr, *inject = nullptr;
};

struct Moe {
  const Weight *router = nullptr, *sh_gate = nullptr, *sh_up = nullptr, *sh_down = nullptr,
               *sh_gate_w = nullptr;
  std::vector<ExpertWeights> experts;
};

struct Gdn {
  const Weight *qkv, *z, *b, *a, *conv, *A_log, *dt_bias, *norm, *out;
};

struct Qsa {
  const Weight *q, *k, *v, *o, *q_norm, *k_norm, *idx_qk, *idx_q_norm, *idx_k_norm;
};

struct Ple {
  int index = 0;  // position in ple_layer_ids
  const Weight *table, *key, *value, *norm_key, *norm_query, *norm_conv, *conv;
  cpu::PleHash hash;
};

struct Layer {
  bool qsa = false;
  HyperConn attn_hc, mlp_hc;
  Gdn gdn{};
  Qsa att{};
  Moe moe;
  bool has_ple = false;
  Ple ple{};
};

struct Draft {
  bool present = false;
  const Weight *fc_e, *fc_h, *norm_e, *norm_h;
  HyperConn mixer;
  Layer layer;
};

// ---------------------------------------------------------------------------------------------- state

struct QsaCache {
  Tensor K, V, raw, blocks;  // [cap, Hkv, hd] ×2, [cap, dI], [cap / c + 1, dI]
};

struct Qwen4State : SequenceState {
  std::vector<Tensor> conv, rec;  // per layer (GDN): [convdim, K−1], [Hv, dk, dv]
  std::vector<QsaCache> qsa;      // per layer (QSA)
  std::vector<cpu::PleContext> ple_ctx;
  std::vector<Tensor> ple_conv;  // [n·D, (K−1)·ngram_size]
  QsaCache draft;
  int64_t index_ties = 0;  // queries whose indexer top-k was decided by an exact score tie
};

// ---------------------------------------------------------------------------------------------- model

class Qwen4Exp final : public Model {
 public:
  explicit Qwen4Exp(const ModelConfig& mc) : mc_(mc), c_(read_config(mc.text)) {
    info_.family = "qwen4_exp";
    info_.vocab_size = c_.V;
    info_.hidden_size = c_.D;
    info_.draft_hidden_size = c_.n * c_.D;
    info_.eos_ids = cfg_eos_ids(mc.text);
    info_.max_positions = cfg_int(mc.text, "max_position_embeddings", 0);
  }

  const ModelInfo& info() const override { return info_; }

  std::vector<TensorDecl> declare() const override {
    std::vector<TensorDecl> d;
    const std::string P = mc_.prefix;
    const int64_t nD = c_.n * c_.D;
    d.push_back({P + "embed_tokens.weight", {c_.V, c_.D}});
    if (!c_.tie) d.push_back({"lm_head.weight", {c_.V, c_.D}});
    declare_hc(d, P + "hyper_connection_mixer.", false, false);
    for (int64_t l = 0; l < c_.L; ++l) {
      const std::string p = P + "layers." + std::to_string(l) + ".";
      declare_layer(d, p, c_.is_qsa[l], false);
      const int pi = ple_index(l);
      if (pi >= 0) {
        const cpu::PleHash h = hash_for(pi);
        const int64_t G = h.heads(), de = c_.ple_dim / G;
        d.push_back({p + "ple.ple_embedding.ngram_embedding.weight", {h.padded_rows, de}, false, true});
        d.push_back({p + "ple.key_proj.weight", {nD, c_.ple_dim}});
        d.push_back({p + "ple.value_proj.weight", {c_.D, c_.ple_dim}});
        for (const char* nm : {"norm_key", "norm_query", "norm_conv"})
          d.push_back({p + "ple." + nm + ".weight", {nD}});
        d.push_back({p + "ple.conv1d.weight", {nD, 1, c_.ple_conv_k}});
      }
    }
    // MTP draft layer (optional: transformers' own exports drop it).
    d.push_back({"mtp.fc_embedding.weight", {c_.D, c_.D}, true});
    d.push_back({"mtp.fc_hidden.weight", {c_.D, c_.D}, true});
    d.push_back({"mtp.pre_fc_norm_embedding.weight", {c_.D}, true});
    d.push_back({"mtp.pre_fc_norm_hidden.weight", {nD}, true});
    declare_hc(d, "mtp.hyper_connection_mixer.", false, true);
    declare_layer(d, "mtp.layers.0.", true, true);
    return d;
  }

  void bind(Backend& be, const WeightSet& w) override {
    const std::string P = mc_.prefix;
    embed_ = &w.get(P + "embed_tokens.weight");
    lm_head_ = c_.tie ? embed_ : &w.get("lm_head.weight");
    mixer_ = bind_hc(w, P + "hyper_connection_mixer.", false);
    layers_.resize(c_.L);
    for (int64_t l = 0; l < c_.L; ++l) {
      const std::string p = P + "layers." + std::to_string(l) + ".";
      layers_[l] = bind_layer(w, p, c_.is_qsa[l]);
      const int pi = ple_index(l);
      if (pi >= 0) {
        Ple& e = layers_[l].ple;
        layers_[l].has_ple = true;
        e.index = pi;
        e.hash = hash_for(pi);
        e.table = &w.get(p + "ple.ple_embedding.ngram_embedding.weight");
        e.key = &w.get(p + "ple.key_proj.weight");
        e.value = &w.get(p + "ple.value_proj.weight");
        e.norm_key = &w.get(p + "ple.norm_key.weight");
        e.norm_query = &w.get(p + "ple.norm_query.weight");
        e.norm_conv = &w.get(p + "ple.norm_conv.weight");
        e.conv = &w.get(p + "ple.conv1d.weight");
      }
    }
    draft_.present = w.find("mtp.fc_embedding.weight") && w.find("mtp.layers.0.self_attn.q_proj.weight");
    if (draft_.present) {
      draft_.fc_e = &w.get("mtp.fc_embedding.weight");
      draft_.fc_h = &w.get("mtp.fc_hidden.weight");
      draft_.norm_e = &w.get("mtp.pre_fc_norm_embedding.weight");
      draft_.norm_h = &w.get("mtp.pre_fc_norm_hidden.weight");
      draft_.mixer = bind_hc(w, "mtp.hyper_connection_mixer.", false);
      draft_.layer = bind_layer(w, "mtp.layers.0.", true);
    }
    info_.has_draft = draft_.present;
  }

  std::unique_ptr<SequenceState> new_state(Backend& be, int64_t capacity) const override {
    auto s = std::make_unique<Qwen4State>();
    s->capacity = capacity;
    const int64_t conv_dim = 2 * c_.Hk * c_.dk + c_.Hv * c_.dv;
    s->conv.resize(c_.L);
    s->rec.resize(c_.L);
    s->qsa.resize(c_.L);
    s->ple_ctx.resize(c_.L);
    s->ple_conv.resize(c_.L);
    for (int64_t l = 0; l < c_.L; ++l) {
      if (c_.is_qsa[l]) {
        s->qsa[l] = new_qsa_cache(be, capacity);
      } else {
        s->conv[l] = be.alloc({conv_dim, c_.conv_k - 1});
        s->rec[l] = be.alloc({c_.Hv, c_.dk, c_.dv});
      }
      if (layers_.size() == static_cast<size_t>(c_.L) && layers_[l].has_ple) {
        s->ple_ctx[l] = cpu::ple_context_start(layers_[l].ple.hash);
        s->ple_conv[l] = be.alloc({c_.n * c_.D, (c_.ple_conv_k - 1) * c_.ngram_size});
      }
    }
    if (draft_.present) s->draft = new_qsa_cache(be, capacity + 1);
    return s;
  }

  ForwardResult forward(Backend& be, SequenceState& base, std::span<const int32_t> ids,
                        bool all_logits) override {
    auto& st = static_cast<Qwen4State&>(base);
    const int64_t T = static_cast<int64_t>(ids.size()), p0 = st.pos;
    if (p0 + T > st.capacity)
      raise("E_CONTEXT_FULL", Where{"", "", "tokens"}, "at most " + std::to_string(st.capacity),
            std::to_string(p0 + T));
    const int64_t D = c_.D, n = c_.n;
    std::vector<int64_t> pos(T), tok(ids.begin(), ids.end());
    for (int64_t t = 0; t < T; ++t) pos[t] = p0 + t;
    const int64_t ties_before = st.index_ties;

    // X = [E[tok]] × n streams
    Tensor e = be.alloc({T, D});
    be.gather_rows(e, *embed_, tok);
    Tensor X = be.alloc({T, n * D});
    for (int64_t s = 0; s < n; ++s) be.put_cols(X, e, s * D);

    for (int64_t l = 0; l < c_.L; ++l) {
      const Layer& L = layers_[l];
      if (L.has_ple) ple(be, L.ple, st.ple_ctx[l], st.ple_conv[l], X, tok);
      Tensor inj = be.alloc({T, n});
      Tensor u = hc_read(be, L.attn_hc, X, &inj);
      Tensor y = L.qsa ? qsa(be, L.att, st.qsa[l], u, pos, p0, 0, st.index_ties)
                       : gdn(be, L.gdn, st.conv[l], st.rec[l], u);
      be.hc_inject(X, y, inj);
      u = hc_read(be, L.mlp_hc, X, &inj);
      y = moe(be, L.moe, u);
      be.hc_inject(X, y, inj);
    }
    st.pos += T;
    st.history.insert(st.history.end(), ids.begin(), ids.end());
    report_ties(st, ties_before);

    ForwardResult r;
    r.hidden = X;  // the multi-stream X before the final mixer is what the MTP layer reads (§3.13)
    Tensor last = all_logits ? X : X.slice(T - 1, 1);
    Tensor h = hc_read(be, mixer_, last, nullptr);
    r.logits = be.alloc({last.rows(), c_.V});
    be.matmul(r.logits, h, *lm_head_);
    return r;
  }

  ForwardResult draft(Backend& be, SequenceState& base, const Tensor& hidden,
                      std::span<const int32_t> next_ids) override {
    if (!draft_.present) return Model::draft(be, base, hidden, next_ids);
    auto& st = static_cast<Qwen4State&>(base);
    const int64_t T = static_cast<int64_t>(next_ids.size()), p0 = st.draft_pos, D = c_.D, n = c_.n;
    if (hidden.rows() != T || hidden.cols() != n * D)
      backend_shape_error("qwen4_exp draft",
                          "hidden [" + std::to_string(T) + ", " + std::to_string(n * D) + "]",
                          hidden.shape_str());
    if (p0 + T > st.draft.K.dim(0))
      raise("E_CONTEXT_FULL", Where{"", "", "draft tokens"}, "at most " + std::to_string(st.draft.K.dim(0)),
            std::to_string(p0 + T));
    std::vector<int64_t> tok(next_ids.begin(), next_ids.end()), pos(T);
    for (int64_t t = 0; t < T; ++t) pos[t] = p0 + t + 1;  // the draft predicts from position p+1
    const int64_t ties_before = st.index_ties;

    // Eb = W_fc_e · RMSNorm1p(E[tok]);  X[s] = W_fc_h · RMSNorm1p(H; over all 4D)[s] + Eb
    Tensor e = be.alloc({T, D});
    be.gather_rows(e, *embed_, tok);
    be.rms_norm(e, e, draft_.norm_e, c_.eps, NormKind::OnePlus);
    Tensor eb = be.alloc({T, D});
    be.matmul(eb, e, *draft_.fc_e);
    Tensor hn = be.alloc({T, n * D});
    be.rms_norm(hn, hidden, draft_.norm_h, c_.eps, NormKind::OnePlus);
    Tensor X = be.alloc({T * n, D});
    be.matmul(X, hn.view({T * n, D}), *draft_.fc_h);
    X = X.view({T, n * D});
    Tensor ones = be.alloc({T, n});
    be.fill(ones, 1.0f);
    be.hc_inject(X, eb, ones);

    const Layer& L = draft_.layer;
    Tensor inj = be.alloc({T, n});
    Tensor u = hc_read(be, L.attn_hc, X, &inj);
    Tensor y = qsa(be, L.att, st.draft, u, pos, p0, 1, st.index_ties);
    be.hc_inject(X, y, inj);
    u = hc_read(be, L.mlp_hc, X, &inj);
    y = moe(be, L.moe, u);
    be.hc_inject(X, y, inj);
    st.draft_pos += T;
    report_ties(st, ties_before);

    ForwardResult r;
    r.hidden = X;
    Tensor h = hc_read(be, draft_.mixer, X, nullptr);
    r.logits = be.alloc({T, c_.V});
    be.matmul(r.logits, h, *lm_head_);
    return r;
  }

 private:
  // An exact score tie at the indexer's top-k cut makes the selection order-dependent (transformers' topk is
  // unspecified there, ours keeps the lower block): say so once per sequence, on stderr.
  static void report_ties(Qwen4State& st, int64_t before) {
    if (before == 0 && st.index_ties > 0)
      std::fprintf(stderr,
                   "bloomery: qwen4_exp QSA indexer top-k decided by an exact score tie (%lld queries)\n",
                   static_cast<long long>(st.index_ties));
  }

  // ---- declarations ----
  void declare_hc(std::vector<TensorDecl>& d, const std::string& p, bool inject, bool optional) const {
    const int64_t nD = c_.n * c_.D;
    d.push_back({p + "hc_norm.weight", {nD}, optional});
    d.push_back({p + "input_mix_weight_down.weight", {c_.r, nD}, optional});
    d.push_back({p + "input_mix_weight_up.weight", {nD, c_.r}, optional});
    if (inject) d.push_back({p + "block_inject_weight.weight", {c_.n, nD}, optional});
  }

  void declare_layer(std::vector<TensorDecl>& d, const std::string& p, bool qsa, bool opt) const {
    declare_hc(d, p + "attn_hyper_connection.", true, opt);
    declare_hc(d, p + "mlp_hyper_connection.", true, opt);
    if (qsa) {
      const std::string a = p + "self_attn.";
      d.push_back({a + "q_proj.weight", {c_.H * c_.hd * 2, c_.D}, opt});
      d.push_back({a + "k_proj.weight", {c_.Hkv * c_.hd, c_.D}, opt});
      d.push_back({a + "v_proj.weight", {c_.Hkv * c_.hd, c_.D}, opt});
      d.push_back({a + "o_proj.weight", {c_.D, c_.H * c_.hd}, opt});
      d.push_back({a + "q_norm.weight", {c_.hd}, opt});
      d.push_back({a + "k_norm.weight", {c_.hd}, opt});
      d.push_back({a + "indexer.index_qk_proj.weight", {(c_.Hi + 1) * c_.dI, c_.D}, opt});
      d.push_back({a + "indexer.q_layernorm.weight", {c_.dI}, opt});
      d.push_back({a + "indexer.k_layernorm.weight", {c_.dI}, opt});
    } else {
      const std::string a = p + "linear_attn.";
      const int64_t conv_dim = 2 * c_.Hk * c_.dk + c_.Hv * c_.dv;
      d.push_back({a + "in_proj_qkv.weight", {conv_dim, c_.D}, opt});
      d.push_back({a + "in_proj_z.weight", {c_.Hv * c_.dv, c_.D}, opt});
      d.push_back({a + "in_proj_b.weight", {c_.Hv, c_.D}, opt});
      d.push_back({a + "in_proj_a.weight", {c_.Hv, c_.D}, opt});
      d.push_back({a + "conv1d.weight", {conv_dim, 1, c_.conv_k}, opt});
      d.push_back({a + "A_log", {c_.Hv}, opt});
      d.push_back({a + "dt_bias", {c_.Hv}, opt});
      d.push_back({a + "norm.weight", {c_.dv}, opt});
      d.push_back({a + "out_proj.weight", {c_.D, c_.Hv * c_.dv}, opt});
    }
    const std::string m = p + "mlp.";
    d.push_back({m + "gate.weight", {c_.E, c_.D}, opt});
    for (int64_t e = 0; e < c_.E; ++e) {
      const std::string x = m + "experts." + std::to_string(e) + ".";
      d.push_back({x + "gate_proj.weight", {c_.I, c_.D}, opt});
      d.push_back({x + "up_proj.weight", {c_.I, c_.D}, opt});
      d.push_back({x + "down_proj.weight", {c_.D, c_.I}, opt});
    }
    d.push_back({m + "shared_expert.gate_proj.weight", {c_.Is, c_.D}, opt});
    d.push_back({m + "shared_expert.up_proj.weight", {c_.Is, c_.D}, opt});
    d.push_back({m + "shared_expert.down_proj.weight", {c_.D, c_.Is}, opt});
    d.push_back({m + "shared_expert_gate.weight", {1, c_.D}, opt});
  }

  HyperConn bind_hc(const WeightSet& w, const std::string& p, bool inject) const {
    HyperConn h;
    h.norm = &w.get(p + "hc_norm.weight");
    h.down = &w.get(p + "input_mix_weight_down.weight");
    h.up = &w.get(p + "input_mix_weight_up.weight");
    if (inject) h.inject = &w.get(p + "block_inject_weight.weight");
    return h;
  }

  Layer bind_layer(const WeightSet& w, const std::string& p, bool qsa) const {
    Layer L;
    L.qsa = qsa;
    L.attn_hc = bind_hc(w, p + "attn_hyper_connection.", true);
    L.mlp_hc = bind_hc(w, p + "mlp_hyper_connection.", true);
    if (qsa) {
      const std::string a = p + "self_attn.";
      L.att = {&w.get(a + "q_proj.weight"),
               &w.get(a + "k_proj.weight"),
               &w.get(a + "v_proj.weight"),
               &w.get(a + "o_proj.weight"),
               &w.get(a + "q_norm.weight"),
               &w.get(a + "k_norm.weight"),
               &w.get(a + "indexer.index_qk_proj.weight"),
               &w.get(a + "indexer.q_layernorm.weight"),
               &w.get(a + "indexer.k_layernorm.weight")};
    } else {
      const std::string a = p + "linear_attn.";
      L.gdn = {&w.get(a + "in_proj_qkv.weight"),
               &w.get(a + "in_proj_z.weight"),
               &w.get(a + "in_proj_b.weight"),
               &w.get(a + "in_proj_a.weight"),
               &w.get(a + "conv1d.weight"),
               &w.get(a + "A_log"),
               &w.get(a + "dt_bias"),
               &w.get(a + "norm.weight"),
               &w.get(a + "out_proj.weight")};
    }
    const std::string m = p + "mlp.";
    L.moe.router = &w.get(m + "gate.weight");
    for (int64_t e = 0; e < c_.E; ++e) {
      const std::string x = m + "experts." + std::to_string(e) + ".";
      L.moe.experts.push_back(
          {&w.get(x + "gate_proj.weight"), &w.get(x + "up_proj.weight"), &w.get(x + "down_proj.weight")});
    }
    L.moe.sh_gate = &w.get(m + "shared_expert.gate_proj.weight");
    L.moe.sh_up = &w.get(m + "shared_expert.up_proj.weight");
    L.moe.sh_down = &w.get(m + "shared_expert.down_proj.weight");
    L.moe.sh_gate_w = &w.get(m + "shared_expert_gate.weight");
    return L;
  }

  int ple_index(int64_t layer) const {
    for (size_t i = 0; i < c_.ple_layer_ids.size(); ++i)
      if (c_.ple_layer_ids[i] == layer + 1) return static_cast<int>(i);
    return -1;
  }

  cpu::PleHash hash_for(int pi) const {
    return cpu::make_ple_hash(c_.V, static_cast<int>(c_.ngram_size), static_cast<int>(c_.heads_per_ngram),
                              c_.ngram_base, c_.ngram_div, c_.seed, pi, c_.eos);
  }

  QsaCache new_qsa_cache(Backend& be, int64_t cap) const {
    QsaCache q;
    q.K = be.alloc({cap, c_.Hkv, c_.hd});
    q.V = be.alloc({cap, c_.Hkv, c_.hd});
    q.raw = be.alloc({cap, c_.dI});
    q.blocks = be.alloc({cap / c_.compress + 1, c_.dI});
    return q;
  }

  RopeSpec rope_spec() const {
    RopeSpec r;
    r.rot_dim = static_cast<int>(c_.rot);
    r.theta = c_.theta;
    return r;  // M-RoPE with equal position rows (text) is plain RoPE (models.md §1.4)
  }

  // ---- the math ----

  // Gated-residual read (§3.5): u = mean_s σ(W_up silu(W_down Xn / n))[s] ⊙ Xn[s]; inj = 2σ(W_inj Xn / n).
  Tensor hc_read(Backend& be, const HyperConn& h, const Tensor& X, Tensor* inj) const {
    const int64_t T = X.rows(), n = c_.n, D = c_.D;
    Tensor xn = be.alloc({T, n * D});
    be.rms_norm(xn, X, h.norm, c_.eps, NormKind::OnePlus, D);
    Tensor a = be.alloc({T, c_.r});
    be.matmul(a, xn, *h.down);
    be.scale(a, a, 1.0f / static_cast<float>(n));
    be.activate(a, a, Act::Silu);
    Tensor m = be.alloc({T, n * D});
    be.matmul(m, a, *h.up);
    Tensor u = be.alloc({T, D});
    be.hc_read_mix(u, m, xn, static_cast<int>(n));
    if (inj && h.inject) {
      be.matmul(*inj, xn, *h.inject);
      be.scale(*inj, *inj, 1.0f / static_cast<float>(n));
      be.activate(*inj, *inj, Act::Sigmoid);
      be.scale(*inj, *inj, 2.0f);
    }
    return u;
  }

  // PLE (§3.6): X += G + silu(dilated conv(Gn)).
  void ple(Backend& be, const Ple& p, cpu::PleContext& ctx, Tensor& conv_state, Tensor& X,
           const std::vector<int64_t>& tok) const {
    const int64_t T = X.rows(), n = c_.n, D = c_.D, G = p.hash.heads(), de = c_.ple_dim / G;
    std::vector<int64_t> rows(T * G);
    for (int64_t t = 0; t < T; ++t) cpu::ple_rows_and_advance(p.hash, ctx, tok[t], rows.data() + t * G);
    Tensor e = be.alloc({T * G, de});
    be.gather_rows(e, *p.table, rows);
    e = e.view({T, G * de});
    Tensor kn = be.alloc({T, n * D});
    be.matmul(kn, e, *p.key);
    be.rms_norm(kn, kn, p.norm_key, c_.eps, NormKind::OnePlus, D);
    Tensor v = be.alloc({T, D});
    be.matmul(v, e, *p.value);
    Tensor qn = be.alloc({T, n * D});
    be.rms_norm(qn, X, p.norm_query, c_.eps, NormKind::OnePlus, D);
    Tensor g = be.alloc({T, n * D});
    be.ple_gate(g, kn, qn, v);
    Tensor gn = be.alloc({T, n * D});
    be.rms_norm(gn, g, p.norm_conv, c_.eps, NormKind::OnePlus, D);
    Tensor conv = be.alloc({T, n * D});
    be.causal_conv1d(conv, gn, *p.conv, conv_state, static_cast<int>(c_.ngram_size), Act::Silu);
    be.add(X, X, g);
    be.add(X, X, conv);
  }

  // Gated DeltaNet, flat layout (§3.7).
  Tensor gdn(Backend& be, const Gdn& w, Tensor& conv_state, Tensor& rec, const Tensor& u) const {
    const int64_t T = u.rows(), kd = c_.Hk * c_.dk, vd = c_.Hv * c_.dv;
    Tensor qkv = be.alloc({T, 2 * kd + vd});
    be.matmul(qkv, u, *w.qkv);
    Tensor c = be.alloc({T, 2 * kd + vd});
    be.causal_conv1d(c, qkv, *w.conv, conv_state, 1, Act::Silu);
    Tensor q = be.alloc({T, c_.Hk, c_.dk}), k = be.alloc({T, c_.Hk, c_.dk}), v = be.alloc({T, c_.Hv, c_.dv});
    Tensor q2 = q.view({T, kd}), k2 = k.view({T, kd}), v2 = v.view({T, vd});
    be.take_cols(q2, c, 0);
    be.take_cols(k2, c, kd);
    be.take_cols(v2, c, 2 * kd);
    Tensor z = be.alloc({T, vd});
    be.matmul(z, u, *w.z);
    Tensor b = be.alloc({T, c_.Hv}), a = be.alloc({T, c_.Hv});
    be.matmul(b, u, *w.b);
    be.matmul(a, u, *w.a);
    Tensor g = be.alloc({T, c_.Hv}), beta = be.alloc({T, c_.Hv});
    be.gdn_gates(g, beta, a, b, *w.A_log, *w.dt_bias);  // g = −exp(A_log)·softplus(a + dt_bias); β = σ(b)
    Tensor o = be.alloc({T, c_.Hv, c_.dv});
    be.gated_delta_rule(o, q, k, v, g, beta, rec, true, T > 1);
    Tensor on = be.alloc({T, vd});
    be.rms_norm_gated(on, o.view({T, vd}), z, *w.norm, c_.eps, c_.gdn_gate_act);
    Tensor y = be.alloc({T, c_.D});
    be.matmul(y, on, *w.out);
    return y;
  }

  // QSA (§3.8): block indexer selection, then gated GQA attention over the selected keys.
  // slot0: cache index of the first token; pos: its RoPE positions; pos_offset = pos − cache index.
  Tensor qsa(Backend& be, const Qsa& w, QsaCache& cache, const Tensor& u, const std::vector<int64_t>& pos,
             int64_t slot0, int64_t pos_offset, int64_t& ties) const {
    const int64_t T = u.rows(), H = c_.H, hd = c_.hd, Hkv = c_.Hkv, S = slot0 + T;
    const RopeSpec rs = rope_spec();
    // indexer
    Tensor qk = be.alloc({T, (c_.Hi + 1) * c_.dI});
    be.matmul(qk, u, *w.idx_qk);
    Tensor qi = be.alloc({T, c_.Hi, c_.dI});
    Tensor qi2 = qi.view({T, c_.Hi * c_.dI});
    be.take_cols(qi2, qk, 0);
    be.rms_norm(qi2, qi2, w.idx_q_norm, c_.eps, NormKind::OnePlus, c_.dI);
    be.rope(qi, pos, rs);
    Tensor kraw = be.alloc({T, c_.dI});
    be.take_cols(kraw, qk, c_.Hi * c_.dI);
    QsaIndexSpec spec;
    spec.compress = static_cast<int>(c_.compress);
    spec.block_topk = static_cast<int>(c_.budget / c_.compress);
    spec.rot_dim = static_cast<int>(c_.rot);
    spec.theta = c_.theta;
    spec.eps = c_.eps;
    spec.pos_offset = pos_offset;
    be.qsa_index_append(cache.raw, cache.blocks, kraw, slot0, *w.idx_k_norm, spec);
    Tensor allowed = be.alloc({T, S});
    ties += be.qsa_index_select(allowed, qi, cache.blocks, slot0, spec);
    // attention
    Tensor qg = be.alloc({T, H * 2 * hd});
    be.matmul(qg, u, *w.q);
    qg = qg.view({T * H, 2 * hd});
    Tensor q = be.alloc({T, H, hd}), gate = be.alloc({T, H * hd});
    Tensor q2 = q.view({T * H, hd}), gate2 = gate.view({T * H, hd});
    be.take_cols(q2, qg, 0);
    be.take_cols(gate2, qg, hd);
    be.rms_norm(q2, q2, w.q_norm, c_.eps, NormKind::OnePlus, hd);
    be.rope(q, pos, rs);
    Tensor k = cache.K.slice(slot0, T), v = cache.V.slice(slot0, T);
    Tensor k2 = k.view({T, Hkv * hd}), v2 = v.view({T, Hkv * hd});
    be.matmul(k2, u, *w.k);
    be.rms_norm(k2, k2, w.k_norm, c_.eps, NormKind::OnePlus, hd);
    be.rope(k, pos, rs);
    be.matmul(v2, u, *w.v);
    Tensor o = be.alloc({T, H, hd});
    be.attention(o, q, cache.K.slice(0, S), cache.V.slice(0, S), slot0,
                 1.0f / std::sqrt(static_cast<float>(hd)), &allowed);
    Tensor og = o.view({T, H * hd});
    be.sigmoid_mul(og, og, gate);
    Tensor y = be.alloc({T, c_.D});
    be.matmul(y, og, *w.o);
    return y;
  }

  // Softmax top-k MoE with a σ-gated shared expert (§1.3).
  Tensor moe(Backend& be, const Moe& m, const Tensor& u) const {
    const int64_t T = u.rows(), D = c_.D;
    Tensor logits = be.alloc({T, c_.E});
    be.matmul(logits, u, *m.router);
    Tensor ids = be.alloc({T, c_.top_k}, ElemType::I32), wts = be.alloc({T, c_.top_k});
    RouterSpec rs;
    rs.top_k = static_cast<int>(c_.top_k);
    rs.renormalize = c_.norm_topk;
    be.route_softmax_topk(ids, wts, logits, rs);
    Tensor y = be.alloc({T, D});
    be.moe_experts(y, u, ids, wts, m.experts);
    Tensor g = be.alloc({T, c_.Is}), up = be.alloc({T, c_.Is});
    be.matmul(g, u, *m.sh_gate);
    be.matmul(up, u, *m.sh_up);
    be.swiglu(g, g, up);
    Tensor sh = be.alloc({T, D});
    be.matmul(sh, g, *m.sh_down);
    Tensor sg = be.alloc({T, 1});
    be.matmul(sg, u, *m.sh_gate_w);
    be.activate(sg, sg, Act::Sigmoid);
    be.scale_rows(sh, sh, sg);
    be.add(y, y, sh);
    return y;
  }

  ModelConfig mc_;
  Qwen4Config c_;
  ModelInfo info_;
  const Weight *embed_ = nullptr, *lm_head_ = nullptr;
  HyperConn mixer_;
  std::vector<Layer> layers_;
  Draft draft_;
};

}  // namespace

std::unique_ptr<Model> make_qwen4_exp(const ModelConfig& config) {
  return std::make_unique<Qwen4Exp>(config);
}

}  // namespace bloomery
