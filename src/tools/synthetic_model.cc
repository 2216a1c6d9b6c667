// Synthetic models for `bloomery bench --synthetic` (see synthetic_model.h).
#include "tools/synthetic_model.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <mutex>
#include <unordered_map>

#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/classify.h"
#include "formats/elements.h"
#include "formats/format_table.h"
#include "formats/weight_slice.h"
#include "models/model_registry.h"

namespace bloomery::tools {

namespace {

using Clock = std::chrono::steady_clock;

// ---- random bytes
// ------------------------------------------------------------------------------------------

uint64_t mix(uint64_t v) {  // splitmix64 step: a fast, well-spread stream from any seed
  v += 0x9E3779B97F4A7C15ull;
  v = (v ^ (v >> 30)) * 0xBF58476D1CE4E5B9ull;
  v = (v ^ (v >> 27)) * 0x94D049BB133111EBull;
  return v ^ (v >> 31);
}

struct Rng {
  uint64_t s;
  uint64_t next() { return s = mix(s); }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
};

uint16_t bf16_of(float f) {  // round to nearest even
  const uint32_t u = std::bit_cast<uint32_t>(f);
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

// What the random bytes of a kind hold.
enum class Kind : uint8_t {
  Nibbles,     // any byte: two E2M1 codes (all 16 codes are finite)
  E4m3Scale,   // E4M3 block scales in [0.75, 1.375]
  E4m3Elem,    // E4M3 elements with magnitudes in [0.25, 3.75] (never NaN)
  Bf16Uniform  // BF16 uniform in ±std·√3 (std is part of the pool key)
};

uint8_t e4m3_elem_byte(uint64_t r) {
  return static_cast<uint8_t>(((r & 1) << 7) | ((5 + ((r >> 1) & 3)) << 3) | ((r >> 3) & 7));
}

void fill_random(Kind kind, double std, uint64_t seed, uint8_t* out, uint64_t n) {
  Rng rng{seed};
  switch (kind) {
    case Kind::Nibbles:
      for (uint64_t i = 0; i < n; i += 8) {
        const uint64_t r = rng.next();
        std::memcpy(out + i, &r, std::min<uint64_t>(8, n - i));
      }
      break;
    case Kind::E4m3Scale:
      for (uint64_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(0x34 + (rng.next() & 7));
      break;
    case Kind::E4m3Elem:
      for (uint64_t i = 0; i < n; ++i) out[i] = e4m3_elem_byte(rng.next());
      break;
    case Kind::Bf16Uniform: {
      const double a = std * std::sqrt(3.0);
      for (uint64_t i = 0; i + 1 < n; i += 2) {
        const uint16_t b = bf16_of(static_cast<float>((2.0 * rng.uniform() - 1.0) * a));
        std::memcpy(out + i, &b, 2);
      }
      break;
    }
  }
}

// RMS of the element values a kind produces (so a scale can bring weights to the wanted std).
double rms_e2m1() {
  double s = 0;
  for (int c = 0; c < 16; ++c)
    s += static_cast<double>(elem::e2m1(static_cast<uint8_t>(c))) * elem::e2m1(static_cast<uint8_t>(c));
  return std::sqrt(s / 16);
}
double rms_e4m3_elem() {
  double s = 0;
  for (int r = 0; r < 64; ++r) {
    const double v = elem::e4m3_table()[e4m3_elem_byte(static_cast<uint64_t>(r) << 1)];
    s += v * v;
  }
  return std::sqrt(s / 64);
}
double rms_e4m3_scale() {
  double s = 0;
  for (int r = 0; r < 8; ++r) {
    const double v = elem::e4m3_table()[0x34 + r];
    s += v * v;
  }
  return std::sqrt(s / 8);
}

// A block of random bytes of one kind that tensors take windows of.
struct Pool {
  Kind kind;
  double std = 0;
  uint64_t need = 0;  // the largest window any tensor takes
  std::vector<uint8_t> bytes;
};

std::string pool_key(Kind k, double std) {
  return std::to_string(static_cast<int>(k)) + ":" + std::to_string(std);
}

// ---- per-tensor plan
// -----------------------------------------------------------------------------------------

enum class Fill : uint8_t {
  Pool,     // big tensors: windows of the pools
  ALog,     // F32 log(U(1, 16))
  DtBias,   // F32 U(0.5, 1.5)
  NormOne,  // BF16 1 + U(±0.1) (plain-weighted norm: GDN's gated norm)
  NormZero  // BF16 U(±0.1) (zero-centred "1 + w" norms)
};

struct Plan {
  const TensorDecl* decl = nullptr;
  std::string module;
  uint64_t rows = 0, cols = 0;
  FormatId format = FormatId::BF16;
  Fill fill = Fill::Pool;
  double std = 0;   // wanted weight std
  PartSizes sizes;  // of the stored parts
  bool table = false;
};

bool ends_with(const std::string& s, std::string_view t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}
bool has(const std::string& s, std::string_view t) {
  return s.find(t) != std::string::npos;
}

std::string module_of(const std::string& name) {
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(0, dot);
}

// Projections the QAD export stores in MXFP8 (models.md §3.11).
bool qad_mxfp8(const std::string& n) {
  for (const char* p : {"linear_attn.in_proj_", "linear_attn.out_proj", "self_attn.q_proj",
                        "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "indexer.index_qk_proj",
                        "shared_expert.gate_proj", "shared_expert.up_proj", "shared_expert.down_proj",
                        "input_mix_weight_down", "input_mix_weight_up", "ple.key_proj", "ple.value_proj"})
    if (has(n, p)) return true;
  return false;
}

// Per-family fill rules: glm5_next's norms multiply by their weight (plain RMSNorm / LayerNorm), so they get
// weights near 1 (their biases near 0); the Qwen families' norms are zero-centred ("1 + w").
struct FamilyRules {
  bool plain_norms = false;
};

FamilyRules rules_of(const std::string& family) {
  FamilyRules r;
  r.plain_norms = family == "glm5_next";
  return r;
}

Plan plan_for(const TensorDecl& d, SyntheticLayout layout, const FamilyRules& rules) {
  Plan p;
  p.decl = &d;
  p.module = module_of(d.name);
  if (d.shape.empty())
    raise("E_BENCH_UNSUPPORTED", Where{"", d.name, "shape"}, "a declared shape (synthetic weights)",
          "take the stored shape");
  p.rows = static_cast<uint64_t>(d.shape[0]);
  p.cols = 1;
  for (size_t i = 1; i < d.shape.size(); ++i) p.cols *= static_cast<uint64_t>(d.shape[i]);
  p.std = 1.0 / std::sqrt(static_cast<double>(p.cols));
  p.table = d.streamed;
  const std::string& n = d.name;
  std::string container, proj;
  int e = 0;
  const bool expert = parse_expert_module(p.module, &container, &e, &proj);
  const bool mtp = n.rfind("mtp.", 0) == 0;
  if (d.streamed) {  // the PLE n-gram table: rows are embeddings (std 1)
    p.format = layout == SyntheticLayout::Nvidia ? FormatId::FP8_TENSOR : FormatId::NVFP4;
    p.std = 1.0;
  } else if (ends_with(n, "A_log")) {
    p.format = FormatId::F32, p.fill = Fill::ALog;
  } else if (ends_with(n, "dt_bias")) {
    p.format = FormatId::F32, p.fill = Fill::DtBias;
  } else if (has(n, "linear_attn.norm.") || (rules.plain_norms && has(n, "norm") && !ends_with(n, ".bias"))) {
    p.fill = Fill::NormOne;
  } else if (has(n, "norm")) {
    p.fill = Fill::NormZero;
  } else if (ends_with(n, "e_score_correction_bias")) {
    p.std = 0.01;  // a small nudge to the sigmoid scores, as trained biases are: the routing stays spread
  } else if (expert && mtp && layout == SyntheticLayout::Nvidia) {
    p.format = FormatId::FP8_BLOCK;
  } else if (expert) {
    p.format = FormatId::NVFP4;
  } else if (layout == SyntheticLayout::Qad && qad_mxfp8(n)) {
    p.format = FormatId::MXFP8;
  }
  // A format the shape cannot take (K alignment) falls back to BF16, as an exporter would keep it dense.
  if ((p.format == FormatId::NVFP4 && p.cols % 16 != 0) || (p.format == FormatId::MXFP8 && p.cols % 32 != 0))
    p.format = FormatId::BF16;
  return p;
}

// The WeightBytes header (dtypes, shape) of a plan; spans are filled later.
WeightBytes header(const Plan& p) {
  WeightBytes w;
  w.format = p.format;
  w.rows = p.rows, w.cols = p.cols;
  switch (p.format) {
    case FormatId::F32:
      w.main_dtype = DType::F32;
      break;
    case FormatId::NVFP4:
      w.main_dtype = DType::U8, w.scale_dtype = DType::F8_E4M3, w.global_dtype = DType::F32;
      break;
    case FormatId::MXFP8:
      w.main_dtype = DType::F8_E4M3, w.scale_dtype = DType::U8;
      break;
    case FormatId::FP8_TENSOR:
      w.main_dtype = DType::F8_E4M3, w.global_dtype = DType::BF16;
      break;
    case FormatId::FP8_BLOCK:
      w.main_dtype = DType::F8_E4M3, w.scale_dtype = DType::BF16, w.block_n = 128, w.block_k = 128;
      break;
    default:
      w.main_dtype = DType::BF16;
  }
  return w;
}

// The pools a plan's big parts are windows of.
std::pair<Kind, double> main_pool(const Plan& p) {
  switch (p.format) {
    case FormatId::NVFP4:
      return {Kind::Nibbles, 0};
    case FormatId::MXFP8:
    case FormatId::FP8_TENSOR:
    case FormatId::FP8_BLOCK:
      return {Kind::E4m3Elem, 0};
    default:
      return {Kind::Bf16Uniform, p.std};
  }
}

// One tensor's stored bytes: pool windows for the big parts, own buffers for the small ones.
struct Built {
  WeightBytes bytes;
  std::vector<uint8_t> own_main, own_scale, own_global;
};

void build_bytes(const Plan& p, const std::map<std::string, Pool>& pools, uint64_t seed, Built& b) {
  b.bytes = header(p);
  WeightBytes& w = b.bytes;
  Rng rng{seed};
  if (p.fill != Fill::Pool) {
    const uint64_t n = p.rows * p.cols;
    if (p.format == FormatId::F32) {
      b.own_main.resize(n * 4);
      for (uint64_t i = 0; i < n; ++i) {
        const float v = p.fill == Fill::ALog ? static_cast<float>(std::log(1.0 + 15.0 * rng.uniform()))
                                             : static_cast<float>(0.5 + rng.uniform());
        std::memcpy(b.own_main.data() + 4 * i, &v, 4);
      }
    } else {
      b.own_main.resize(n * 2);
      for (uint64_t i = 0; i < n; ++i) {
        const float v = static_cast<float>((p.fill == Fill::NormOne ? 1.0 : 0.0) + 0.2 * rng.uniform() - 0.1);
        const uint16_t h = bf16_of(v);
        std::memcpy(b.own_main.data() + 2 * i, &h, 2);
      }
    }
    w.main = b.own_main;
    return;
  }
  auto window = [&](Kind k, double std, uint64_t bytes) {
    const Pool& pool = pools.at(pool_key(k, std));
    const uint64_t room = pool.bytes.size() - bytes;
    const uint64_t off = room ? (rng.next() % room) & ~uint64_t{15} : 0;
    return std::span<const uint8_t>(pool.bytes.data() + off, bytes);
  };
  const auto [kind, std] = main_pool(p);
  w.main = window(kind, std, p.sizes.main);
  switch (p.format) {
    case FormatId::NVFP4: {
      w.block_scale = window(Kind::E4m3Scale, 0, p.sizes.block_scale);
      const float g = static_cast<float>(p.std / (rms_e2m1() * rms_e4m3_scale()));
      b.own_global.resize(4);
      std::memcpy(b.own_global.data(), &g, 4);
      w.global_scale = b.own_global;
      break;
    }
    case FormatId::MXFP8: {
      const int e = static_cast<int>(std::lround(std::log2(p.std / rms_e4m3_elem())));
      b.own_scale.assign(p.sizes.block_scale, static_cast<uint8_t>(std::clamp(127 + e, 1, 254)));
      w.block_scale = b.own_scale;
      break;
    }
    case FormatId::FP8_TENSOR: {
      const uint16_t h = bf16_of(static_cast<float>(p.std / rms_e4m3_elem()));
      b.own_global.resize(2);
      std::memcpy(b.own_global.data(), &h, 2);
      w.global_scale = b.own_global;
      break;
    }
    case FormatId::FP8_BLOCK: {
      const uint64_t n = p.sizes.block_scale / 2;
      b.own_scale.resize(n * 2);
      for (uint64_t i = 0; i < n; ++i) {  // a grid of BF16 multipliers, ±10 % around the wanted scale
        const uint16_t h = bf16_of(static_cast<float>(p.std / rms_e4m3_elem() * (0.9 + 0.2 * rng.uniform())));
        std::memcpy(b.own_scale.data() + 2 * i, &h, 2);
      }
      w.block_scale = b.own_scale;
      break;
    }
    default:
      break;
  }
}

// The n-gram table's shards (split_ngram_parts of them, as a checkpoint stores it), filled from the pools in
// parallel: every shard row is real host memory.
SyntheticTable build_table(const Plan& p, const std::map<std::string, Pool>& pools, int64_t parts,
                           ThreadPool& tp, uint64_t seed) {
  SyntheticTable t;
  t.format = p.format;
  t.rows = p.rows, t.cols = p.cols;
  const uint64_t per = (p.rows + static_cast<uint64_t>(std::max<int64_t>(1, parts)) - 1) /
                       static_cast<uint64_t>(std::max<int64_t>(1, parts));
  const bool nv = p.format == FormatId::NVFP4;
  const uint64_t row_bytes = nv ? p.cols / 2 : p.cols, scale_row = nv ? p.cols / 16 : 0;
  auto bufs = std::make_shared<std::vector<std::unique_ptr<uint8_t[]>>>();
  for (uint64_t r0 = 0; r0 < p.rows; r0 += per) {
    SyntheticTable::Shard s;
    s.rows = std::min(per, p.rows - r0);
    bufs->emplace_back(new uint8_t[s.rows * (row_bytes + scale_row)]);  // uninitialised: filled below
    s.elements = bufs->back().get();
    if (nv) s.block_scales = s.elements + s.rows * row_bytes;
    t.shards.push_back(s);
  }
  const Pool& elems = pools.at(pool_key(nv ? Kind::Nibbles : Kind::E4m3Elem, 0));
  const Pool* scales = nv ? &pools.at(pool_key(Kind::E4m3Scale, 0)) : nullptr;
  tp.parallel_for(static_cast<int64_t>(t.shards.size()), [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) {
      Rng rng{seed + static_cast<uint64_t>(i)};
      auto copy = [&](const Pool& pool, uint8_t* dst, uint64_t n) {  // pool windows, repeated to length
        for (uint64_t o = 0; o < n;) {
          const uint64_t start = rng.next() % (pool.bytes.size() / 2);
          const uint64_t len = std::min(n - o, pool.bytes.size() - start);
          std::memcpy(dst + o, pool.bytes.data() + start, len);
          o += len;
        }
      };
      const SyntheticTable::Shard& s = t.shards[i];
      copy(elems, const_cast<uint8_t*>(s.elements), s.rows * row_bytes);
      if (scales) copy(*scales, const_cast<uint8_t*>(s.block_scales), s.rows * scale_row);
    }
  });
  t.global = nv ? static_cast<float>(p.std / (rms_e2m1() * rms_e4m3_scale()))
                : std::bit_cast<float>(
                      static_cast<uint32_t>(bf16_of(static_cast<float>(p.std / rms_e4m3_elem()))) << 16);
  t.owner = bufs;
  return t;
}

// The whole table decoded to f32 (the path without a table hook: tiny configs).
std::vector<float> decode_table(const SyntheticTable& t) {
  std::vector<float> out(t.rows * t.cols);
  uint64_t r0 = 0;
  for (const SyntheticTable::Shard& s : t.shards) {
    WeightBytes w;
    w.format = t.format;
    w.rows = s.rows, w.cols = t.cols;
    const uint16_t g16 = bf16_of(t.global);
    if (t.format == FormatId::NVFP4) {
      w.main_dtype = DType::U8, w.scale_dtype = DType::F8_E4M3, w.global_dtype = DType::F32;
      w.main = {s.elements, s.rows * t.cols / 2};
      w.block_scale = {s.block_scales, s.rows * t.cols / 16};
      w.global_scale = {reinterpret_cast<const uint8_t*>(&t.global), 4};
    } else {
      w.main_dtype = DType::F8_E4M3, w.global_dtype = DType::BF16;
      w.main = {s.elements, s.rows * t.cols};
      w.global_scale = {reinterpret_cast<const uint8_t*>(&g16), 2};
    }
    decode_rows(w, 0, s.rows, out.data() + r0 * t.cols);
    r0 += s.rows;
  }
  return out;
}

// Every declared tensor's plan, with its part sizes.
std::vector<Plan> make_plans(const std::vector<TensorDecl>& decls, SyntheticLayout layout,
                             const std::string& family) {
  const FamilyRules rules = rules_of(family);
  std::vector<Plan> plans;
  plans.reserve(decls.size());
  for (const TensorDecl& d : decls) {
    Plan p = plan_for(d, layout, rules);
    p.sizes = expected_part_sizes(header(p), Where{"", d.name, ""});
    plans.push_back(std::move(p));
  }
  return plans;
}

// Costs and per-format totals of the plans.
void account(const std::vector<Plan>& plans, std::vector<WeightCost>& costs,
             std::map<std::string, uint64_t>& by_format, uint64_t& table_bytes) {
  for (const Plan& p : plans) {
    const uint64_t stored = p.sizes.main + p.sizes.block_scale + p.sizes.global_scale;
    costs.push_back({p.decl->name, p.module, p.rows, stored, p.rows * p.cols * 4});
    by_format[std::string(format_name(p.format))] += stored;
    if (p.table) table_bytes += stored;
  }
}

// The model's declarations with a shape for those a checkpoint may store in several (glm5_next's KDA A_log,
// checked by element count): the plain one of the config's values.
std::vector<TensorDecl> shaped_decls(const Model& model, const nlohmann::json& text) {
  std::vector<TensorDecl> decls = model.declare();
  for (TensorDecl& d : decls) {
    if (!d.shape.empty() || !ends_with(d.name, "A_log")) continue;
    const nlohmann::json& la = text.contains("linear_attn_config") && text["linear_attn_config"].is_object()
                                   ? text["linear_attn_config"]
                                   : text;
    d.shape = {cfg_int(la, "num_heads", cfg_int(text, "linear_num_heads", 64))};
  }
  return decls;
}

// The probe name read_model_config picks the checkpoint prefix from: the multimodal wrapper's
// (model.language_model.) when the config has a text_config, else model.
std::vector<std::string> prefix_probe(const nlohmann::json& config) {
  return {config.contains("text_config") ? "model.language_model.embed_tokens.weight"
                                         : "model.embed_tokens.weight"};
}

}  // namespace

void check_synthetic_fits(const SyntheticPlan& plan, uint64_t free_bytes, const std::string& name) {
  uint64_t device = 0;
  for (const auto& [format, bytes] : plan.bytes_by_format) device += bytes;
  device -= std::min(device, plan.table_bytes);
  if (free_bytes == 0 || device <= free_bytes) return;
  raise("E_MEMORY_PLAN", Where{"", "", "--synthetic"},
        fmt::format("at most {} MiB of weights (the device's free memory)", free_bytes >> 20),
        fmt::format("{} MiB of stored weights for {}", device >> 20, name),
        "nothing was allocated; --layers N builds the first N layers");
}

SyntheticPlan plan_synthetic(const nlohmann::json& config, SyntheticLayout layout) {
  SyntheticPlan sp;
  sp.config = read_model_config(config, prefix_probe(config));
  const std::unique_ptr<Model> model = create_model(sp.config);
  sp.family = model->info().family;
  const std::vector<TensorDecl> decls = shaped_decls(*model, sp.config.text);
  account(make_plans(decls, layout, sp.family), sp.costs, sp.bytes_by_format, sp.table_bytes);
  return sp;
}

SyntheticLayout parse_synthetic_layout(const std::string& name) {
  if (name == "nvidia") return SyntheticLayout::Nvidia;
  if (name == "qad") return SyntheticLayout::Qad;
  raise("E_BENCH_ARGS", Where{"", "", "--synthetic-layout"}, "nvidia or qad", name);
}

namespace {

// models.md §4.2, the shipped GLM-5.3-Flash text config (index_kpool 4 as shipped, not transformers' 16).
nlohmann::json glm5_next_config() {
  const int L = 45;
  nlohmann::json layer_types = nlohmann::json::array(), mlp_types = nlohmann::json::array(),
                 indexer_types = nlohmann::json::array();
  for (int i = 0; i < L; ++i) {
    layer_types.push_back(i % 4 == 3 ? "deepseek_sparse_attention" : "linear_attention");
    mlp_types.push_back(i < 3 ? "dense" : "sparse");
    indexer_types.push_back("full");
  }
  nlohmann::json t = {
      {"model_type", "glm5_next_text"},
      {"vocab_size", 154880},
      {"hidden_size", 4096},
      {"num_hidden_layers", L},
      {"layer_types", layer_types},
      {"mlp_layer_types", mlp_types},
      {"indexer_types", indexer_types},
      {"num_attention_heads", 64},
      {"num_key_value_heads", 64},
      {"q_lora_rank", 1536},
      {"kv_lora_rank", 512},
      {"qk_nope_head_dim", 256},
      {"qk_rope_head_dim", 0},
      {"v_head_dim", 256},
      {"linear_attn_config",
       {{"num_heads", 64}, {"head_dim", 128}, {"short_conv_kernel_size", 4}, {"gate_lower_bound", -5.0}}},
      {"index_n_heads", 32},
      {"index_head_dim", 128},
      {"index_topk", 2048},
      {"index_kpool", 4},
      {"index_kpool_always_select_tail", true},
      {"n_routed_experts", 288},
      {"num_experts_per_tok", 8},
      {"moe_intermediate_size", 2048},
      {"n_shared_experts", 1},
      {"intermediate_size", 12288},
      {"routed_scaling_factor", 2.5},
      {"n_group", 1},
      {"topk_group", 1},
      {"norm_topk_prob", true},
      {"swiglu_limit", 10.0},
      {"hc_mult", 4},
      {"hc_eps", 1e-6},
      {"hc_sinkhorn_iters", 20},
      {"rms_norm_eps", 1e-5},
      {"max_position_embeddings", 1048576},
      {"num_nextn_predict_layers", 1},
      {"eos_token_id", {154820, 154827, 154829}},
      {"pad_token_id", 154820},
      {"tie_word_embeddings", false},
      {"attention_bias", false}};
  return {{"model_type", "glm5_next"},
          {"architectures", {"Glm5NextForConditionalGeneration"}},
          {"tie_word_embeddings", false},
          {"text_config", t}};
}

// models.md §2.2, the Qwen3-Next-80B-A3B config (flat, text only; checkpoint prefix model.).
nlohmann::json qwen3_next_config() {
  return {{"model_type", "qwen3_next"},
          {"architectures", {"Qwen3NextForCausalLM"}},
          {"vocab_size", 151936},
          {"hidden_size", 2048},
          {"num_hidden_layers", 48},
          {"full_attention_interval", 4},
          {"num_attention_heads", 16},
          {"num_key_value_heads", 2},
          {"head_dim", 256},
          {"linear_num_key_heads", 16},
          {"linear_num_value_heads", 32},
          {"linear_key_head_dim", 128},
          {"linear_value_head_dim", 128},
          {"linear_conv_kernel_dim", 4},
          {"num_experts", 512},
          {"num_experts_per_tok", 10},
          {"moe_intermediate_size", 512},
          {"shared_expert_intermediate_size", 512},
          {"norm_topk_prob", true},
          {"decoder_sparse_step", 1},
          {"mlp_only_layers", nlohmann::json::array()},
          {"intermediate_size", 5120},
          {"rope_theta", 10000000.0},
          {"partial_rotary_factor", 0.25},
          {"max_position_embeddings", 262144},
          {"rms_norm_eps", 1e-6},
          {"hidden_act", "silu"},
          {"tie_word_embeddings", false},
          {"attention_bias", false},
          {"bos_token_id", 151643},
          {"eos_token_id", 151645},
          {"mtp_num_hidden_layers", 1}};
}

}  // namespace

nlohmann::json builtin_config(const std::string& family) {
  if (family == "glm5_next") return glm5_next_config();
  if (family == "qwen3_next") return qwen3_next_config();
  if (family != "qwen4_exp")
    raise("E_BENCH_UNSUPPORTED", Where{"", "", "--synthetic"},
          "a family with a built-in config (qwen4_exp, qwen3_next, glm5_next)", family);
  // models.md §3.2, the shipped Qwen3.8-Flash-Next config.
  nlohmann::json layer_types = nlohmann::json::array();
  for (int i = 0; i < 48; ++i) layer_types.push_back(i % 4 == 3 ? "full_attention" : "linear_attention");
  nlohmann::json t = {{"model_type", "qwen4_exp_text"},
                      {"vocab_size", 248320},
                      {"hidden_size", 2560},
                      {"num_hidden_layers", 48},
                      {"layer_types", layer_types},
                      {"num_attention_heads", 24},
                      {"num_key_value_heads", 2},
                      {"head_dim", 256},
                      {"linear_num_key_heads", 16},
                      {"linear_num_value_heads", 48},
                      {"linear_key_head_dim", 128},
                      {"linear_value_head_dim", 128},
                      {"linear_conv_kernel_dim", 4},
                      {"output_gate_type", "sigmoid"},
                      {"hidden_act", "silu"},
                      {"num_experts", 512},
                      {"num_experts_per_tok", 10},
                      {"moe_intermediate_size", 640},
                      {"shared_expert_intermediate_size", 640},
                      {"norm_topk_prob", true},
                      {"hc_count", 4},
                      {"hc_lowrank", 320},
                      {"ple_layer_ids", {2}},
                      {"ple_embed_dim", 2560},
                      {"ple_conv_kernel_size", 4},
                      {"ngram_size", 3},
                      {"heads_per_ngram", 8},
                      {"ngram_vocab_size_base", 20000000},
                      {"make_ngram_vocab_size_divisible_by", 128},
                      {"seed", 1234},
                      {"split_ngram_parts", 128},
                      {"indexer_n_heads", 4},
                      {"indexer_kv_heads", 1},
                      {"indexer_head_dim", 128},
                      {"indexer_budget", 2048},
                      {"indexer_compress_ratio", 4},
                      {"rope_parameters",
                       {{"rope_type", "default"},
                        {"rope_theta", 10000000.0},
                        {"partial_rotary_factor", 0.25},
                        {"mrope_section", {11, 11, 10}},
                        {"mrope_interleaved", true}}},
                      {"max_position_embeddings", 262144},
                      {"rms_norm_eps", 1e-6},
                      {"eos_token_id", 248044},
                      {"tie_word_embeddings", false},
                      {"attention_bias", false},
                      {"mtp_num_hidden_layers", 1},
                      {"mtp_use_dedicated_embeddings", false},
                      {"mamba_ssm_dtype", "float32"}};
  return {{"model_type", "qwen4_exp"},
          {"architectures", {"Qwen4ExpForConditionalGeneration"}},
          {"tie_word_embeddings", false},
          {"text_config", t}};
}

nlohmann::json synthetic_config(const std::string& spec) {
  const size_t colon = spec.find(':');
  const std::string family = spec.substr(0, colon);
  nlohmann::json c = builtin_config(family);
  if (colon == std::string::npos) return c;
  const std::string path = spec.substr(colon + 1);
  std::ifstream f(path);
  if (!f) raise("E_BENCH_CONFIG", Where{path, "", ""}, "a readable config.json", "cannot open");
  nlohmann::json user = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (!user.is_object()) raise("E_BENCH_CONFIG", Where{path, "", ""}, "a JSON object", "invalid JSON");
  if (user.contains("text_config"))
    c.merge_patch(user);
  else
    c["text_config"].merge_patch(user);
  return c;
}

nlohmann::json limit_layers(const nlohmann::json& config, int64_t layers) {
  nlohmann::json c = config;
  nlohmann::json& t = c.contains("text_config") ? c["text_config"] : c;
  const int64_t L = cfg_int(t, "num_hidden_layers");
  if (layers < 1 || layers > L)
    raise("E_BENCH_ARGS", Where{"", "", "--layers"}, "1 … " + std::to_string(L) + " (the model's layers)",
          std::to_string(layers));
  t["num_hidden_layers"] = layers;
  // Per-layer schedules keep their first `layers` entries; layer id lists drop the ids past the end.
  for (auto it = t.begin(); it != t.end(); ++it) {
    if (it->is_array() && static_cast<int64_t>(it->size()) == L) {
      nlohmann::json cut = nlohmann::json::array();
      for (int64_t i = 0; i < layers; ++i) cut.push_back((*it)[i]);
      *it = cut;
    } else if (it->is_string() && it.key() == "index_topk_pattern" &&
               static_cast<int64_t>(it->get<std::string>().size()) == L) {
      *it = it->get<std::string>().substr(0, layers);
    }
  }
  for (const char* ids : {"ple_layer_ids", "mlp_only_layers"}) {
    if (!t.contains(ids) || !t[ids].is_array()) continue;
    nlohmann::json kept = nlohmann::json::array();
    for (const auto& v : t[ids])
      if (v.is_number_integer() && v.get<int64_t>() < layers) kept.push_back(v);
    t[ids] = kept;
  }
  return c;
}

struct SyntheticSource {
  SyntheticLayout layout = SyntheticLayout::Nvidia;
  uint64_t seed = 42;
  ModelConfig config;             // the whole model's (TP 1)
  std::unique_ptr<Model> model;   // its declarations' owner
  std::vector<TensorDecl> decls;  // the whole model's, in declaration order: a tensor's index seeds it
  std::vector<Plan> plans;        // one per decl (Plan::decl points into decls)
  std::unordered_map<std::string, size_t> index;  // name → plan
  std::map<std::string, Pool> pools;
  double build_seconds = 0;
  // Streamed tables, built by the first rank that needs one and shared by the others (the 51 GB PLE table
  // once per process, not once per rank; host tables only read their bytes).
  std::mutex table_mu;
  std::map<size_t, SyntheticTable> tables;

  const SyntheticTable& table(size_t i, ThreadPool& tp) {
    std::lock_guard<std::mutex> lock(table_mu);
    auto it = tables.find(i);
    if (it != tables.end()) return it->second;
    const int64_t parts = cfg_int(config.text, "split_ngram_parts", 1);
    return tables.emplace(i, build_table(plans[i], pools, parts, tp, mix(seed + 7919 * i))).first->second;
  }
};

namespace {

// A stand-in record of a synthetic tensor, so the format layer's own unit check judges its cut
// (check_cut: the format table's tp units, FP8 blocks' tile).
WeightRecord record_of(const Plan& p) {
  WeightRecord r;
  r.name = p.decl->name;
  r.module = p.module;
  r.format = p.format;
  r.shape = {p.rows, p.cols};
  if (p.format == FormatId::FP8_BLOCK) r.block_n = r.block_k = 128;
  return r;
}

// A rank's cut of one tensor's stored bytes, cut as formats/weight_slice.cc cuts a checkpoint's: rows are
// their byte ranges (and their scale rows, or scale-grid rows), columns each row's element range and
// block-scale range; the global scale is shared. The slice decodes to exactly the slice of the decoded whole
// (the format layer's slice tests), so the ranks hold the TP 1 model's weights.
void slice_stored(const Plan& p, const Built& whole, const TensorCut& cut, Built& out) {
  const WeightBytes& w = whole.bytes;
  const PartSizes& s = p.sizes;
  out.bytes = w;
  out.own_global.assign(w.global_scale.begin(), w.global_scale.end());
  if (cut.axis == TensorCut::Axis::Rows) {
    const bool grid = s.block_scale && s.block_scale_rows != p.rows;  // FP8 blocks: one scale row per tile
    for (const auto& [b, e] : cut.ranges) {
      out.own_main.insert(out.own_main.end(), w.main.begin() + b * s.main_row,
                          w.main.begin() + e * s.main_row);
      if (!s.block_scale) continue;
      const uint64_t bn = grid ? static_cast<uint64_t>(w.block_n) : 1;
      const uint64_t g0 = b / bn, g1 = (e + bn - 1) / bn;
      out.own_scale.insert(out.own_scale.end(), w.block_scale.begin() + g0 * s.block_scale_row,
                           w.block_scale.begin() + g1 * s.block_scale_row);
    }
    out.bytes.rows = cut.count();
  } else {
    const uint64_t c0 = cut.ranges[0].first, c1 = cut.ranges[0].second, K = p.cols, n = c1 - c0;
    const uint64_t e0 = c0 * s.main_row / K, en = n * s.main_row / K;  // whole bytes: checked by the units
    out.own_main.resize(p.rows * en);
    for (uint64_t r = 0; r < p.rows; ++r)
      std::memcpy(out.own_main.data() + r * en, w.main.data() + r * s.main_row + e0, en);
    if (s.block_scale) {
      // Scale columns: the format's block, or the tile (FP8 blocks).
      const int fk = format_info(p.format).block_k;
      const uint64_t bk = fk > 0 ? uint64_t(fk) : w.block_k > 0 ? uint64_t(w.block_k) : K;
      const uint64_t elem = s.block_scale_row / ((K + bk - 1) / bk);
      const uint64_t s0 = c0 / bk, sn = (c1 + bk - 1) / bk - s0;
      out.own_scale.resize(s.block_scale_rows * sn * elem);
      for (uint64_t g = 0; g < s.block_scale_rows; ++g)
        std::memcpy(out.own_scale.data() + g * sn * elem,
                    w.block_scale.data() + g * s.block_scale_row + s0 * elem, sn * elem);
    }
    out.bytes.cols = n;
  }
  out.bytes.main = out.own_main;
  out.bytes.block_scale = out.own_scale;
  out.bytes.global_scale = out.own_global;
}

// The stored bytes of every part of a built weight (what it costs in memory and per read).
uint64_t stored_bytes(const WeightBytes& w) {
  return w.main.size() + w.block_scale.size() + w.global_scale.size();
}

uint64_t numel(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t x : shape) n *= static_cast<uint64_t>(x);
  return n;
}

}  // namespace

std::shared_ptr<SyntheticSource> make_synthetic_source(const nlohmann::json& config, SyntheticLayout layout,
                                                       int threads, uint64_t seed) {
  const auto t0 = Clock::now();
  auto src = std::make_shared<SyntheticSource>();
  src->layout = layout;
  src->seed = seed;
  // The multimodal wrapper's prefix, as the shipped checkpoint names its text tensors.
  src->config = read_model_config(config, prefix_probe(config));
  src->model = create_model(src->config);
  src->decls = shaped_decls(*src->model, src->config.text);

  // Plans, and the largest window each pool must serve.
  src->plans = make_plans(src->decls, layout, src->model->info().family);
  for (size_t i = 0; i < src->plans.size(); ++i) src->index.emplace(src->plans[i].decl->name, i);
  std::map<std::string, Pool>& pools = src->pools;
  auto need = [&](Kind k, double std, uint64_t bytes) {
    Pool& p = pools[pool_key(k, std)];
    p.kind = k, p.std = std, p.need = std::max(p.need, bytes);
  };
  for (const Plan& p : src->plans) {
    if (p.table) {  // tables copy pool windows repeatedly: a modest pool serves any size
      const bool nv = p.format == FormatId::NVFP4;
      need(nv ? Kind::Nibbles : Kind::E4m3Elem, 0, std::min<uint64_t>(p.sizes.main, 64u << 20));
      if (nv) need(Kind::E4m3Scale, 0, std::min<uint64_t>(p.sizes.block_scale, 16u << 20));
    } else if (p.fill == Fill::Pool) {
      const auto [k, std] = main_pool(p);
      need(k, std, p.sizes.main);
      if (p.format == FormatId::NVFP4) need(Kind::E4m3Scale, 0, p.sizes.block_scale);
    }
  }

  // Pools: a quarter larger than the largest window, so windows of equal-sized tensors differ. Each chunk
  // has its own seed, so the bytes do not depend on the thread count (--nodes processes agree).
  ThreadPool tp(threads);
  uint64_t pool_seed = seed;
  for (auto& [key, p] : pools) {
    const uint64_t size = (p.need + p.need / 4 + 4096) & ~uint64_t{15};
    p.bytes.resize(size);
    const uint64_t chunk = 1 << 22, chunks = (size + chunk - 1) / chunk, base = mix(++pool_seed);
    tp.parallel_for(static_cast<int64_t>(chunks), [&](int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i) {
        const uint64_t o = static_cast<uint64_t>(i) * chunk;
        fill_random(p.kind, p.std, base + static_cast<uint64_t>(i), p.bytes.data() + o,
                    std::min(chunk, size - o));
      }
    });
  }
  src->build_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return src;
}

double source_seconds(const SyntheticSource& source) {
  return source.build_seconds;
}

std::unique_ptr<SyntheticModel> build_synthetic_rank(SyntheticSource& src, Backend& backend,
                                                     const SyntheticHooks& hooks, int tp_rank, int tp_size,
                                                     Communicator* comm, int threads, ElemType kv_type) {
  const auto t0 = Clock::now();
  auto sm = std::make_unique<SyntheticModel>();
  sm->config = src.config;
  sm->config.kv_type = kv_type;
  sm->config.tp_rank = tp_rank;
  sm->config.tp_size = tp_size;
  sm->config.comm = comm;
  sm->model = create_model(sm->config);  // the family's E_TP_CUT for a world size its shapes do not divide
  std::vector<TensorDecl> decls = shaped_decls(*sm->model, sm->config.text);
  // The bench runs no spec rows under TP (run_bench_grid refuses them), so a rank builds no draft layer (the
  // optional declarations): its cuts may not fit the FP8-block experts at reduced shapes either.
  if (tp_size > 1) std::erase_if(decls, [](const TensorDecl& d) { return d.optional; });

  // Every declaration's whole-model plan (its format, fill and seed), and its cut checked against the
  // format's units, before anything is built.
  std::vector<size_t> which(decls.size());
  for (size_t i = 0; i < decls.size(); ++i) {
    const TensorDecl& d = decls[i];
    const auto it = src.index.find(d.name);
    if (it == src.index.end())
      raise("E_BENCH_UNSUPPORTED", Where{"", d.name, ""}, "a tensor of the whole model (synthetic TP)",
            fmt::format("declared by rank {} of {} only", tp_rank, tp_size));
    which[i] = it->second;
    const Plan& p = src.plans[it->second];
    uint64_t have = p.rows * p.cols;
    if (!d.cut.whole()) {
      if (p.table)
        raise("E_BENCH_UNSUPPORTED", Where{"", d.name, ""}, "a streamed table kept whole under TP", "a cut");
      check_cut(record_of(p), d.cut);
      have = d.cut.axis == TensorCut::Axis::Rows ? d.cut.count() * p.cols : p.rows * d.cut.count();
    }
    if (!d.shape.empty() && numel(d.shape) != have)
      raise("E_DENSE_SHAPE", Where{"", d.name, "shape"}, shape_string(d.shape),
            fmt::format("{} elements in rank {}'s part of [{}, {}]", have, tp_rank, p.rows, p.cols));
  }

  ThreadPool tp(threads);
  std::vector<Weight> made(decls.size());
  std::vector<WeightCost> costs(decls.size());
  // Tables first (their shard fill runs on the pool), then every other tensor in parallel.
  for (size_t i = 0; i < decls.size(); ++i) {
    const Plan& p = src.plans[which[i]];
    if (!p.table) continue;
    const SyntheticTable& t = src.table(which[i], tp);
    if (hooks.table) {
      made[i] = hooks.table(p.decl->name, p.decl->shape, t);
    } else {
      const std::vector<float> f = decode_table(t);
      made[i] = backend.upload_weight(p.decl->name, f, p.decl->shape);
    }
    costs[i] = {p.decl->name, p.module, p.rows, p.sizes.main + p.sizes.block_scale + p.sizes.global_scale,
                p.rows * p.cols * 4};
  }
  std::mutex upload_mu;  // Backend::upload_weight is not promised to be thread-safe
  tp.parallel_for(static_cast<int64_t>(decls.size()), [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) {
      const TensorDecl& d = decls[i];
      const Plan& p = src.plans[which[i]];
      if (p.table) continue;
      // The whole tensor's bytes (seeded by its whole-model index), then the rank's cut of them.
      Built whole, part;
      build_bytes(p, src.pools, mix(src.seed + 0x51ED * static_cast<uint64_t>(which[i] + 1)), whole);
      if (!d.cut.whole()) slice_stored(p, whole, d.cut, part);
      const Built& bt = d.cut.whole() ? whole : part;
      const std::vector<int64_t>& shape = d.shape.empty() ? p.decl->shape : d.shape;
      costs[i] = {d.name, p.module, bt.bytes.rows, stored_bytes(bt.bytes), bt.bytes.rows * bt.bytes.cols * 4};
      if (hooks.stored) {
        made[i] = hooks.stored(d.name, shape, bt.bytes);
        continue;
      }
      Warnings warnings;
      validate_weight_bytes(bt.bytes, Where{"", d.name, ""}, warnings);
      std::vector<float> f(bt.bytes.rows * bt.bytes.cols);
      decode_rows(bt.bytes, 0, bt.bytes.rows, f.data());
      std::lock_guard<std::mutex> lock(upload_mu);
      made[i] = backend.upload_weight(d.name, f, shape);
    }
  });

  for (size_t i = 0; i < decls.size(); ++i) {
    const Plan& p = src.plans[which[i]];
    sm->bytes_by_format[std::string(format_name(p.format))] += costs[i].stored;
    if (p.table) sm->table_bytes += costs[i].stored;
  }
  sm->costs = std::move(costs);
  for (size_t i = 0; i < decls.size(); ++i) sm->weights.put(decls[i].name, std::move(made[i]));
  sm->model->bind(backend, sm->weights);
  sm->build_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return sm;
}

LoadRank synthetic_load_rank(std::shared_ptr<SyntheticSource> source,
                             std::function<SyntheticHooks(Backend&)> hooks_for, int threads,
                             std::function<void(const SyntheticModel&, int rank)> on_built) {
  return [source, hooks_for, threads, on_built](Backend& be, const LoadOptions& o) {
    std::unique_ptr<SyntheticModel> sm =
        build_synthetic_rank(*source, be, hooks_for ? hooks_for(be) : SyntheticHooks{}, o.tp_rank, o.tp_size,
                             o.comm, threads, o.kv_type);
    if (on_built) on_built(*sm, o.tp_rank);
    auto lm = std::make_unique<LoadedModel>();
    lm->folder = "synthetic " + source->model->info().family;
    lm->config = sm->config;
    lm->weights = std::move(sm->weights);  // the map's nodes move with it: what bind() saw stays put
    lm->model = std::move(sm->model);
    return lm;
  };
}

std::unique_ptr<SyntheticModel> build_synthetic(const nlohmann::json& config, Backend& backend,
                                                SyntheticLayout layout, const SyntheticHooks& hooks,
                                                int threads, uint64_t seed, ElemType kv_type) {
  const std::shared_ptr<SyntheticSource> src = make_synthetic_source(config, layout, threads, seed);
  std::unique_ptr<SyntheticModel> sm =
      build_synthetic_rank(*src, backend, hooks, 0, 1, nullptr, threads, kv_type);
  sm->build_seconds += src->build_seconds;
  return sm;
}

}  // namespace bloomery::tools
