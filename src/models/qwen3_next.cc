// qwen3_next (Qwen3-Next-80B-A3B): pre-norm residual stack of Gated DeltaNet and gated full-attention layers,
// each followed by a softmax top-k MoE with a σ-gated shared expert; one MTP draft layer. The math follows
// models.md §2 and transformers' modeling_qwen3_next.py, in order.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "models/batch_rows.h"
#include "models/model.h"
#include "models/model_registry.h"
#include "models/qwen_common.h"
#include "models/spec_state.h"
#include "models/tp_shard.h"

namespace bloomery {

namespace {

using Shape = std::vector<int64_t>;

struct Config : QwenConfig {
  int64_t Im;  // dense MLP intermediate size
  RopeSpec rope;
  std::vector<bool> moe;  // per layer: sparse MoE (else dense MLP)
  int64_t mtp_layers;
};

Config read_config(const nlohmann::json& c) {
  Config k{};
  static_cast<QwenConfig&>(k) = read_qwen_config(c, 0.25, true);
  k.Im = cfg_int(c, "intermediate_size", 5632);
  k.rope.theta = k.theta;
  k.rope.rot_dim = static_cast<int>(k.rot);
  k.rope.interleaved = false;
  std::vector<int64_t> mlp_only;
  if (c.contains("mlp_only_layers") && c["mlp_only_layers"].is_array())
    for (const auto& v : c["mlp_only_layers"]) mlp_only.push_back(v.get<int64_t>());
  const int64_t step = cfg_int(c, "decoder_sparse_step", 1);
  for (int64_t i = 0; i < k.L; ++i) {
    bool only = std::find(mlp_only.begin(), mlp_only.end(), i) != mlp_only.end();
    k.moe.push_back(!only && k.E > 0 && (i + 1) % step == 0);
  }
  k.mtp_layers = cfg_int(c, "mtp_num_hidden_layers", cfg_int(c, "num_nextn_predict_layers", 1));
  return k;
}

// The weights of one decoder layer (token mixer + MLP), bound by name.
struct LayerW {
  const Weight *in_norm, *post_norm;
  // GDN
  const Weight *qkvz, *ba, *conv, *A_log, *dt_bias, *gnorm, *out;
  // gated attention
  const Weight *q, *k, *v, *o, *q_norm, *k_norm;
  // MoE
  QwenMoe moe;
  // dense MLP
  const Weight *gate, *up, *down;
};

class Qwen3NextState : public SequenceState {
 public:
  std::vector<Tensor> conv, rec;  // per GDN layer: conv state [conv_dim, K−1], recurrent state [Hv, dk, dv]
  std::vector<Tensor> kc, vc;     // per attention layer: K, V caches [capacity, Hkv, hd]
  Tensor draft_k, draft_v;        // the MTP layer's own cache
};

class Qwen3Next final : public BatchedModel {
 public:
  explicit Qwen3Next(const ModelConfig& mc) : mc_(mc), c_(read_config(mc.text)), full_(c_), tp_(mc) {
    if (tp_.on()) shard_config();
    info_.family = "qwen3_next";
    info_.vocab_size = c_.V;
    info_.hidden_size = c_.D;
    info_.draft_hidden_size = c_.D;
    info_.eos_ids = cfg_eos_ids(mc.text);
    info_.max_positions = c_.max_pos;
  }

  const ModelInfo& info() const override { return info_; }

  std::vector<TensorDecl> declare() const override {
    std::vector<TensorDecl> d;
    const std::string& P = mc_.prefix;
    d.push_back({P + "embed_tokens.weight", {c_.V, c_.D}});
    d.push_back({P + "norm.weight", {c_.D}});
    if (!c_.tie)
      d.push_back({"lm_head.weight", {vocab_local(), c_.D}, false, false, tp_.rows(vocab_local())});
    for (int64_t i = 0; i < c_.L; ++i) declare_layer(d, P + "layers." + std::to_string(i) + ".", i, false);
    if (c_.mtp_layers > 0) {
      d.push_back({"mtp.fc.weight", {c_.D, 2 * c_.D}, true});
      d.push_back({"mtp.pre_fc_norm_embedding.weight", {c_.D}, true});
      d.push_back({"mtp.pre_fc_norm_hidden.weight", {c_.D}, true});
      d.push_back({"mtp.norm.weight", {c_.D}, true});
      declare_layer(d, "mtp.layers.0.", -1, true);
    }
    return d;
  }

  void bind(Backend& be, const WeightSet& w) override {
    const std::string& P = mc_.prefix;
    embed_ = &w.get(P + "embed_tokens.weight");
    norm_ = &w.get(P + "norm.weight");
    lm_head_ = c_.tie ? embed_ : &w.get("lm_head.weight");
    layers_.resize(c_.L);
    for (int64_t i = 0; i < c_.L; ++i)
      bind_layer(layers_[i], w, P + "layers." + std::to_string(i) + ".", c_.attn[i], c_.moe[i]);
    // The draft layer is used only when every one of its tensors is present.
    info_.has_draft =
        c_.mtp_layers > 0 && w.find("mtp.fc.weight") && w.find("mtp.layers.0.self_attn.q_proj.weight");
    if (info_.has_draft) {
      mtp_fc_ = &w.get("mtp.fc.weight");
      mtp_norm_e_ = &w.get("mtp.pre_fc_norm_embedding.weight");
      mtp_norm_h_ = &w.get("mtp.pre_fc_norm_hidden.weight");
      mtp_norm_ = &w.get("mtp.norm.weight");
      bind_layer(mtp_layer_, w, "mtp.layers.0.", true, true);
    }
    bound_ = true;
  }

  std::unique_ptr<SequenceState> new_state(Backend& be, int64_t capacity) const override {
    auto st = std::make_unique<Qwen3NextState>();
    st->capacity = capacity;
    const int64_t conv_dim = 2 * c_.Hk * c_.dk + c_.Hv * c_.dv;
    for (int64_t i = 0; i < c_.L; ++i) {
      if (c_.attn[i]) {
        st->kc.push_back(be.alloc({capacity, c_.Hkv, c_.hd}, mc_.kv_type));
        st->vc.push_back(be.alloc({capacity, c_.Hkv, c_.hd}, mc_.kv_type));
      } else {
        st->conv.push_back(be.alloc({conv_dim, c_.conv_k - 1}));
        st->rec.push_back(be.alloc({c_.Hv, c_.dk, c_.dv}));
      }
    }
    if (info_.has_draft) {
      st->draft_k = be.alloc({capacity, c_.Hkv, c_.hd}, mc_.kv_type);
      st->draft_v = be.alloc({capacity, c_.Hkv, c_.hd}, mc_.kv_type);
    }
    return st;
  }

  std::vector<StatePart> state_parts(SequenceState& base) const override {
    auto& st = static_cast<Qwen3NextState&>(base);
    std::vector<StatePart> p;
    for (size_t i = 0; i < st.conv.size(); ++i) {
      p.push_back({"gdn." + std::to_string(i) + ".conv", &st.conv[i]});
      p.push_back({"gdn." + std::to_string(i) + ".rec", &st.rec[i]});
    }
    for (size_t i = 0; i < st.kc.size(); ++i) {
      p.push_back({"attn." + std::to_string(i) + ".k", &st.kc[i], st.pos});
      p.push_back({"attn." + std::to_string(i) + ".v", &st.vc[i], st.pos});
    }
    if (st.draft_k.defined()) {
      p.push_back({"mtp.k", &st.draft_k, st.draft_pos});
      p.push_back({"mtp.v", &st.draft_v, st.draft_pos});
    }
    return p;
  }

  // A verify's copies: every GDN layer's conv and recurrent state once.
  uint64_t spec_bytes() const override {
    const int64_t conv_dim = 2 * c_.Hk * c_.dk + c_.Hv * c_.dv;
    int64_t elems = 0;
    for (int64_t i = 0; i < c_.L; ++i)
      if (!c_.attn[i]) elems += conv_dim * (c_.conv_k - 1) + c_.Hv * c_.dk * c_.dv;
    return static_cast<uint64_t>(elems) * sizeof(float);
  }

  // The bytes new_state(capacity) allocates: the same tensors, counted.
  uint64_t state_bytes(int64_t capacity) const override {
    const int64_t conv_dim = 2 * c_.Hk * c_.dk + c_.Hv * c_.dv;
    int64_t elems = 0, kv_elems = 0;  // f32 state, K/V cache elements (kv_type)
    for (int64_t i = 0; i < c_.L; ++i) {
      if (c_.attn[i])
        kv_elems += 2 * capacity * c_.Hkv * c_.hd;
      else
        elems += conv_dim * (c_.conv_k - 1) + c_.Hv * c_.dk * c_.dv;
    }
    // Before bind the MTP layer counts as present when the config declares one (the checkpoint may not ship
    // it).
    if (info_.has_draft || (!bound_ && c_.mtp_layers > 0)) kv_elems += 2 * capacity * c_.Hkv * c_.hd;
    return static_cast<uint64_t>(elems) * sizeof(float) +
           static_cast<uint64_t>(kv_elems) * elem_size(mc_.kv_type);
  }

  // Every token-wise op runs over the rows of all entries at once ([ΣT, D]); the token mixers run per entry
  // on its rows with its own state (GdnSlot / KvSlot).
  std::vector<ForwardResult> forward_batch(Backend& be, std::span<const BatchEntry> entries) override {
    const BatchRows b = batch_rows(entries, c_.V);
    const int64_t T = b.total;
    std::vector<Qwen3NextState*> st;
    for (const BatchEntry& e : entries) st.push_back(static_cast<Qwen3NextState*>(e.state));

    Tensor h = be.alloc({T, c_.D});
    be.gather_rows(h, *embed_, b.tok);
    Tensor x = be.alloc({T, c_.D}), y = be.alloc({T, c_.D});
    size_t gdn_i = 0, attn_i = 0;
    for (int64_t l = 0; l < c_.L; ++l) {
      const LayerW& lw = layers_[l];
      be.rms_norm(x, h, lw.in_norm, c_.eps, NormKind::OnePlus);
      if (c_.attn[l]) {
        std::vector<KvSlot> kv;
        for (size_t i = 0; i < st.size(); ++i)
          kv.push_back({st[i]->kc[attn_i], st[i]->vc[attn_i], b.e[i].p0, &b.e[i].pos, b.e[i].r0, b.e[i].T});
        attention(be, lw, x, y, kv);
        ++attn_i;
      } else {
        std::vector<GdnSlot> gs;
        for (size_t i = 0; i < st.size(); ++i) {
          Tensor &conv = st[i]->conv[gdn_i], &rec = st[i]->rec[gdn_i];
          gs.push_back({spec_fork(be, *st[i], conv), spec_fork(be, *st[i], rec), b.e[i].r0, b.e[i].T,
                        entries[i].speculative ? st[i] : nullptr, &conv, &rec});
        }
        gdn(be, lw, x, y, gs);
        ++gdn_i;
      }
      tp_.all_reduce(be, y, "mixer all-reduce");  // row-parallel o_proj / out_proj partials
      be.add(h, h, y);
      be.rms_norm(x, h, lw.post_norm, c_.eps, NormKind::OnePlus);
      mlp(be, lw, c_.moe[l], x, y);
      tp_.all_reduce(be, y, "MLP all-reduce");  // routed + shared expert partials, one sum
      be.add(h, h, y);
      be.step_layer_done();
    }
    batch_advance(entries);
    Tensor hidden = be.alloc({T, c_.D});
    be.rms_norm(hidden, h, norm_, c_.eps, NormKind::OnePlus);
    if (!tp_.on() || c_.tie) return batch_logits(be, entries, b, hidden, *lm_head_);
    return batch_logits(be, entries, b, hidden, *lm_head_, {},
                        [&](const Tensor& l) { return tp_.gather_cols(be, l, "vocabulary all-gather"); });
  }

  // MTP (models.md §2.8): x = W_fc [norm(E[tok]); norm(h)], one full-attention MoE layer at position p+1 with
  // its own cache, then mtp.norm; the normed output is both the logits' input and the recycled hidden.
  ForwardResult draft(Backend& be, SequenceState& state, const Tensor& hidden,
                      std::span<const int32_t> next_ids) override {
    const DraftEntry one{&state, hidden, next_ids};
    return std::move(draft_batch(be, std::span(&one, 1))[0]);
  }

  // Every entry's rows in one pass; attention per entry on its own draft cache.
  std::vector<ForwardResult> draft_batch(Backend& be, std::span<const DraftEntry> entries) override {
    if (!info_.has_draft)
      raise("E_MODEL_NO_DRAFT", Where{"", "mtp.fc.weight", ""}, "an MTP layer in the checkpoint", "none");
    const DraftRows d =
        draft_rows(be, entries, c_.D, "qwen3_next draft", [](const SequenceState& s) { return s.capacity; });
    const int64_t T = d.total;

    Tensor e = be.alloc({T, c_.D});
    be.gather_rows(e, *embed_, d.tok);
    Tensor cat = be.alloc({T, 2 * c_.D}), tmp = be.alloc({T, c_.D});
    be.rms_norm(tmp, e, mtp_norm_e_, c_.eps, NormKind::OnePlus);
    be.put_cols(cat, tmp, 0);  // embedding first
    be.rms_norm(tmp, d.hidden, mtp_norm_h_, c_.eps, NormKind::OnePlus);
    be.put_cols(cat, tmp, c_.D);
    Tensor h = be.alloc({T, c_.D});
    be.matmul(h, cat, *mtp_fc_);

    Tensor x = be.alloc({T, c_.D}), y = be.alloc({T, c_.D});
    be.rms_norm(x, h, mtp_layer_.in_norm, c_.eps, NormKind::OnePlus);
    // Cache slot j holds draft row j; its RoPE position is j + 1.
    std::vector<KvSlot> kv;
    for (size_t i = 0; i < entries.size(); ++i) {
      auto& st = static_cast<Qwen3NextState&>(*entries[i].state);
      kv.push_back({st.draft_k, st.draft_v, d.e[i].p0, &d.e[i].pos, d.e[i].r0, d.e[i].T});
    }
    attention(be, mtp_layer_, x, y, kv);
    tp_.all_reduce(be, y, "draft mixer all-reduce");  // cut like the main layers (models.md §2.7)
    be.add(h, h, y);
    be.rms_norm(x, h, mtp_layer_.post_norm, c_.eps, NormKind::OnePlus);
    mlp(be, mtp_layer_, true, x, y);
    tp_.all_reduce(be, y, "draft MoE all-reduce");
    be.add(h, h, y);

    Tensor out = be.alloc({T, c_.D});
    be.rms_norm(out, h, mtp_norm_, c_.eps, NormKind::OnePlus);
    if (!any_logits(entries)) return draft_results(entries, d, out, Tensor());  // a catch-up: no head
    const std::vector<int64_t> heads = draft_head_counts(entries, d);
    const Tensor logits = tp_.head_logits(be, head_rows(be, out, d.e, heads), *lm_head_, tp_.on() && !c_.tie,
                                          "draft vocabulary all-gather");
    return draft_results(entries, d, out, logits);
  }

 private:
  void declare_layer(std::vector<TensorDecl>& d, const std::string& p, int64_t i, bool optional) const {
    const bool full = i < 0 || c_.attn[i];
    const bool moe = i < 0 || c_.moe[i];
    auto add = [&](const std::string& n, Shape s, TensorCut cut = {}) {
      d.push_back({p + n, std::move(s), optional, false, std::move(cut)});
    };
    add("input_layernorm.weight", {c_.D});
    add("post_attention_layernorm.weight", {c_.D});
    if (full) {
      // TP by head: q (with its gate) and o by q head, k and v by the rank's KV heads.
      const TensorCut kv =
          tp_.on()
              ? TensorCut::rows({{uint64_t(kv_.first * c_.hd), uint64_t((kv_.first + kv_.local) * c_.hd)}})
              : TensorCut{};
      add("self_attn.q_proj.weight", {c_.H * c_.hd * 2, c_.D}, tp_.rows(c_.H, c_.hd * 2));
      add("self_attn.k_proj.weight", {c_.Hkv * c_.hd, c_.D}, kv);
      add("self_attn.v_proj.weight", {c_.Hkv * c_.hd, c_.D}, kv);
      add("self_attn.o_proj.weight", {c_.D, c_.H * c_.hd}, tp_.cols(c_.H, c_.hd));
      add("self_attn.q_norm.weight", {c_.hd});
      add("self_attn.k_norm.weight", {c_.hd});
    } else {
      // TP by key head (models.md §2.7): grouped rows are contiguous per key head; the conv channels are
      // [q | k | v] over all heads, so a rank's are three blocks.
      const int64_t key_dim = c_.Hk * c_.dk, value_dim = c_.Hv * c_.dv;
      const int64_t full_key = full_.Hk * full_.dk;
      add("linear_attn.in_proj_qkvz.weight", {2 * key_dim + 2 * value_dim, c_.D},
          tp_.rows(2 * key_dim + 2 * value_dim));
      add("linear_attn.in_proj_ba.weight", {2 * c_.Hv, c_.D}, tp_.rows(2 * c_.Hv));
      add("linear_attn.conv1d.weight", {2 * key_dim + value_dim, 1, c_.conv_k},
          tp_.rows_of({{0, key_dim}, {full_key, key_dim}, {2 * full_key, value_dim}}));
      add("linear_attn.A_log", {c_.Hv}, tp_.rows(c_.Hv));
      add("linear_attn.dt_bias", {c_.Hv}, tp_.rows(c_.Hv));
      add("linear_attn.norm.weight", {c_.dv});
      add("linear_attn.out_proj.weight", {c_.D, value_dim}, tp_.cols(value_dim));
    }
    if (moe) {
      declare_qwen_moe(d, p + "mlp.", c_, optional, tp_);
    } else {
      add("mlp.gate_proj.weight", {c_.Im, c_.D}, tp_.rows(c_.Im));
      add("mlp.up_proj.weight", {c_.Im, c_.D}, tp_.rows(c_.Im));
      add("mlp.down_proj.weight", {c_.D, c_.Im}, tp_.cols(c_.Im));
    }
  }

  void bind_layer(LayerW& lw, const WeightSet& w, const std::string& p, bool full, bool moe) {
    lw = LayerW{};
    auto g = [&](const std::string& n) { return &w.get(p + n); };
    lw.in_norm = g("input_layernorm.weight");
    lw.post_norm = g("post_attention_layernorm.weight");
    if (full) {
      lw.q = g("self_attn.q_proj.weight");
      lw.k = g("self_attn.k_proj.weight");
      lw.v = g("self_attn.v_proj.weight");
      lw.o = g("self_attn.o_proj.weight");
      lw.q_norm = g("self_attn.q_norm.weight");
      lw.k_norm = g("self_attn.k_norm.weight");
    } else {
      lw.qkvz = g("linear_attn.in_proj_qkvz.weight");
      lw.ba = g("linear_attn.in_proj_ba.weight");
      lw.conv = g("linear_attn.conv1d.weight");
      lw.A_log = g("linear_attn.A_log");
      lw.dt_bias = g("linear_attn.dt_bias");
      lw.gnorm = g("linear_attn.norm.weight");
      lw.out = g("linear_attn.out_proj.weight");
    }
    if (moe) {
      lw.moe = bind_qwen_moe(w, p + "mlp.", c_);
    } else {
      lw.gate = g("mlp.gate_proj.weight");
      lw.up = g("mlp.up_proj.weight");
      lw.down = g("mlp.down_proj.weight");
    }
  }

  // One entry's share of a GDN layer: its rows of the batch and its conv / recurrent state.
  struct GdnSlot {
    Tensor conv, rec;
    int64_t r0, T;
    SequenceState* spec;           // a speculative entry's state (its replays are recorded), else null
    Tensor *conv_slot, *rec_slot;  // the state's own tensors (conv / rec are copies when speculative)
  };
  // One entry's share of an attention layer: its caches, the cache slot of its first row, its positions.
  struct KvSlot {
    Tensor kc, vc;
    int64_t q0;
    const std::vector<int64_t>* pos;
    int64_t r0, T;
  };

  // Gated DeltaNet (models.md §2.4): grouped qkvz/ba projections, causal conv + SiLU, delta rule, gated norm.
  // Projections, gates and norms run over all rows; the conv and the delta rule per slot.
  void gdn(Backend& be, const LayerW& lw, const Tensor& x, Tensor& y, std::span<GdnSlot> slots) {
    const int64_t T = x.rows(), Hk = c_.Hk, Hv = c_.Hv, dk = c_.dk, dv = c_.dv, r = Hv / Hk;
    const int64_t key_dim = Hk * dk, value_dim = Hv * dv, group = 2 * dk + 2 * r * dv;
    Tensor qkvz = be.alloc({T, Hk * group}), ba = be.alloc({T, 2 * Hv});
    const Backend::Product in_proj[] = {{&qkvz, lw.qkvz}, {&ba, lw.ba}};
    be.matmul_group(in_proj, x);
    // Per key head h the rows are [q_h | k_h | v of its r value heads | z of its r value heads].
    Tensor grouped = qkvz.view({T * Hk, group});
    Tensor mixed = be.alloc({T, 2 * key_dim + value_dim});
    Tensor qpart = be.alloc({T * Hk, dk}), kpart = be.alloc({T * Hk, dk});
    Tensor vpart = be.alloc({T * Hk, r * dv}), z = be.alloc({T * Hk, r * dv});
    Tensor* const qkvz_parts[] = {&qpart, &kpart, &vpart, &z};
    be.split_cols(qkvz_parts, grouped);
    be.put_cols(mixed, qpart.view({T, key_dim}), 0);
    be.put_cols(mixed, kpart.view({T, key_dim}), key_dim);
    be.put_cols(mixed, vpart.view({T, value_dim}), 2 * key_dim);
    // ba per key head: [b of its r value heads | a of its r value heads].
    Tensor bag = ba.view({T * Hk, 2 * r});
    Tensor b = be.alloc({T * Hk, r}), a = be.alloc({T * Hk, r});
    Tensor* const ba_parts[] = {&b, &a};
    be.split_cols(ba_parts, bag);

    Tensor conv_out = be.alloc({T, 2 * key_dim + value_dim});
    for (GdnSlot& s : slots) {
      Tensor out = conv_out.slice(s.r0, s.T);
      be.causal_conv1d(out, mixed.slice(s.r0, s.T), *lw.conv, s.conv, 1, Act::Silu);
      spec_conv_replay(s.spec, s.conv_slot, mixed.slice(s.r0, s.T), lw.conv, 1, Act::Silu);
    }
    Tensor q = be.alloc({T, Hk, dk}), k = be.alloc({T, Hk, dk}), v = be.alloc({T, Hv, dv});
    Tensor q2 = q.view({T, key_dim}), k2 = k.view({T, key_dim}), v2 = v.view({T, value_dim});
    Tensor* const qkv_parts[] = {&q2, &k2, &v2};
    be.split_cols(qkv_parts, conv_out);

    Tensor g = be.alloc({T, Hv}), beta = be.alloc({T, Hv});
    be.gdn_gates(g, beta, a.view({T, Hv}), b.view({T, Hv}), *lw.A_log, *lw.dt_bias);
    Tensor o = be.alloc({T, Hv, dv});
    // Prompts use the chunked form (as transformers does for any multi-token call); decode and verify rows
    // the recurrent step.
    for (GdnSlot& s : slots) {
      Tensor os = o.slice(s.r0, s.T);
      be.gated_delta_rule(os, q.slice(s.r0, s.T), k.slice(s.r0, s.T), v.slice(s.r0, s.T), g.slice(s.r0, s.T),
                          beta.slice(s.r0, s.T), s.rec, true, s.T > 1 && !s.spec);
      spec_gdn_replay(s.spec, s.rec_slot, q.slice(s.r0, s.T), k.slice(s.r0, s.T), v.slice(s.r0, s.T),
                      g.slice(s.r0, s.T), beta.slice(s.r0, s.T), true);
    }
    be.rms_norm_gated(o, o, z, *lw.gnorm, c_.eps, Act::Silu);
    be.matmul(y, o.view({T, value_dim}), *lw.out);
  }

  // Gated GQA attention (models.md §2.4): q/gate split per head, zero-centred q/k norms, partial RoPE, causal
  // softmax over the cache, output multiplied by σ(gate). Projections and norms run over all rows; RoPE, the
  // cache writes (slots [q0, q0+T)) and the softmax per slot.
  void attention(Backend& be, const LayerW& lw, const Tensor& x, Tensor& y, std::span<const KvSlot> slots) {
    const int64_t T = x.rows(), H = c_.H, Hkv = c_.Hkv, hd = c_.hd;
    Tensor qg = be.alloc({T, H * 2 * hd});
    Tensor k = be.alloc({T, Hkv, hd}), v = be.alloc({T, Hkv, hd});
    const Backend::Product in_proj[] = {{&qg, lw.q}, {&k, lw.k}, {&v, lw.v}};
    be.matmul_group(in_proj, x);
    Tensor q = be.alloc({T, H, hd}), gate = be.alloc({T * H, hd});
    Tensor q_rows = q.view({T * H, hd});
    Tensor* const qg_parts[] = {&q_rows, &gate};
    be.split_cols(qg_parts, qg.view({T * H, 2 * hd}));
    be.rms_norm(q, q, lw.q_norm, c_.eps, NormKind::OnePlus, hd);
    be.rms_norm(k, k, lw.k_norm, c_.eps, NormKind::OnePlus, hd);
    Tensor o = be.alloc({T, H, hd});
    for (const KvSlot& s : slots) {
      // RoPE on the f32 rows, then the cache write (rounded where the cache is BF16).
      Tensor qs = q.slice(s.r0, s.T), ks = k.slice(s.r0, s.T), kd = s.kc.slice(s.q0, s.T),
             vd = s.vc.slice(s.q0, s.T);
      be.rope(qs, *s.pos, c_.rope);
      be.rope(ks, *s.pos, c_.rope);
      be.copy(kd, ks);
      be.copy(vd, v.slice(s.r0, s.T));
      Tensor os = o.slice(s.r0, s.T);
      be.attention(os, qs, s.kc.slice(0, s.q0 + s.T), s.vc.slice(0, s.q0 + s.T), s.q0,
                   1.0f / std::sqrt(static_cast<float>(hd)));
    }
    Tensor of = o.view({T, H * hd});
    be.sigmoid_mul(of, of, gate.view({T, H * hd}));
    be.matmul(y, of, *lw.o);
  }

  // MoE: softmax top-k routed SwiGLU experts plus σ(w_sg · x) · SharedExpert(x); or a dense SwiGLU MLP.
  void mlp(Backend& be, const LayerW& lw, bool moe, const Tensor& x, Tensor& y) {
    const int64_t T = x.rows();
    if (!moe) {
      Tensor g = be.alloc({T, c_.Im}), u = be.alloc({T, c_.Im});
      const Backend::Product gate_up[] = {{&g, lw.gate}, {&u, lw.up}};
      be.matmul_group(gate_up, x);
      be.swiglu(g, g, u);
      be.matmul(y, g, *lw.down);
      return;
    }
    qwen_moe(be, lw.moe, c_, x, y);
  }

  // The rank's share of every split size (models.md §2.7), refused by name where the world size does not
  // divide. The draft layer is cut like the main layers.
  void shard_config() {
    kv_ = tp_kv_heads(tp_, c_.H, c_.Hkv);
    c_.H = tp_.split(c_.H, "attention heads");
    c_.Hkv = kv_.local;
    c_.Hk = tp_.split(c_.Hk, "GDN key heads");
    c_.Hv = tp_.split(c_.Hv, "GDN value heads");
    if (c_.E > 0) c_.I = tp_.split(c_.I, "expert intermediate channels");
    if (c_.E > 0) c_.Is = tp_.split(c_.Is, "shared expert intermediate channels");
    if (std::find(c_.moe.begin(), c_.moe.end(), false) != c_.moe.end())
      c_.Im = tp_.split(c_.Im, "MLP intermediate channels");
    if (!c_.tie) tp_.split(c_.V, "vocabulary rows");
  }
  int64_t vocab_local() const { return tp_.on() && !c_.tie ? c_.V / tp_.size : c_.V; }

  ModelConfig mc_;
  Config c_;
  Config full_;  // the unsharded sizes (where a rank's blocks start)
  TpShard tp_;
  TpKvHeads kv_{};
  ModelInfo info_;
  const Weight *embed_ = nullptr, *norm_ = nullptr, *lm_head_ = nullptr;
  std::vector<LayerW> layers_;
  const Weight *mtp_fc_ = nullptr, *mtp_norm_e_ = nullptr, *mtp_norm_h_ = nullptr, *mtp_norm_ = nullptr;
  LayerW mtp_layer_;
  bool bound_ = false;
};

}  // namespace

std::unique_ptr<Model> make_qwen3_next(const ModelConfig& mc) {
  return std::make_unique<Qwen3Next>(mc);
}

}  // namespace bloomery
