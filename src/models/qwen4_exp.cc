// qwen4_exp (Qwen3.8-Flash-Next): 4 gated-residual streams, GDN and QSA token mixers, MoE, PLE hashed
// n-grams, and the MTP draft layer. The math follows models.md §3 and transformers' modeling_qwen4_exp.py, in
// order.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cpu/ple_hash.h"
#include "models/batch_rows.h"
#include "models/model.h"
#include "models/model_registry.h"
#include "models/qwen_common.h"
#include "models/spec_state.h"
#include "models/tp_shard.h"

namespace bloomery {

namespace {

using Shape = std::vector<int64_t>;

// ---------------------------------------------------------------------------------------------- config

struct Qwen4Config : QwenConfig {
  int64_t n, r;                        // hc_count, hc_lowrank
  std::vector<int64_t> ple_layer_ids;  // one-indexed
  int64_t ple_dim, ple_conv_k, ngram_size, heads_per_ngram, ngram_base, ngram_div, seed;
  int64_t Hi, dI, budget, compress;
  int64_t eos;
  Act gdn_gate_act;
};

Qwen4Config read_config(const nlohmann::json& c) {
  Qwen4Config k{};
  // partial_rotary_factor defaults to 1.0 here; layer_types: "full_attention" / "qwen_sparse_attention" =
  // QSA.
  static_cast<QwenConfig&>(k) = read_qwen_config(c, 1.0, false);
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
  if (k.rot > k.dI)
    raise("E_CFG_FIELD_VALUE", Where{"config.json", "", "partial_rotary_factor"},
          "rotary dims <= indexer_head_dim " + std::to_string(k.dI), std::to_string(k.rot));
  const auto eos = cfg_eos_ids(c);
  k.eos = eos.empty() ? -1 : eos[0];
  if (!k.ple_layer_ids.empty() && k.eos < 0)
    raise("E_CFG_FIELD_MISSING", Where{"config.json", "", "eos_token_id"}, "set when PLE layers exist",
          "absent");
  const std::string ogt = cfg_str(c, "output_gate_type", "");
  const std::string act = ogt.empty() ? cfg_str(c, "hidden_act", "silu") : ogt;
  k.gdn_gate_act = act == "sigmoid" ? Act::Sigmoid : Act::Silu;
  for (int64_t id : k.ple_layer_ids)
    if (id < 1 || id > k.L || k.attn[id - 1])
      raise("E_CFG_FIELD_VALUE", Where{"config.json", "", "ple_layer_ids"},
            "one-indexed ids of linear-attention layers", std::to_string(id));
  return k;
}

// ---------------------------------------------------------------------------------------------- weights

struct HyperConn {
  const Weight *norm = nullptr, *down = nullptr, *up = nullptr, *inject = nullptr;
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
  QwenMoe moe;
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

class Qwen4Exp final : public BatchedModel {
 public:
  explicit Qwen4Exp(const ModelConfig& mc) : mc_(mc), c_(read_config(mc.text)), full_(c_), tp_(mc) {
    if (tp_.on()) shard_config();
    info_.family = "qwen4_exp";
    info_.vocab_size = c_.V;
    info_.hidden_size = c_.D;
    info_.draft_hidden_size = c_.n * c_.D;
    info_.eos_ids = cfg_eos_ids(mc.text);
    info_.max_positions = c_.max_pos;
  }

  const ModelInfo& info() const override { return info_; }

  std::vector<TensorDecl> declare() const override {
    std::vector<TensorDecl> d;
    const std::string P = mc_.prefix;
    const int64_t nD = c_.n * c_.D;
    d.push_back({P + "embed_tokens.weight", {c_.V, c_.D}});
    if (!c_.tie)
      d.push_back({"lm_head.weight", {vocab_local(), c_.D}, false, false, tp_.rows(vocab_local())});
    declare_hc(d, P + "hyper_connection_mixer.", false, false);
    for (int64_t l = 0; l < c_.L; ++l) {
      const std::string p = P + "layers." + std::to_string(l) + ".";
      declare_layer(d, p, c_.attn[l], false);
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
    // MTP draft layer (optional: transformers' own exports drop it), cut like the main layers under TP.
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
      layers_[l] = bind_layer(w, p, c_.attn[l]);
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
    bound_ = true;
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
      if (c_.attn[l]) {
        s->qsa[l] = new_qsa_cache(be, capacity);
      } else {
        s->conv[l] = be.alloc({conv_dim, c_.conv_k - 1});
        s->rec[l] = be.alloc({c_.Hv, c_.dk, c_.dv});
      }
      if (const int pi = ple_index(l); pi >= 0) {
        s->ple_ctx[l] = cpu::ple_context_start(hash_for(pi));
        s->ple_conv[l] = be.alloc({c_.n * c_.D, (c_.ple_conv_k - 1) * c_.ngram_size});
      }
    }
    if (draft_.present) s->draft = new_qsa_cache(be, capacity + 1);
    return s;
  }

  std::vector<StatePart> state_parts(SequenceState& base) const override {
    auto& st = static_cast<Qwen4State&>(base);
    std::vector<StatePart> p;
    auto qsa_parts = [&](const std::string& name, QsaCache& q, int64_t rows) {
      p.push_back({name + ".k", &q.K, rows});
      p.push_back({name + ".v", &q.V, rows});
      p.push_back({name + ".index_keys", &q.raw, rows});
      p.push_back({name + ".index_blocks", &q.blocks, rows / c_.compress});  // complete blocks only
    };
    for (int64_t l = 0; l < c_.L; ++l) {
      const std::string L = "layers." + std::to_string(l);
      if (c_.attn[l]) {
        qsa_parts(L + ".qsa", st.qsa[l], st.pos);
      } else {
        p.push_back({L + ".conv", &st.conv[l]});
        p.push_back({L + ".rec", &st.rec[l]});
      }
      if (ple_index(l) >= 0) {
        p.push_back({L + ".ple_conv", &st.ple_conv[l]});
        p.push_back({L + ".ple_ctx", nullptr, -1, &st.ple_ctx[l].prev});
      }
    }
    // The draft cache's index i holds position i + 1 (pos_offset 1); draft_pos rows are live.
    if (st.draft.K.defined()) qsa_parts("mtp", st.draft, st.draft_pos);
    return p;
  }

  // A verify's copies: every GDN layer's conv and recurrent state and every PLE conv state once.
  uint64_t spec_bytes() const override {
    const int64_t conv_dim = 2 * c_.Hk * c_.dk + c_.Hv * c_.dv;
    int64_t elems = 0;
    for (int64_t l = 0; l < c_.L; ++l) {
      if (!c_.attn[l]) elems += conv_dim * (c_.conv_k - 1) + c_.Hv * c_.dk * c_.dv;
      if (ple_index(l) >= 0) elems += c_.n * c_.D * (c_.ple_conv_k - 1) * c_.ngram_size;
    }
    return static_cast<uint64_t>(elems) * sizeof(float);
  }

  // The bytes new_state(capacity) allocates: the same tensors, counted. Before bind (the memory plan) an
  // upper bound: the optional draft layer's cache is counted.
  uint64_t state_bytes(int64_t capacity) const override {
    const int64_t conv_dim = 2 * c_.Hk * c_.dk + c_.Hv * c_.dv;
    int64_t elems = 0;  // f32 state
    uint64_t caches = 0;
    for (int64_t l = 0; l < c_.L; ++l) {
      if (c_.attn[l])
        caches += qsa_cache_bytes(capacity);
      else
        elems += conv_dim * (c_.conv_k - 1) + c_.Hv * c_.dk * c_.dv;
      if (ple_index(l) >= 0) elems += c_.n * c_.D * (c_.ple_conv_k - 1) * c_.ngram_size;
    }
    // Before bind the draft layer counts as present (it is declared; the checkpoint may not ship it, or its
    // cuts may not fit the stored formats under TP).
    if (draft_.present || !bound_) caches += qsa_cache_bytes(capacity + 1);
    return static_cast<uint64_t>(elems) * sizeof(float) + caches;
  }

  // The PLE rows forward(state, ids) will gather, layer by layer, handed to the backend ahead of time. Works
  // on a copy of each layer's n-gram context, so the state is untouched.
  void prefetch(Backend& be, const SequenceState& base, std::span<const int32_t> ids) override {
    const auto& st = static_cast<const Qwen4State&>(base);
    if (layers_.size() != static_cast<size_t>(c_.L)) return;  // not bound yet
    std::vector<int64_t> tok(ids.begin(), ids.end());
    for (int64_t l = 0; l < c_.L; ++l) {
      if (!layers_[l].has_ple || ids.empty()) continue;
      cpu::PleContext ctx = st.ple_ctx[l];
      be.prefetch_rows(*layers_[l].ple.table, ple_rows(layers_[l].ple, ctx, tok));
    }
  }

  // Token-wise work (hyper-connections, projections, norms, PLE gathers and gates, MoE, the final mix and the
  // head) runs over the rows of all entries at once; the token mixers (GDN conv + delta rule, QSA indexer +
  // attention, the PLE n-gram context and conv) per entry on its rows with its own state.
  std::vector<ForwardResult> forward_batch(Backend& be, std::span<const BatchEntry> entries) override {
    const BatchRows b = batch_rows(entries, c_.V);
    const int64_t T = b.total, D = c_.D, n = c_.n;
    std::vector<Qwen4State*> st;
    std::vector<int64_t> ties_before;
    for (const BatchEntry& e : entries) {
      st.push_back(static_cast<Qwen4State*>(e.state));
      ties_before.push_back(st.back()->index_ties);
    }

    // X = [E[tok]] × n streams
    Tensor e = be.alloc({T, D});
    be.gather_rows(e, *embed_, b.tok);
    Tensor X = be.alloc({T, n * D});
    for (int64_t s = 0; s < n; ++s) be.put_cols(X, e, s * D);

    Tensor xn;  // X normalised for the next hyper-connection read, when the inject before it made it
    for (int64_t l = 0; l < c_.L; ++l) {
      const Layer& L = layers_[l];
      if (L.has_ple) {
        xn = Tensor{};  // PLE writes X after the last inject
        std::vector<PleSlot> ps;
        for (size_t i = 0; i < st.size(); ++i) {
          Tensor& conv = st[i]->ple_conv[l];
          ps.push_back({&st[i]->ple_ctx[l], spec_fork(be, *st[i], conv), b.e[i].r0, b.e[i].T,
                        entries[i].speculative ? st[i] : nullptr, &conv});
        }
        ple(be, L.ple, ps, X, b.tok);
      }
      Tensor inj = be.alloc({T, n});
      Tensor u = hc_read(be, L.attn_hc, X, &inj, xn);
      Tensor y;
      if (L.qsa) {
        std::vector<QsaSlot> qs;
        for (size_t i = 0; i < st.size(); ++i)
          qs.push_back({&st[i]->qsa[l], &b.e[i].pos, b.e[i].p0, 0, b.e[i].r0, b.e[i].T, &st[i]->index_ties});
        y = qsa(be, L.att, u, qs);
      } else {
        std::vector<GdnSlot> gs;
        for (size_t i = 0; i < st.size(); ++i) {
          Tensor &conv = st[i]->conv[l], &rec = st[i]->rec[l];
          gs.push_back({spec_fork(be, *st[i], conv), spec_fork(be, *st[i], rec), b.e[i].r0, b.e[i].T,
                        entries[i].speculative ? st[i] : nullptr, &conv, &rec});
        }
        y = gdn(be, L.gdn, u, gs);
      }
      tp_.all_reduce(be, y, "mixer all-reduce");  // row-parallel o_proj / out_proj partials
      xn = hc_inject_norm(be, X, y, inj, L.mlp_hc.norm);
      u = hc_read(be, L.mlp_hc, X, &inj, xn);
      y = moe(be, L.moe, u);
      tp_.all_reduce(be, y, "MoE all-reduce");  // routed + shared expert partials, one sum
      // The next layer's attention read normalises X first (unless its PLE writes X in between).
      const bool next_reads = l + 1 < c_.L && !layers_[l + 1].has_ple;
      xn = hc_inject_norm(be, X, y, inj, next_reads ? layers_[l + 1].attn_hc.norm : nullptr);
      be.step_layer_done();
    }
    batch_advance(entries);
    for (size_t i = 0; i < st.size(); ++i) report_ties(*st[i], ties_before[i]);

    // The multi-stream X before the final mixer is what the MTP layer reads (§3.13).
    const auto head_in = [&](const Tensor& rows) { return hc_read(be, mixer_, rows, nullptr); };
    if (!tp_.on() || c_.tie) return batch_logits(be, entries, b, X, *lm_head_, head_in);
    return batch_logits(be, entries, b, X, *lm_head_, head_in,
                        [&](const Tensor& l) { return tp_.gather_cols(be, l, "vocabulary all-gather"); });
  }

  ForwardResult draft(Backend& be, SequenceState& state, const Tensor& hidden,
                      std::span<const int32_t> next_ids) override {
    const DraftEntry one{&state, hidden, next_ids};
    return std::move(draft_batch(be, std::span(&one, 1))[0]);
  }

  // Every entry's rows in one pass; QSA per entry on its own draft cache.
  std::vector<ForwardResult> draft_batch(Backend& be, std::span<const DraftEntry> entries) override {
    if (!draft_.present) return Model::draft_batch(be, entries);
    const int64_t D = c_.D, n = c_.n;
    const DraftRows d = draft_rows(be, entries, n * D, "qwen4_exp draft", [](const SequenceState& s) {
      return static_cast<const Qwen4State&>(s).draft.K.dim(0);
    });
    const int64_t T = d.total;
    std::vector<int64_t> ties_before;
    for (const DraftEntry& en : entries)
      ties_before.push_back(static_cast<Qwen4State&>(*en.state).index_ties);

    // Eb = W_fc_e · RMSNorm1p(E[tok]);  X[s] = W_fc_h · RMSNorm1p(H; over all 4D)[s] + Eb
    Tensor e = be.alloc({T, D});
    be.gather_rows(e, *embed_, d.tok);
    be.rms_norm(e, e, draft_.norm_e, c_.eps, NormKind::OnePlus);
    Tensor eb = be.alloc({T, D});
    be.matmul(eb, e, *draft_.fc_e);
    Tensor hn = be.alloc({T, n * D});
    be.rms_norm(hn, d.hidden, draft_.norm_h, c_.eps, NormKind::OnePlus);
    Tensor X = be.alloc({T * n, D});
    be.matmul(X, hn.view({T * n, D}), *draft_.fc_h);
    X = X.view({T, n * D});
    Tensor ones = be.alloc({T, n});
    be.fill(ones, 1.0f);
    be.hc_inject(X, eb, ones);

    const Layer& L = draft_.layer;
    Tensor inj = be.alloc({T, n});
    Tensor u = hc_read(be, L.attn_hc, X, &inj);
    std::vector<QsaSlot> slots;  // the draft predicts from position p+1: cache index i holds position i + 1
    for (size_t i = 0; i < entries.size(); ++i) {
      auto& st = static_cast<Qwen4State&>(*entries[i].state);
      slots.push_back({&st.draft, &d.e[i].pos, d.e[i].p0, 1, d.e[i].r0, d.e[i].T, &st.index_ties});
    }
    Tensor y = qsa(be, L.att, u, slots);
    tp_.all_reduce(be, y, "draft mixer all-reduce");  // cut like the main layers (models.md §3.12)
    Tensor xn = hc_inject_norm(be, X, y, inj, L.mlp_hc.norm);
    u = hc_read(be, L.mlp_hc, X, &inj, xn);
    y = moe(be, L.moe, u);
    tp_.all_reduce(be, y, "draft MoE all-reduce");
    xn = hc_inject_norm(be, X, y, inj, draft_.mixer.norm);
    for (size_t i = 0; i < entries.size(); ++i)
      report_ties(static_cast<Qwen4State&>(*entries[i].state), ties_before[i]);

    if (!any_logits(entries)) return draft_results(entries, d, X, Tensor());  // a catch-up: no head
    const std::vector<int64_t> heads = draft_head_counts(entries, d);
    Tensor h =
        hc_read(be, draft_.mixer, head_rows(be, X, d.e, heads), nullptr, head_rows(be, xn, d.e, heads));
    const Tensor logits =
        tp_.head_logits(be, h, *lm_head_, tp_.on() && !c_.tie, "draft vocabulary all-gather");
    return draft_results(entries, d, X, logits);
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
      // TP by KV head (models.md §3.12): q (with its gate) and o by q head; the indexer replicated.
      const std::string a = p + "self_attn.";
      const TensorCut kv =
          tp_.on()
              ? TensorCut::rows({{uint64_t(kv_.first * c_.hd), uint64_t((kv_.first + kv_.local) * c_.hd)}})
              : TensorCut{};
      d.push_back({a + "q_proj.weight", {c_.H * c_.hd * 2, c_.D}, opt, false, tp_.rows(c_.H, c_.hd * 2)});
      d.push_back({a + "k_proj.weight", {c_.Hkv * c_.hd, c_.D}, opt, false, kv});
      d.push_back({a + "v_proj.weight", {c_.Hkv * c_.hd, c_.D}, opt, false, kv});
      d.push_back({a + "o_proj.weight", {c_.D, c_.H * c_.hd}, opt, false, tp_.cols(c_.H, c_.hd)});
      d.push_back({a + "q_norm.weight", {c_.hd}, opt});
      d.push_back({a + "k_norm.weight", {c_.hd}, opt});
      d.push_back({a + "indexer.index_qk_proj.weight", {(c_.Hi + 1) * c_.dI, c_.D}, opt});
      d.push_back({a + "indexer.q_layernorm.weight", {c_.dI}, opt});
      d.push_back({a + "indexer.k_layernorm.weight", {c_.dI}, opt});
    } else {
      // TP by key-head group (models.md §3.12): the flat qkv rows and conv channels are three blocks (the
      // rank's q, k and v), z / b / a / A_log / dt_bias by value head, out_proj by value channel.
      const std::string a = p + "linear_attn.";
      const int64_t kd = c_.Hk * c_.dk, vd = c_.Hv * c_.dv, full_kd = full_.Hk * full_.dk;
      const int64_t conv_dim = 2 * kd + vd;
      const TensorCut qkv = tp_.rows_of({{0, kd}, {full_kd, kd}, {2 * full_kd, vd}});
      d.push_back({a + "in_proj_qkv.weight", {conv_dim, c_.D}, opt, false, qkv});
      d.push_back({a + "in_proj_z.weight", {vd, c_.D}, opt, false, tp_.rows(vd)});
      d.push_back({a + "in_proj_b.weight", {c_.Hv, c_.D}, opt, false, tp_.rows(c_.Hv)});
      d.push_back({a + "in_proj_a.weight", {c_.Hv, c_.D}, opt, false, tp_.rows(c_.Hv)});
      d.push_back({a + "conv1d.weight", {conv_dim, 1, c_.conv_k}, opt, false, qkv});
      d.push_back({a + "A_log", {c_.Hv}, opt, false, tp_.rows(c_.Hv)});
      d.push_back({a + "dt_bias", {c_.Hv}, opt, false, tp_.rows(c_.Hv)});
      d.push_back({a + "norm.weight", {c_.dv}, opt});
      d.push_back({a + "out_proj.weight", {c_.D, vd}, opt, false, tp_.cols(vd)});
    }
    declare_qwen_moe(d, p + "mlp.", c_, opt, tp_);
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
    L.moe = bind_qwen_moe(w, p + "mlp.", c_);
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

  // A QSA layer's cache bytes: K and V in kv_type, the indexer's keys and block keys in f32.
  uint64_t qsa_cache_bytes(int64_t cap) const {
    return static_cast<uint64_t>(2 * cap * c_.Hkv * c_.hd) * elem_size(mc_.kv_type) +
           static_cast<uint64_t>(cap * c_.dI + (cap / c_.compress + 1) * c_.dI) * sizeof(float);
  }

  QsaCache new_qsa_cache(Backend& be, int64_t cap) const {
    QsaCache q;
    q.K = be.alloc({cap, c_.Hkv, c_.hd}, mc_.kv_type);
    q.V = be.alloc({cap, c_.Hkv, c_.hd}, mc_.kv_type);
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

  // X += inj ⊙ y per stream (the block's write); with `norm`, also returns X normalised by it for the
  // hyper-connection read that follows (one pass where the backend fuses them), else an undefined tensor.
  Tensor hc_inject_norm(Backend& be, Tensor& X, const Tensor& y, const Tensor& inj,
                        const Weight* norm) const {
    if (!norm) {
      be.hc_inject(X, y, inj);
      return {};
    }
    Tensor xn = be.alloc(X.shape());
    be.hc_inject_norm(X, y, inj, xn, norm, c_.eps, NormKind::OnePlus, c_.D);
    return xn;
  }

  // Gated-residual read (§3.5): u = mean_s σ(W_up silu(W_down Xn / n))[s] ⊙ Xn[s]; inj = 2σ(W_inj Xn / n).
  // `ready` is Xn when the inject before made it (hc_inject_norm with h.norm), else undefined.
  Tensor hc_read(Backend& be, const HyperConn& h, const Tensor& X, Tensor* inj,
                 const Tensor& ready = {}) const {
    const int64_t T = X.rows(), n = c_.n, D = c_.D;
    Tensor xn = ready;
    if (!xn.defined()) {
      xn = be.alloc({T, n * D});
      be.rms_norm(xn, X, h.norm, c_.eps, NormKind::OnePlus, D);
    }
    Tensor a = be.alloc({T, c_.r});
    const float inv_n = 1.0f / static_cast<float>(n);
    // The down projection and the inject gate both read xn: one group.
    const Backend::Product reads[] = {{&a, h.down, {.pre = inv_n, .act = Act::Silu}},
                                      {inj, h.inject, {.pre = inv_n, .act = Act::Sigmoid, .post = 2.0f}}};
    be.matmul_group(std::span(reads).first(inj && h.inject ? 2 : 1), xn);
    Tensor u = be.alloc({T, D});
    be.hc_up_read_mix(u, a, *h.up, xn, static_cast<int>(n));
    return u;
  }

  // One entry's share of a PLE layer: its n-gram context, its conv state, its rows.
  struct PleSlot {
    cpu::PleContext* ctx;
    Tensor conv;
    int64_t r0, T;
    SequenceState* spec;  // a speculative entry's state (its replays are recorded), else null
    Tensor* conv_slot;    // the state's own conv tensor (conv is a copy when speculative)
  };
  // One entry's share of a GDN layer.
  struct GdnSlot {
    Tensor conv, rec;
    int64_t r0, T;
    SequenceState* spec;           // as PleSlot::spec
    Tensor *conv_slot, *rec_slot;  // the state's own tensors
  };
  // One entry's share of a QSA layer: its caches, positions, the cache index of its first row
  // (pos_offset = position − cache index), its rows and its tie counter.
  struct QsaSlot {
    QsaCache* cache;
    const std::vector<int64_t>* pos;
    int64_t slot0, pos_offset, r0, T;
    int64_t* ties;
  };

  // The table rows (G per token) of `tok` given the context, which advances past them.
  static std::vector<int64_t> ple_rows(const Ple& p, cpu::PleContext& ctx, std::span<const int64_t> tok) {
    const int64_t G = p.hash.heads();
    std::vector<int64_t> rows(tok.size() * G);
    for (size_t t = 0; t < tok.size(); ++t)
      cpu::ple_rows_and_advance(p.hash, ctx, tok[t], rows.data() + t * G);
    return rows;
  }

  // PLE (§3.6): X += G + silu(dilated conv(Gn)). The n-gram rows follow each entry's context and are gathered
  // per entry; the projections, norms and gate run over all rows; the dilated conv per entry.
  void ple(Backend& be, const Ple& p, std::span<PleSlot> slots, Tensor& X,
           const std::vector<int64_t>& tok) const {
    const int64_t T = X.rows(), n = c_.n, D = c_.D, G = p.hash.heads(), de = c_.ple_dim / G;
    // One gather per entry, of exactly the rows prefetch(state, ids) names for it: a backend that packs a
    // prefetched row list ahead (the CUDA host table) matches a gather by its whole id list.
    Tensor e = be.alloc({T * G, de});
    for (PleSlot& s : slots) {
      if (s.spec) {  // a verify entry's context goes back to its state before the pass plus the accepted ids
        const std::vector<int64_t> ids(tok.begin() + s.r0, tok.begin() + s.r0 + s.T);
        spec_on_partial(*s.spec, [ctx = s.ctx, saved = *s.ctx, ids, &p](Backend&, int64_t n) {
          *ctx = saved;
          ple_rows(p, *ctx, std::span(ids).first(static_cast<size_t>(n)));
        });
      }
      const auto rows = ple_rows(p, *s.ctx, std::span(tok).subspan(s.r0, s.T));
      Tensor es = e.slice(s.r0 * G, s.T * G);
      be.gather_rows(es, *p.table, rows);
    }
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
    for (PleSlot& s : slots) {
      Tensor out = conv.slice(s.r0, s.T);
      be.causal_conv1d(out, gn.slice(s.r0, s.T), *p.conv, s.conv, static_cast<int>(c_.ngram_size), Act::Silu);
      spec_conv_replay(s.spec, s.conv_slot, gn.slice(s.r0, s.T), p.conv, static_cast<int>(c_.ngram_size),
                       Act::Silu);
    }
    be.add(X, X, g);
    be.add(X, X, conv);
  }

  // Gated DeltaNet, flat layout (§3.7): projections, gates and norms over all rows; conv and delta rule per
  // entry.
  Tensor gdn(Backend& be, const Gdn& w, const Tensor& u, std::span<GdnSlot> slots) const {
    const int64_t T = u.rows(), kd = c_.Hk * c_.dk, vd = c_.Hv * c_.dv;
    Tensor qkv = be.alloc({T, 2 * kd + vd}), z = be.alloc({T, vd});
    Tensor b = be.alloc({T, c_.Hv}), a = be.alloc({T, c_.Hv});
    const Backend::Product in_proj[] = {{&qkv, w.qkv}, {&z, w.z}, {&b, w.b}, {&a, w.a}};
    be.matmul_group(in_proj, u);
    Tensor c = be.alloc({T, 2 * kd + vd});
    for (GdnSlot& s : slots) {
      Tensor out = c.slice(s.r0, s.T);
      be.causal_conv1d(out, qkv.slice(s.r0, s.T), *w.conv, s.conv, 1, Act::Silu);
      spec_conv_replay(s.spec, s.conv_slot, qkv.slice(s.r0, s.T), w.conv, 1, Act::Silu);
    }
    Tensor on = be.alloc({T, vd});
    // Decode rows (one token an entry, nothing to replay): the rest of the mixer is one block op per entry.
    if (std::ranges::all_of(slots, [](const GdnSlot& s) { return s.T == 1 && !s.spec; })) {
      for (GdnSlot& s : slots) {
        Tensor os = on.slice(s.r0, s.T);
        be.gdn_step_gated(os, c.slice(s.r0, s.T), z.slice(s.r0, s.T), a.slice(s.r0, s.T), b.slice(s.r0, s.T),
                          *w.A_log, *w.dt_bias, *w.norm, s.rec, c_.Hk, c_.dk, c_.eps, c_.gdn_gate_act);
      }
    } else {
      Tensor q = be.alloc({T, c_.Hk, c_.dk}), k = be.alloc({T, c_.Hk, c_.dk}),
             v = be.alloc({T, c_.Hv, c_.dv});
      Tensor q2 = q.view({T, kd}), k2 = k.view({T, kd}), v2 = v.view({T, vd});
      Tensor* const qkv_parts[] = {&q2, &k2, &v2};
      be.split_cols(qkv_parts, c);
      Tensor g = be.alloc({T, c_.Hv}), beta = be.alloc({T, c_.Hv});
      be.gdn_gates(g, beta, a, b, *w.A_log, *w.dt_bias);  // g = −exp(A_log)·softplus(a + dt_bias); β = σ(b)
      Tensor o = be.alloc({T, c_.Hv, c_.dv});
      for (GdnSlot& s : slots) {
        Tensor os = o.slice(s.r0, s.T);
        be.gated_delta_rule(os, q.slice(s.r0, s.T), k.slice(s.r0, s.T), v.slice(s.r0, s.T),
                            g.slice(s.r0, s.T), beta.slice(s.r0, s.T), s.rec, true,
                            s.T > 1 && !s.spec);  // verify: step form
        spec_gdn_replay(s.spec, s.rec_slot, q.slice(s.r0, s.T), k.slice(s.r0, s.T), v.slice(s.r0, s.T),
                        g.slice(s.r0, s.T), beta.slice(s.r0, s.T), true);
      }
      be.rms_norm_gated(on, o.view({T, vd}), z, *w.norm, c_.eps, c_.gdn_gate_act);
    }
    Tensor y = be.alloc({T, c_.D});
    be.matmul(y, on, *w.out);
    return y;
  }

  // QSA (§3.8): block indexer selection, then gated GQA attention over the selected keys. Projections and
  // norms over all rows; RoPE, the indexer (append + select), the cache writes and the softmax per entry.
  Tensor qsa(Backend& be, const Qsa& w, const Tensor& u, std::span<const QsaSlot> slots) const {
    const int64_t T = u.rows(), H = c_.H, hd = c_.hd, Hkv = c_.Hkv;
    const RopeSpec rs = rope_spec();
    // the indexer's and attention's projections of u
    Tensor qk = be.alloc({T, (c_.Hi + 1) * c_.dI}), qg = be.alloc({T, H * 2 * hd});
    Tensor k = be.alloc({T, Hkv, hd}), v = be.alloc({T, Hkv, hd});
    Tensor k2 = k.view({T, Hkv * hd}), v2 = v.view({T, Hkv * hd});
    const Backend::Product in_proj[] = {{&qk, w.idx_qk}, {&qg, w.q}, {&k2, w.k}, {&v2, w.v}};
    be.matmul_group(in_proj, u);
    // indexer
    Tensor qi = be.alloc({T, c_.Hi, c_.dI});
    Tensor qi2 = qi.view({T, c_.Hi * c_.dI});
    Tensor kraw = be.alloc({T, c_.dI});
    Tensor* const qk_parts[] = {&qi2, &kraw};
    be.split_cols(qk_parts, qk);
    be.rms_norm(qi2, qi2, w.idx_q_norm, c_.eps, NormKind::OnePlus, c_.dI);
    QsaIndexSpec spec;
    spec.compress = static_cast<int>(c_.compress);
    spec.block_topk = static_cast<int>(c_.budget / c_.compress);
    spec.rot_dim = static_cast<int>(c_.rot);
    spec.theta = c_.theta;
    spec.eps = c_.eps;
    // attention
    qg = qg.view({T * H, 2 * hd});
    Tensor q = be.alloc({T, H, hd}), gate = be.alloc({T, H * hd});
    Tensor q2 = q.view({T * H, hd}), gate2 = gate.view({T * H, hd});
    Tensor* const qg_parts[] = {&q2, &gate2};
    be.split_cols(qg_parts, qg);
    be.rms_norm(q2, q2, w.q_norm, c_.eps, NormKind::OnePlus, hd);
    be.rms_norm(k2, k2, w.k_norm, c_.eps, NormKind::OnePlus, hd);
    Tensor o = be.alloc({T, H, hd});
    for (const QsaSlot& s : slots) {
      QsaCache& cache = *s.cache;
      const int64_t S = s.slot0 + s.T;
      Tensor qis = qi.slice(s.r0, s.T);
      be.rope(qis, *s.pos, rs);
      spec.pos_offset = s.pos_offset;
      be.qsa_index_append(cache.raw, cache.blocks, kraw.slice(s.r0, s.T), s.slot0, *w.idx_k_norm, spec);
      Tensor allowed = be.alloc({s.T, S});
      *s.ties += be.qsa_index_select(allowed, qis, cache.blocks, s.slot0, spec);
      // RoPE on the f32 rows, then the cache write (rounded where the cache is BF16).
      Tensor qs = q.slice(s.r0, s.T), ks = k.slice(s.r0, s.T), kd = cache.K.slice(s.slot0, s.T),
             vd = cache.V.slice(s.slot0, s.T);
      be.rope(qs, *s.pos, rs);
      be.rope(ks, *s.pos, rs);
      be.copy(kd, ks);
      be.copy(vd, v.slice(s.r0, s.T));
      Tensor os = o.slice(s.r0, s.T);
      be.attention(os, qs, cache.K.slice(0, S), cache.V.slice(0, S), s.slot0,
                   1.0f / std::sqrt(static_cast<float>(hd)), &allowed);
    }
    Tensor og = o.view({T, H * hd});
    be.sigmoid_mul(og, og, gate);
    Tensor y = be.alloc({T, c_.D});
    be.matmul(y, og, *w.o);
    return y;
  }

  // Softmax top-k MoE with a σ-gated shared expert (§1.3), over every row of the batch.
  Tensor moe(Backend& be, const QwenMoe& m, const Tensor& u) const {
    Tensor y = be.alloc({u.rows(), c_.D});
    qwen_moe(be, m, c_, u, y);
    return y;
  }

  // The rank's share of every split size (models.md §3.12), refused by name where the world size does not
  // divide. Hyper-connections, PLE and the indexer stay replicated.
  void shard_config() {
    kv_ = tp_kv_heads(tp_, c_.H, c_.Hkv);
    c_.H = tp_.split(c_.H, "attention heads");
    c_.Hkv = kv_.local;
    c_.Hk = tp_.split(c_.Hk, "GDN key heads");
    c_.Hv = tp_.split(c_.Hv, "GDN value heads");
    c_.I = tp_.split(c_.I, "expert intermediate channels");
    c_.Is = tp_.split(c_.Is, "shared expert intermediate channels");
    if (!c_.tie) tp_.split(c_.V, "vocabulary rows");
  }
  int64_t vocab_local() const { return tp_.on() && !c_.tie ? c_.V / tp_.size : c_.V; }

  ModelConfig mc_;
  Qwen4Config c_;
  Qwen4Config full_;  // the unsharded sizes (where a rank's blocks start)
  TpShard tp_;
  TpKvHeads kv_{};
  ModelInfo info_;
  const Weight *embed_ = nullptr, *lm_head_ = nullptr;
  HyperConn mixer_;
  std::vector<Layer> layers_;
  Draft draft_;
  bool bound_ = false;
};

}  // namespace

std::unique_ptr<Model> make_qwen4_exp(const ModelConfig& config) {
  return std::make_unique<Qwen4Exp>(config);
}

}  // namespace bloomery
