// glm5_next (GLM-5.3-Flash): 4 mHC streams, KDA and NoPE MLA-DSA token mixers (indexer selection shared
// across layers where indexer_types says "shared"), dense / sigmoid-routed MoE with clamped SwiGLU, and the
// NextN draft layer. The math follows models.md §4 and transformers' modeling_glm5_next.py, in order.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "models/batch_rows.h"
#include "models/model.h"
#include "models/model_registry.h"
#include "models/spec_state.h"
#include "models/tp_shard.h"

namespace bloomery {

namespace {

using Shape = std::vector<int64_t>;

// ---------------------------------------------------------------------------------------------- config

struct GlmConfig {
  int64_t V, D, L, H;
  int64_t q_lora, kv_lora, dqk, dv;
  int64_t Hi, dI, topk, pool;
  int64_t Hl, dl, conv_k;
  bool has_lower;
  float lower;
  int64_t Id, E, top_k, I, n_shared, n_group, topk_group;
  bool norm_topk;
  float routed_scaling, swiglu_limit;
  int64_t n, sinkhorn;
  float hc_eps, eps;
  bool tie;
  std::vector<bool> is_dsa, is_sparse, shared_index;  // per layer
};

[[noreturn]] void bad_field(const std::string& field, const std::string& expected, const std::string& found) {
  raise("E_CFG_FIELD_VALUE", Where{"config.json", "", field}, expected, found);
}

std::vector<std::string> str_list(const nlohmann::json& c, const char* key) {
  std::vector<std::string> out;
  if (c.contains(key) && c[key].is_array())
    for (const auto& v : c[key]) out.push_back(v.get<std::string>());
  return out;
}

GlmConfig read_config(const nlohmann::json& c) {
  GlmConfig k{};
  k.V = cfg_int(c, "vocab_size");
  k.D = cfg_int(c, "hidden_size");
  k.L = cfg_int(c, "num_hidden_layers");
  k.H = cfg_int(c, "num_attention_heads");
  if (cfg_int(c, "num_key_value_heads", k.H) != k.H)
    bad_field("num_key_value_heads", "num_attention_heads",
              std::to_string(cfg_int(c, "num_key_value_heads")));
  k.q_lora = cfg_int(c, "q_lora_rank");
  k.kv_lora = cfg_int(c, "kv_lora_rank");
  if (cfg_int(c, "qk_rope_head_dim", 0) != 0)
    bad_field("qk_rope_head_dim", "0 (NoPE)", std::to_string(cfg_int(c, "qk_rope_head_dim")));
  k.dqk = cfg_int(c, "qk_nope_head_dim");
  k.dv = cfg_int(c, "v_head_dim");
  k.Hi = cfg_int(c, "index_n_heads");
  k.dI = cfg_int(c, "index_head_dim");
  k.topk = cfg_int(c, "index_topk");
  k.pool = cfg_int(c, "index_kpool", 16);
  if (k.pool < 1 || k.topk % k.pool != 0)
    bad_field("index_topk", "a multiple of index_kpool", std::to_string(k.topk));
  if (!cfg_bool(c, "index_kpool_always_select_tail", true))
    bad_field("index_kpool_always_select_tail", "true", "false");
  // KDA: linear_attn_config (when present) overrides the flat fields, as in transformers.
  const nlohmann::json empty = nlohmann::json::object();
  const nlohmann::json& la = c.contains("linear_attn_config") && c["linear_attn_config"].is_object()
                                 ? c["linear_attn_config"]
                                 : empty;
  k.Hl = cfg_int(la, "num_heads", cfg_int(c, "linear_num_heads", 64));
  k.dl = cfg_int(la, "head_dim", cfg_int(c, "linear_head_dim", 128));
  k.conv_k = cfg_int(la, "short_conv_kernel_size", cfg_int(c, "linear_conv_kernel_dim", 4));
  const nlohmann::json* lb = nullptr;
  if (la.contains("gate_lower_bound") && !la["gate_lower_bound"].is_null())
    lb = &la["gate_lower_bound"];
  else if (c.contains("linear_lower_bound") && !c["linear_lower_bound"].is_null())
    lb = &c["linear_lower_bound"];
  k.has_lower = lb != nullptr || (la.is_object() && !la.empty() && cfg_bool(la, "safe_gate", true));
  k.lower = lb ? lb->get<float>() : -5.0f;
  k.Id = cfg_int(c, "intermediate_size");
  k.E = cfg_int(c, "n_routed_experts");
  k.top_k = cfg_int(c, "num_experts_per_tok");
  k.I = cfg_int(c, "moe_intermediate_size");
  k.n_shared = cfg_int(c, "n_shared_experts", 1);
  k.n_group = cfg_int(c, "n_group", 1);
  k.topk_group = cfg_int(c, "topk_group", 1);
  k.norm_topk = cfg_bool(c, "norm_topk_prob", true);
  k.routed_scaling = static_cast<float>(cfg_num(c, "routed_scaling_factor", 1.0));
  k.swiglu_limit = static_cast<float>(cfg_num(c, "swiglu_limit", 10.0));
  k.n = cfg_int(c, "hc_mult", 4);
  k.sinkhorn = cfg_int(c, "hc_sinkhorn_iters", 20);
  k.hc_eps = static_cast<float>(cfg_num(c, "hc_eps", 1e-6));
  k.eps = static_cast<float>(cfg_num(c, "rms_norm_eps", 1e-5));
  k.tie = cfg_bool(c, "tie_word_embeddings", false);
  // Layer schedules (defaults as transformers' Glm5NextTextConfig).
  auto lt = str_list(c, "layer_types");
  if (lt.empty())
    for (int64_t i = 0; i < k.L; ++i)
      lt.push_back(i % 4 != 3 ? "linear_attention" : "deepseek_sparse_attention");
  auto mt = str_list(c, "mlp_layer_types");
  if (mt.empty())
    for (int64_t i = 0; i < k.L; ++i) mt.push_back(i < 3 ? "dense" : "sparse");
  // indexer_types, else index_topk_pattern ("FSSF…" or a list), else the freq / offset schedule
  // (transformers).
  auto it = str_list(c, "indexer_types");
  if (it.empty() && c.contains("index_topk_pattern") && c["index_topk_pattern"].is_string()) {
    for (char ch : c["index_topk_pattern"].get<std::string>()) {
      if (ch != 'F' && ch != 'S') bad_field("index_topk_pattern", "letters F and S", std::string(1, ch));
      it.push_back(ch == 'F' ? "full" : "shared");
    }
  } else if (it.empty()) {
    it = str_list(c, "index_topk_pattern");
  }
  if (it.empty()) {
    const int64_t freq = std::max<int64_t>(cfg_int(c, "index_topk_freq", 1), 1);
    const int64_t offset = cfg_int(c, "index_skip_topk_offset", 2);
    for (int64_t i = 0; i < k.L; ++i)
      it.push_back(std::max<int64_t>(i - offset + 1, 0) % freq == 0 ? "full" : "shared");
  }
  if (static_cast<int64_t>(lt.size()) != k.L || static_cast<int64_t>(mt.size()) != k.L ||
      static_cast<int64_t>(it.size()) != k.L)
    bad_field("layer_types", std::to_string(k.L) + " entries per schedule",
              std::to_string(lt.size()) + "/" + std::to_string(mt.size()) + "/" + std::to_string(it.size()));
  for (int64_t i = 0; i < k.L; ++i) {
    k.is_dsa.push_back(lt[i] != "linear_attention");
    k.is_sparse.push_back(mt[i] == "sparse");
    k.shared_index.push_back(it[i] == "shared");
    // Only DSA layers read it; a shared one needs the selection of a DSA layer with its own indexer right
    // before.
    if (!k.is_dsa[i]) k.shared_index[i] = false;
    if (k.shared_index[i] && (i == 0 || !k.is_dsa[i - 1] || k.shared_index[i - 1]))
      bad_field("indexer_types", "\"shared\" only right after a DSA layer with its own indexer",
                "\"shared\" at layer " + std::to_string(i));
  }
  return k;
}

// ---------------------------------------------------------------------------------------------- weights

struct Mhc {
  const Weight *fn, *base, *scale;
};

struct Kda {
  const Weight *q, *k, *v, *q_conv, *k_conv, *v_conv, *f_a, *f_b, *dt_bias, *A_log, *b, *g_a, *g_b, *o_norm,
      *o;
};

struct Dsa {
  const Weight *q_a, *q_a_norm, *q_b, *kv_a, *kv_a_norm, *kv_b, *o;
  bool indexer = false;
  const Weight *wq_b, *wk, *k_norm_w, *k_norm_b, *weights, *gate, *ape;
};

struct Mlp {
  bool sparse = false;
  const Weight *gate = nullptr, *up = nullptr, *down = nullptr;  // dense MLP, or the shared expert
  const Weight *router = nullptr, *bias = nullptr;
  std::vector<ExpertWeights> experts;
};

struct Layer {
  bool dsa = false;
  Mhc attn_hc{}, ffn_hc{};
  const Weight *in_norm = nullptr, *post_norm = nullptr;
  Kda kda{};
  Dsa att{};
  Mlp mlp;
};

struct NextN {
  bool present = false;
  const Weight *enorm, *hnorm, *eh_proj, *head_norm, *head;
  Layer layer;
};

// ---------------------------------------------------------------------------------------------- state

struct DsaCache {
  Tensor latent, keys, gates, pools;  // [cap, kv_lora], [cap, dI] ×2, [cap / P + 1, dI]
};

struct GlmState : SequenceState {
  std::vector<Tensor> conv_q, conv_k, conv_v, rec;  // per KDA layer
  std::vector<DsaCache> dsa;                        // per DSA layer
  DsaCache draft;
  int64_t index_ties = 0;   // queries whose indexer top-k was decided by an exact score tie
  int64_t router_ties = 0;  // tokens whose expert choice was decided by an exact tie
};

// ---------------------------------------------------------------------------------------------- model

class Glm5Next final : public BatchedModel {
 public:
  explicit Glm5Next(const ModelConfig& mc) : mc_(mc), c_(read_config(mc.text)), tp_(mc) {
    if (tp_.on()) shard_config();
    info_.family = "glm5_next";
    info_.vocab_size = c_.V;
    info_.hidden_size = c_.D;
    info_.draft_hidden_size = c_.D;
    info_.eos_ids = cfg_eos_ids(mc.text);
    info_.max_positions = cfg_int(mc.text, "max_position_embeddings", 0);
  }

  const ModelInfo& info() const override { return info_; }

  std::vector<TensorDecl> declare() const override {
    std::vector<TensorDecl> d;
    const std::string P = mc_.prefix;
    d.push_back({P + "embed_tokens.weight", {c_.V, c_.D}});
    d.push_back({P + "norm.weight", {c_.D}});
    if (!c_.tie)
      d.push_back({"lm_head.weight", {vocab_local(), c_.D}, false, false, tp_.rows(vocab_local())});
    for (int64_t l = 0; l < c_.L; ++l) {
      const std::string p = P + "layers." + std::to_string(l) + ".";
      const int64_t mix = (2 + c_.n) * c_.n;
      for (const char* site : {"attn", "ffn"}) {
        d.push_back({p + "hc_" + site + "_fn", {mix, c_.n * c_.D}});
        d.push_back({p + "hc_" + site + "_base", {mix}});
        d.push_back({p + "hc_" + site + "_scale", {3}});
      }
      declare_block(d, p, c_.is_dsa[l], !c_.shared_index[l], c_.is_sparse[l], false);
    }
    // NextN layer at index L (optional; transformers' own exports drop it), cut like the main layers under
    // TP; its own head (when shipped) by vocabulary like lm_head.
    const std::string x = P + "layers." + std::to_string(c_.L) + ".";
    d.push_back({x + "enorm.weight", {c_.D}, true});
    d.push_back({x + "hnorm.weight", {c_.D}, true});
    d.push_back({x + "eh_proj.weight", {c_.D, 2 * c_.D}, true});
    d.push_back({x + "shared_head.norm.weight", {c_.D}, true});
    d.push_back({x + "shared_head.head.weight",
                 {split_head() ? vocab_local() : c_.V, c_.D},
                 true,
                 false,
                 split_head() ? tp_.rows(vocab_local()) : TensorCut{}});
    declare_block(d, x, true, true, true, true);
    return d;
  }

  void bind(Backend& be, const WeightSet& w) override {
    const std::string P = mc_.prefix;
    embed_ = &w.get(P + "embed_tokens.weight");
    norm_ = &w.get(P + "norm.weight");
    lm_head_ = c_.tie ? embed_ : &w.get("lm_head.weight");
    layers_.resize(c_.L);
    for (int64_t l = 0; l < c_.L; ++l) {
      const std::string p = P + "layers." + std::to_string(l) + ".";
      Layer& L = layers_[l];
      L = bind_block(w, p, c_.is_dsa[l], !c_.shared_index[l], c_.is_sparse[l]);
      L.attn_hc = {&w.get(p + "hc_attn_fn"), &w.get(p + "hc_attn_base"), &w.get(p + "hc_attn_scale")};
      L.ffn_hc = {&w.get(p + "hc_ffn_fn"), &w.get(p + "hc_ffn_base"), &w.get(p + "hc_ffn_scale")};
    }
    const std::string x = P + "layers." + std::to_string(c_.L) + ".";
    nextn_.present = w.find(x + "eh_proj.weight") && w.find(x + "self_attn.q_a_proj.weight");
    if (nextn_.present) {
      nextn_.enorm = &w.get(x + "enorm.weight");
      nextn_.hnorm = &w.get(x + "hnorm.weight");
      nextn_.eh_proj = &w.get(x + "eh_proj.weight");
      nextn_.head_norm = &w.get(x + "shared_head.norm.weight");
      nextn_.head = w.find(x + "shared_head.head.weight") ? &w.get(x + "shared_head.head.weight") : lm_head_;
      nextn_.layer = bind_block(w, x, true, true, true);
    }
    info_.has_draft = nextn_.present;
    bound_ = true;
  }

  std::unique_ptr<SequenceState> new_state(Backend& be, int64_t capacity) const override {
    auto s = std::make_unique<GlmState>();
    s->capacity = capacity;
    const int64_t qd = c_.Hl * c_.dl;
    s->conv_q.resize(c_.L);
    s->conv_k.resize(c_.L);
    s->conv_v.resize(c_.L);
    s->rec.resize(c_.L);
    s->dsa.resize(c_.L);
    for (int64_t l = 0; l < c_.L; ++l) {
      if (c_.is_dsa[l]) {
        s->dsa[l] = new_dsa_cache(be, capacity);
      } else {
        s->conv_q[l] = be.alloc({qd, c_.conv_k - 1});
        s->conv_k[l] = be.alloc({qd, c_.conv_k - 1});
        s->conv_v[l] = be.alloc({qd, c_.conv_k - 1});
        s->rec[l] = be.alloc({c_.Hl, c_.dl, c_.dl});
      }
    }
    if (nextn_.present) s->draft = new_dsa_cache(be, capacity + 1);
    return s;
  }

  std::vector<StatePart> state_parts(SequenceState& base) const override {
    auto& st = static_cast<GlmState&>(base);
    std::vector<StatePart> p;
    auto dsa_parts = [&](const std::string& name, DsaCache& d, int64_t rows) {
      p.push_back({name + ".latent", &d.latent, rows});
      p.push_back({name + ".index_keys", &d.keys, rows});
      p.push_back({name + ".index_gates", &d.gates, rows});
      p.push_back({name + ".index_pools", &d.pools, rows / c_.pool});  // complete pools only
    };
    for (int64_t l = 0; l < c_.L; ++l) {
      const std::string L = "layers." + std::to_string(l);
      if (c_.is_dsa[l]) {
        dsa_parts(L + ".dsa", st.dsa[l], st.pos);
      } else {
        p.push_back({L + ".conv_q", &st.conv_q[l]});
        p.push_back({L + ".conv_k", &st.conv_k[l]});
        p.push_back({L + ".conv_v", &st.conv_v[l]});
        p.push_back({L + ".rec", &st.rec[l]});
      }
    }
    if (st.draft.latent.defined()) dsa_parts("nextn", st.draft, st.draft_pos);
    return p;
  }

  // A verify's copies: every KDA layer's three conv states and its recurrent state once.
  uint64_t spec_bytes() const override {
    const int64_t qd = c_.Hl * c_.dl;
    int64_t elems = 0;
    for (int64_t l = 0; l < c_.L; ++l)
      if (!c_.is_dsa[l]) elems += 3 * qd * (c_.conv_k - 1) + c_.Hl * c_.dl * c_.dl;
    return static_cast<uint64_t>(elems) * sizeof(float);
  }

  // The bytes new_state(capacity) allocates: the same tensors, counted. Before bind (the memory plan) an
  // upper bound: the optional NextN layer's cache is counted.
  uint64_t state_bytes(int64_t capacity) const override {
    const int64_t qd = c_.Hl * c_.dl;
    int64_t elems = 0;  // f32 KDA state
    uint64_t caches = 0;
    for (int64_t l = 0; l < c_.L; ++l) {
      if (c_.is_dsa[l])
        caches += dsa_cache_bytes(capacity);
      else
        elems += 3 * qd * (c_.conv_k - 1) + c_.Hl * c_.dl * c_.dl;
    }
    // Before bind the NextN layer counts as present (it is declared; the checkpoint may not ship it, or its
    // cuts may not fit the stored formats under TP).
    if (nextn_.present || !bound_) caches += dsa_cache_bytes(capacity + 1);
    return static_cast<uint64_t>(elems) * sizeof(float) + caches;
  }

  // Token-wise work (mHC pre/post, norms, projections, routers, experts, the head) runs over the rows of all
  // entries at once; the token mixers (KDA convs + delta rule, the DSA indexer, latent cache and MLA) per
  // entry on its rows with its own state.
  std::vector<ForwardResult> forward_batch(Backend& be, std::span<const BatchEntry> entries) override {
    const BatchRows b = batch_rows(entries, c_.V);
    const int64_t T = b.total, D = c_.D, n = c_.n;
    const size_t N = entries.size();
    std::vector<GlmState*> st;
    std::vector<int64_t> ties_before;
    for (const BatchEntry& e : entries) {
      st.push_back(static_cast<GlmState*>(e.state));
      ties_before.push_back(st.back()->index_ties + st.back()->router_ties);
    }
    std::vector<MlpSlot> ms;
    for (size_t i = 0; i < N; ++i) ms.push_back({b.e[i].r0, b.e[i].T, &st[i]->router_ties});

    // X = [E[tok]] × n streams
    Tensor e = be.alloc({T, D});
    be.gather_rows(e, *embed_, b.tok);
    Tensor X = be.alloc({T, n * D});
    for (int64_t s = 0; s < n; ++s) be.put_cols(X, e, s * D);

    Tensor post = be.alloc({T, n}), comb = be.alloc({T, n, n}), h = be.alloc({T, D});
    // Per entry: a full indexer's selection, kept for the "shared" layer right after it.
    std::vector<Tensor> shared_sel(N);
    for (int64_t l = 0; l < c_.L; ++l) {
      const Layer& L = layers_[l];
      be.mhc_pre(h, post, comb, X, *L.attn_hc.fn, *L.attn_hc.base, *L.attn_hc.scale, mhc_spec());
      be.rms_norm(h, h, L.in_norm, c_.eps, NormKind::Plain);
      Tensor y;
      if (L.dsa) {
        std::vector<Tensor> sel(N);
        std::vector<DsaSlot> ds;
        for (size_t i = 0; i < N; ++i) {
          if (c_.shared_index[l]) sel[i] = shared_sel[i];
          ds.push_back({&st[i]->dsa[l], b.e[i].p0, b.e[i].r0, b.e[i].T, &sel[i], &st[i]->index_ties});
        }
        y = dsa(be, L.att, h, ds);
        const bool next_shares = c_.shared_index[std::min(l + 1, c_.L - 1)] && !c_.shared_index[l];
        for (size_t i = 0; i < N; ++i) shared_sel[i] = next_shares ? sel[i] : Tensor();
      } else {
        std::vector<KdaSlot> ks;
        for (size_t i = 0; i < N; ++i) {
          GlmState& si = *st[i];
          ks.push_back({spec_fork(be, si, si.conv_q[l]),
                        spec_fork(be, si, si.conv_k[l]),
                        spec_fork(be, si, si.conv_v[l]),
                        spec_fork(be, si, si.rec[l]),
                        b.e[i].r0,
                        b.e[i].T,
                        entries[i].speculative ? &si : nullptr,
                        {&si.conv_q[l], &si.conv_k[l], &si.conv_v[l], &si.rec[l]}});
        }
        y = kda(be, L.kda, h, ks);
        for (Tensor& s : shared_sel) s = Tensor();
      }
      tp_.all_reduce(be, y, "mixer all-reduce");  // row-parallel o_proj partials (KDA or MLA)
      be.mhc_post(X, y, post, comb);
      be.mhc_pre(h, post, comb, X, *L.ffn_hc.fn, *L.ffn_hc.base, *L.ffn_hc.scale, mhc_spec());
      be.rms_norm(h, h, L.post_norm, c_.eps, NormKind::Plain);
      y = mlp(be, L.mlp, h, ms);
      tp_.all_reduce(be, y, "MLP all-reduce");  // dense or shared + routed expert partials, one sum
      be.mhc_post(X, y, post, comb);
      be.step_layer_done();
    }
    batch_advance(entries);
    for (size_t i = 0; i < N; ++i) report_ties(*st[i], ties_before[i]);

    // Unweighted stream mean, then the final norm; this hidden also feeds the NextN layer (§4.13).
    Tensor hidden = be.alloc({T, D});
    be.stream_mean(hidden, X, static_cast<int>(n));
    be.rms_norm(hidden, hidden, norm_, c_.eps, NormKind::Plain);
    if (!tp_.on() || c_.tie) return batch_logits(be, entries, b, hidden, *lm_head_);
    return batch_logits(be, entries, b, hidden, *lm_head_, {},
                        [&](const Tensor& l) { return tp_.gather_cols(be, l, "vocabulary all-gather"); });
  }

  ForwardResult draft(Backend& be, SequenceState& state, const Tensor& hidden,
                      std::span<const int32_t> next_ids) override {
    const DraftEntry one{&state, hidden, next_ids};
    return std::move(draft_batch(be, std::span(&one, 1))[0]);
  }

  // Every entry's rows in one pass; DSA per entry on its own draft caches.
  std::vector<ForwardResult> draft_batch(Backend& be, std::span<const DraftEntry> entries) override {
    if (!nextn_.present) return Model::draft_batch(be, entries);
    const int64_t D = c_.D;
    const DraftRows d = draft_rows(be, entries, D, "glm5_next draft", [](const SequenceState& s) {
      return static_cast<const GlmState&>(s).draft.latent.dim(0);
    });
    const int64_t T = d.total;
    std::vector<int64_t> ties_before;
    for (const DraftEntry& en : entries) {
      const auto& st = static_cast<GlmState&>(*en.state);
      ties_before.push_back(st.index_ties + st.router_ties);
    }
    // x = W_eh [RMSNorm(E[tok]; enorm) ; RMSNorm(h; hnorm)]   (embedding first)
    Tensor e = be.alloc({T, D}), hn = be.alloc({T, D}), cat = be.alloc({T, 2 * D});
    be.gather_rows(e, *embed_, d.tok);
    be.rms_norm(e, e, nextn_.enorm, c_.eps, NormKind::Plain);
    be.rms_norm(hn, d.hidden, nextn_.hnorm, c_.eps, NormKind::Plain);
    be.put_cols(cat, e, 0);
    be.put_cols(cat, hn, D);
    Tensor x = be.alloc({T, D});
    be.matmul(x, cat, *nextn_.eh_proj);
    // A plain pre-norm residual block (no mHC) with its own DSA caches.
    const Layer& L = nextn_.layer;
    Tensor h = be.alloc({T, D});
    be.rms_norm(h, x, L.in_norm, c_.eps, NormKind::Plain);
    std::vector<Tensor> none(entries.size());  // no shared selection: each entry's indexer selects
    std::vector<DsaSlot> ds;
    std::vector<MlpSlot> ms;
    for (size_t i = 0; i < entries.size(); ++i) {
      auto& st = static_cast<GlmState&>(*entries[i].state);
      ds.push_back({&st.draft, d.e[i].p0, d.e[i].r0, d.e[i].T, &none[i], &st.index_ties});
      ms.push_back({d.e[i].r0, d.e[i].T, &st.router_ties});
    }
    Tensor y = dsa(be, L.att, h, ds);
    tp_.all_reduce(be, y, "draft mixer all-reduce");  // cut like the main layers (models.md §4.12)
    be.add(x, x, y);
    be.rms_norm(h, x, L.post_norm, c_.eps, NormKind::Plain);
    y = mlp(be, L.mlp, h, ms);
    tp_.all_reduce(be, y, "draft MLP all-reduce");
    be.add(x, x, y);
    be.rms_norm(x, x, nextn_.head_norm, c_.eps, NormKind::Plain);
    for (size_t i = 0; i < entries.size(); ++i)
      report_ties(static_cast<GlmState&>(*entries[i].state), ties_before[i]);
    if (!any_logits(entries)) return draft_results(entries, d, x, Tensor());  // a catch-up: no head
    const std::vector<int64_t> heads = draft_head_counts(entries, d);
    // Its own head is cut like lm_head, so either is this rank's vocabulary share when lm_head is.
    const Tensor logits = tp_.head_logits(be, head_rows(be, x, d.e, heads), *nextn_.head, split_head(),
                                          "draft vocabulary all-gather");
    return draft_results(entries, d, x, logits);
  }

 private:
  // An exact tie at a top-k cut (DSA indexer or expert router) makes the choice order-dependent
  // (transformers' topk is unspecified there, ours keeps the lower index): say so once per sequence, on
  // stderr.
  static void report_ties(GlmState& st, int64_t before) {
    if (before == 0 && st.index_ties + st.router_ties > 0)
      std::fprintf(stderr, "bloomery: glm5_next top-k decided by an exact tie (indexer %lld, router %lld)\n",
                   static_cast<long long>(st.index_ties), static_cast<long long>(st.router_ties));
  }

  MhcSpec mhc_spec() const {
    MhcSpec s;
    s.n = static_cast<int>(c_.n);
    s.norm_eps = c_.eps;
    s.hc_eps = c_.hc_eps;
    s.sinkhorn_iters = static_cast<int>(c_.sinkhorn);
    return s;
  }

  // ---- declarations ----
  void declare_block(std::vector<TensorDecl>& d, const std::string& p, bool dsa, bool indexer, bool sparse,
                     bool opt) const {
    // TP (models.md §4.12): MLA and KDA by head (q_a, kv_a, the indexer, f_a and g_a replicated, so every
    // rank keeps the full latent cache), o_proj by column; experts, shared experts and the dense MLP on I.
    auto add = [&](const std::string& n, Shape s, TensorCut cut = {}) {
      d.push_back({n, std::move(s), opt, false, std::move(cut)});
    };
    add(p + "input_layernorm.weight", {c_.D});
    add(p + "post_attention_layernorm.weight", {c_.D});
    const std::string a = p + "self_attn.";
    if (dsa) {
      add(a + "q_a_proj.weight", {c_.q_lora, c_.D});
      add(a + "q_a_layernorm.weight", {c_.q_lora});
      add(a + "q_b_proj.weight", {c_.H * c_.dqk, c_.q_lora}, tp_.rows(c_.H, c_.dqk));
      add(a + "kv_a_proj_with_mqa.weight", {c_.kv_lora, c_.D});
      add(a + "kv_a_layernorm.weight", {c_.kv_lora});
      add(a + "kv_b_proj.weight", {c_.H * (c_.dqk + c_.dv), c_.kv_lora}, tp_.rows(c_.H, c_.dqk + c_.dv));
      add(a + "o_proj.weight", {c_.D, c_.H * c_.dv}, tp_.cols(c_.H, c_.dv));
      if (indexer) {
        d.push_back({a + "indexer.wq_b.weight", {c_.Hi * c_.dI, c_.q_lora}, opt});
        d.push_back({a + "indexer.wk.weight", {c_.dI, c_.D}, opt});
        d.push_back({a + "indexer.k_norm.weight", {c_.dI}, opt});
        d.push_back({a + "indexer.k_norm.bias", {c_.dI}, opt});
        d.push_back({a + "indexer.weights_proj.weight", {c_.Hi, c_.D}, opt});
        d.push_back({a + "indexer.index_kpool_compress_gate", {c_.dI, c_.D}, opt});
        d.push_back({a + "indexer.index_kpool_compress_ape", {c_.pool, c_.dI}, opt});
      }
    } else {
      const int64_t qd = c_.Hl * c_.dl;
      for (const char* pr : {"q_proj", "k_proj", "v_proj"}) add(a + pr + ".weight", {qd, c_.D}, tp_.rows(qd));
      for (const char* cv : {"q_conv1d", "k_conv1d", "v_conv1d"})
        add(a + cv + ".weight", {qd, 1, c_.conv_k}, tp_.rows(qd));
      add(a + "f_a_proj.weight", {c_.dl, c_.D});
      add(a + "f_b_proj.weight", {qd, c_.dl}, tp_.rows(qd));
      add(a + "dt_bias", {qd}, tp_.rows(qd));
      // [H] or Kimi-style [1, 1, H, 1]: checked by element count in kda_gate (under TP only [H] is cut).
      add(a + "A_log", tp_.on() ? Shape{c_.Hl} : Shape{}, tp_.rows(c_.Hl));
      add(a + "b_proj.weight", {c_.Hl, c_.D}, tp_.rows(c_.Hl));
      add(a + "g_a_proj.weight", {c_.dl, c_.D});
      add(a + "g_b_proj.weight", {qd, c_.dl}, tp_.rows(qd));
      add(a + "o_norm.weight", {c_.dl});
      add(a + "o_proj.weight", {c_.D, qd}, tp_.cols(qd));
    }
    const std::string m = p + "mlp.";
    if (sparse) {
      add(m + "gate.weight", {c_.E, c_.D});
      add(m + "gate.e_score_correction_bias", {c_.E});
      for (int64_t e = 0; e < c_.E; ++e) {
        const std::string x = m + "experts." + std::to_string(e) + ".";
        add(x + "gate_proj.weight", {c_.I, c_.D}, tp_.rows(c_.I));
        add(x + "up_proj.weight", {c_.I, c_.D}, tp_.rows(c_.I));
        add(x + "down_proj.weight", {c_.D, c_.I}, tp_.cols(c_.I));
      }
      const int64_t Is = c_.I * c_.n_shared;
      add(m + "shared_experts.gate_proj.weight", {Is, c_.D}, tp_.rows(Is));
      add(m + "shared_experts.up_proj.weight", {Is, c_.D}, tp_.rows(Is));
      add(m + "shared_experts.down_proj.weight", {c_.D, Is}, tp_.cols(Is));
    } else {
      add(m + "gate_proj.weight", {c_.Id, c_.D}, tp_.rows(c_.Id));
      add(m + "up_proj.weight", {c_.Id, c_.D}, tp_.rows(c_.Id));
      add(m + "down_proj.weight", {c_.D, c_.Id}, tp_.cols(c_.Id));
    }
  }

  Layer bind_block(const WeightSet& w, const std::string& p, bool dsa, bool indexer, bool sparse) const {
    Layer L;
    L.dsa = dsa;
    L.in_norm = &w.get(p + "input_layernorm.weight");
    L.post_norm = &w.get(p + "post_attention_layernorm.weight");
    const std::string a = p + "self_attn.";
    if (dsa) {
      L.att.q_a = &w.get(a + "q_a_proj.weight");
      L.att.q_a_norm = &w.get(a + "q_a_layernorm.weight");
      L.att.q_b = &w.get(a + "q_b_proj.weight");
      L.att.kv_a = &w.get(a + "kv_a_proj_with_mqa.weight");
      L.att.kv_a_norm = &w.get(a + "kv_a_layernorm.weight");
      L.att.kv_b = &w.get(a + "kv_b_proj.weight");
      L.att.o = &w.get(a + "o_proj.weight");
      L.att.indexer = indexer;
      if (indexer) {
        L.att.wq_b = &w.get(a + "indexer.wq_b.weight");
        L.att.wk = &w.get(a + "indexer.wk.weight");
        L.att.k_norm_w = &w.get(a + "indexer.k_norm.weight");
        L.att.k_norm_b = &w.get(a + "indexer.k_norm.bias");
        L.att.weights = &w.get(a + "indexer.weights_proj.weight");
        L.att.gate = &w.get(a + "indexer.index_kpool_compress_gate");
        L.att.ape = &w.get(a + "indexer.index_kpool_compress_ape");
      }
    } else {
      L.kda = {&w.get(a + "q_proj.weight"),   &w.get(a + "k_proj.weight"),   &w.get(a + "v_proj.weight"),
               &w.get(a + "q_conv1d.weight"), &w.get(a + "k_conv1d.weight"), &w.get(a + "v_conv1d.weight"),
               &w.get(a + "f_a_proj.weight"), &w.get(a + "f_b_proj.weight"), &w.get(a + "dt_bias"),
               &w.get(a + "A_log"),           &w.get(a + "b_proj.weight"),   &w.get(a + "g_a_proj.weight"),
               &w.get(a + "g_b_proj.weight"), &w.get(a + "o_norm.weight"),   &w.get(a + "o_proj.weight")};
    }
    const std::string m = p + "mlp.";
    L.mlp.sparse = sparse;
    if (sparse) {
      L.mlp.router = &w.get(m + "gate.weight");
      L.mlp.bias = &w.get(m + "gate.e_score_correction_bias");
      for (int64_t e = 0; e < c_.E; ++e) {
        const std::string x = m + "experts." + std::to_string(e) + ".";
        L.mlp.experts.push_back(
            {&w.get(x + "gate_proj.weight"), &w.get(x + "up_proj.weight"), &w.get(x + "down_proj.weight")});
      }
      L.mlp.gate = &w.get(m + "shared_experts.gate_proj.weight");
      L.mlp.up = &w.get(m + "shared_experts.up_proj.weight");
      L.mlp.down = &w.get(m + "shared_experts.down_proj.weight");
    } else {
      L.mlp.gate = &w.get(m + "gate_proj.weight");
      L.mlp.up = &w.get(m + "up_proj.weight");
      L.mlp.down = &w.get(m + "down_proj.weight");
    }
    return L;
  }

  // A DSA layer's cache bytes: the MLA latent (K and V at once) in kv_type, the indexer's keys, gates and
  // pools in f32.
  uint64_t dsa_cache_bytes(int64_t cap) const {
    return static_cast<uint64_t>(cap * c_.kv_lora) * elem_size(mc_.kv_type) +
           static_cast<uint64_t>(2 * cap * c_.dI + (cap / c_.pool + 1) * c_.dI) * sizeof(float);
  }

  DsaCache new_dsa_cache(Backend& be, int64_t cap) const {
    DsaCache d;
    d.latent = be.alloc({cap, c_.kv_lora}, mc_.kv_type);
    d.keys = be.alloc({cap, c_.dI});
    d.gates = be.alloc({cap, c_.dI});
    d.pools = be.alloc({cap / c_.pool + 1, c_.dI});
    return d;
  }

  // ---- the math ----

  // One entry's share of a KDA layer: its conv and recurrent states, its rows.
  struct KdaSlot {
    Tensor cq, ck, cv, rec;
    int64_t r0, T;
    SequenceState* spec;  // a speculative entry's state (its replays are recorded), else null
    Tensor* slot[4];      // the state's own cq, ck, cv, rec (the above are copies when speculative)
  };
  // One entry's share of a DSA layer: its caches, the cache index of its first row, its rows, its selection
  // (in: a shared selection for a layer without indexer; out: this layer's) and its tie counter.
  struct DsaSlot {
    DsaCache* cache;
    int64_t slot0, r0, T;
    Tensor* sel;
    int64_t* ties;
  };
  // One entry's rows for the router (its expert-choice ties are counted per sequence).
  struct MlpSlot {
    int64_t r0, T;
    int64_t* ties;
  };

  // KDA (§4.6): short convs, per-channel forget gate, delta rule, sigmoid-gated F32 norm. Projections, gates
  // and norms over all rows; the convs and the delta rule per entry.
  Tensor kda(Backend& be, const Kda& w, const Tensor& h, std::span<KdaSlot> slots) const {
    const int64_t T = h.rows(), qd = c_.Hl * c_.dl;
    auto proj_conv = [&](const Weight& proj, const Weight& conv, Tensor KdaSlot::*state, int which) {
      Tensor x = be.alloc({T, qd}), y = be.alloc({T, c_.Hl, c_.dl});
      be.matmul(x, h, proj);
      Tensor y2 = y.view({T, qd});
      for (KdaSlot& s : slots) {
        Tensor ys = y2.slice(s.r0, s.T);
        be.causal_conv1d(ys, x.slice(s.r0, s.T), conv, s.*state, 1, Act::Silu);
        spec_conv_replay(s.spec, s.slot[which], x.slice(s.r0, s.T), &conv, 1, Act::Silu);
      }
      return y;
    };
    Tensor q = proj_conv(*w.q, *w.q_conv, &KdaSlot::cq, 0);
    Tensor k = proj_conv(*w.k, *w.k_conv, &KdaSlot::ck, 1);
    Tensor v = proj_conv(*w.v, *w.v_conv, &KdaSlot::cv, 2);
    Tensor fa = be.alloc({T, c_.dl}), f = be.alloc({T, qd});
    be.matmul(fa, h, *w.f_a);
    be.matmul(f, fa, *w.f_b);
    Tensor g = be.alloc({T, c_.Hl, c_.dl});
    be.kda_gate(g, f, *w.dt_bias, *w.A_log, c_.has_lower, c_.lower);
    Tensor beta = be.alloc({T, c_.Hl});
    be.matmul_epilogue(beta, h, *w.b, {.act = Act::Sigmoid});
    Tensor o = be.alloc({T, c_.Hl, c_.dl});
    for (KdaSlot& s : slots) {
      Tensor os = o.slice(s.r0, s.T);
      be.kda_rule(os, q.slice(s.r0, s.T), k.slice(s.r0, s.T), v.slice(s.r0, s.T), g.slice(s.r0, s.T),
                  beta.slice(s.r0, s.T), s.rec, s.T > 1 && !s.spec);  // verify rows: the step form
      spec_kda_replay(s.spec, s.slot[3], q.slice(s.r0, s.T), k.slice(s.r0, s.T), v.slice(s.r0, s.T),
                      g.slice(s.r0, s.T), beta.slice(s.r0, s.T));
    }
    Tensor ga = be.alloc({T, c_.dl}), gate = be.alloc({T, qd});
    be.matmul(ga, h, *w.g_a);
    be.matmul(gate, ga, *w.g_b);
    Tensor on = be.alloc({T, qd});
    be.rms_norm_gated(on, o.view({T, qd}), gate, *w.o_norm, c_.eps, Act::Sigmoid);
    Tensor y = be.alloc({T, c_.D});
    be.matmul(y, on, *w.o);
    return y;
  }

  // MLA-DSA (§4.7). Projections and norms over all rows; the latent cache writes, the indexer's append and
  // selection and the MLA attention per entry.
  Tensor dsa(Backend& be, const Dsa& w, const Tensor& h, std::span<const DsaSlot> slots) const {
    const int64_t T = h.rows();
    Tensor qa = be.alloc({T, c_.q_lora});
    be.matmul(qa, h, *w.q_a);
    be.rms_norm(qa, qa, w.q_a_norm, c_.eps, NormKind::Plain);  // q_res
    Tensor q = be.alloc({T, c_.H, c_.dqk});
    Tensor q2 = q.view({T, c_.H * c_.dqk});
    be.matmul(q2, qa, *w.q_b);
    Tensor lat = be.alloc({T, c_.kv_lora});
    be.matmul(lat, h, *w.kv_a);
    be.rms_norm(lat, lat, w.kv_a_norm, c_.eps, NormKind::Plain);
    Tensor qi, k, gs, wts;
    if (w.indexer) {
      qi = be.alloc({T, c_.Hi, c_.dI});
      Tensor qi2 = qi.view({T, c_.Hi * c_.dI});
      be.matmul(qi2, qa, *w.wq_b);
      k = be.alloc({T, c_.dI});
      gs = be.alloc({T, c_.dI});
      wts = be.alloc({T, c_.Hi});
      be.matmul(k, h, *w.wk);
      be.layer_norm(k, k, *w.k_norm_w, *w.k_norm_b, 1e-6f);
      be.matmul(gs, h, *w.gate);
      be.matmul_epilogue(wts, h, *w.weights, {.pre = 1.0f / std::sqrt(static_cast<float>(c_.Hi))});
    }
    Tensor o = be.alloc({T, c_.H, c_.dv});
    for (const DsaSlot& s : slots) {
      DsaCache& cache = *s.cache;
      const int64_t S = s.slot0 + s.T;
      Tensor dst = cache.latent.slice(s.slot0, s.T);
      be.copy(dst, lat.slice(s.r0, s.T));
      Tensor& sel = *s.sel;
      if (w.indexer) {
        be.dsa_index_append(cache.keys, cache.gates, cache.pools, k.slice(s.r0, s.T), gs.slice(s.r0, s.T),
                            s.slot0, *w.ape);
        sel = be.alloc({s.T, S});
        *s.ties += be.dsa_index_select(sel, qi.slice(s.r0, s.T), wts.slice(s.r0, s.T), cache.pools, s.slot0,
                                       static_cast<int>(c_.pool), static_cast<int>(c_.topk));
      } else if (!sel.defined() || sel.rows() != s.T || sel.cols() != S) {
        raise("E_MODEL_SHARED_INDEX", Where{"", "", "indexer_types"},
              "a selection from the previous DSA layer", "none");
      }
      Tensor os = o.slice(s.r0, s.T);
      be.mla_attention(os, q.slice(s.r0, s.T), cache.latent.slice(0, S), *w.kv_b, s.slot0,
                       1.0f / std::sqrt(static_cast<float>(c_.dqk)), sel);
    }
    Tensor y = be.alloc({T, c_.D});
    be.matmul(y, o.view({T, c_.H * c_.dv}), *w.o);
    return y;
  }

  // Dense clamped SwiGLU MLP, or sigmoid-routed experts plus the ungated shared expert (§4.8). Everything
  // over all rows but the routing, which runs per entry so that each sequence counts its own router ties.
  Tensor mlp(Backend& be, const Mlp& m, const Tensor& h, std::span<const MlpSlot> slots) const {
    const int64_t T = h.rows();
    const int64_t inner = m.gate->rows();
    Tensor g = be.alloc({T, inner}), u = be.alloc({T, inner}), y = be.alloc({T, c_.D});
    be.matmul(g, h, *m.gate);
    be.matmul(u, h, *m.up);
    be.swiglu(g, g, u, c_.swiglu_limit);
    be.matmul(y, g, *m.down);
    if (!m.sparse) return y;
    Tensor logits = be.alloc({T, c_.E});
    be.matmul(logits, h, *m.router);
    Tensor ids = be.alloc({T, c_.top_k}, ElemType::I32), wts = be.alloc({T, c_.top_k});
    SigmoidRouterSpec rs;
    rs.top_k = static_cast<int>(c_.top_k);
    rs.n_group = static_cast<int>(c_.n_group);
    rs.topk_group = static_cast<int>(c_.topk_group);
    rs.renormalize = c_.norm_topk;
    rs.routed_scaling = c_.routed_scaling;
    for (const MlpSlot& s : slots) {
      Tensor is = ids.slice(s.r0, s.T), ws = wts.slice(s.r0, s.T);
      *s.ties += be.route_sigmoid_topk(is, ws, logits.slice(s.r0, s.T), m.bias, rs);
    }
    Tensor routed = be.alloc({T, c_.D});
    be.moe_experts(routed, h, ids, wts, m.experts, c_.swiglu_limit);
    be.add(y, routed, y);
    return y;
  }

  // The rank's share of every split size (models.md §4.12), refused by name where the world size does not
  // divide. mHC, the indexer and the routers stay replicated.
  void shard_config() {
    c_.H = tp_.split(c_.H, "MLA heads");
    c_.Hl = tp_.split(c_.Hl, "KDA heads");
    c_.I = tp_.split(c_.I, "expert intermediate channels");
    c_.Id = tp_.split(c_.Id, "MLP intermediate channels");
    if (!c_.tie) tp_.split(c_.V, "vocabulary rows");
  }
  bool split_head() const { return tp_.on() && !c_.tie; }  // lm_head (and the NextN head) cut by vocabulary
  int64_t vocab_local() const { return split_head() ? c_.V / tp_.size : c_.V; }

  ModelConfig mc_;
  GlmConfig c_;
  TpShard tp_;
  ModelInfo info_;
  const Weight *embed_ = nullptr, *norm_ = nullptr, *lm_head_ = nullptr;
  std::vector<Layer> layers_;
  NextN nextn_;
  bool bound_ = false;
};

}  // namespace

std::unique_ptr<Model> make_glm5_next(const ModelConfig& config) {
  return std::make_unique<Glm5Next>(config);
}

}  // namespace bloomery
