// Tensor roles by name (models.md §2.3, §3.3, §4.3).
#include "models/roles.h"

#include <charconv>

namespace bloomery {

namespace {

bool has(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}
bool starts_with(std::string_view s, std::string_view p) {
  return s.substr(0, p.size()) == p;
}

// The decoder layer index of "….layers.{i}.…" (the last such component), or -1.
int64_t layer_index(std::string_view name) {
  size_t pos = name.rfind("layers.");
  while (pos != std::string_view::npos) {
    if (pos == 0 || name[pos - 1] == '.') {
      std::string_view rest = name.substr(pos + 7);
      int64_t i = -1;
      auto r = std::from_chars(rest.data(), rest.data() + rest.size(), i);
      if (r.ec == std::errc() && r.ptr != rest.data() &&
          (r.ptr == rest.data() + rest.size() || *r.ptr == '.'))
        return i;
    }
    if (pos == 0) break;
    pos = name.rfind("layers.", pos - 1);
  }
  return -1;
}

}  // namespace

std::string_view role_name(Role r) {
  switch (r) {
    case Role::RoutedExpert:
      return "routed_expert";
    case Role::SharedExpert:
      return "shared_expert";
    case Role::Router:
      return "router";
    case Role::Attention:
      return "attention";
    case Role::LinearAttention:
      return "linear_attention";
    case Role::Indexer:
      return "indexer";
    case Role::HyperConnection:
      return "hyper_connection";
    case Role::Embedding:
      return "embedding";
    case Role::PleTable:
      return "ple_table";
    case Role::Ple:
      return "ple";
    case Role::Head:
      return "head";
    case Role::Draft:
      return "draft";
    case Role::Norm:
      return "norm";
    case Role::DenseMlp:
      return "dense_mlp";
    case Role::Vision:
      return "vision";
    case Role::Other:
      return "other";
  }
  return "other";
}

RoleContext role_context_from_config(const nlohmann::json& config) {
  RoleContext ctx;
  const nlohmann::json& tc =
      config.is_object() && config.contains("text_config") && config["text_config"].is_object()
          ? config["text_config"]
          : config;
  if (!tc.is_object()) return ctx;
  if (tc.contains("num_hidden_layers") && tc["num_hidden_layers"].is_number_integer())
    ctx.num_hidden_layers = tc["num_hidden_layers"].get<int64_t>();
  if (tc.contains("layer_types") && tc["layer_types"].is_array())
    for (const auto& t : tc["layer_types"])
      ctx.layer_types.push_back(t.is_string() ? t.get<std::string>() : "");
  return ctx;
}

Role role_of(std::string_view name, const RoleContext& ctx) {
  if (starts_with(name, "model.visual.") || starts_with(name, "visual.")) return Role::Vision;
  if (starts_with(name, "mtp.")) return Role::Draft;
  const int64_t layer = layer_index(name);
  if (ctx.num_hidden_layers > 0 && layer == ctx.num_hidden_layers) return Role::Draft;
  if (has(name, "ngram_embedding")) return Role::PleTable;
  if (has(name, ".ple.")) return Role::Ple;
  if (has(name, ".experts.") || has(name, ".experts_")) return Role::RoutedExpert;
  if (has(name, ".shared_expert")) return Role::SharedExpert;
  if (has(name, ".mlp.gate.") || name.substr(name.size() >= 9 ? name.size() - 9 : 0) == ".mlp.gate")
    return Role::Router;
  if (has(name, ".indexer.")) return Role::Indexer;
  if (has(name, "hyper_connection") || has(name, ".hc_")) return Role::HyperConnection;
  if (has(name, ".linear_attn.")) return Role::LinearAttention;
  if (has(name, ".self_attn.")) {
    if (layer >= 0 && layer < static_cast<int64_t>(ctx.layer_types.size()) &&
        (ctx.layer_types[layer] == "linear_attention" || ctx.layer_types[layer] == "kda"))
      return Role::LinearAttention;
    return Role::Attention;
  }
  if (has(name, "embed_tokens")) return Role::Embedding;
  if (starts_with(name, "lm_head") || has(name, ".lm_head")) return Role::Head;
  if (has(name, ".mlp.")) return Role::DenseMlp;
  if (has(name, "norm")) return Role::Norm;
  return Role::Other;
}

}  // namespace bloomery
