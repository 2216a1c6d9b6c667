#include "server/checkpoint_checks.h"

#include <set>

#include <fmt/format.h>

#include "core/error.h"
#include "core/file.h"

namespace bloomery::server {
namespace {

// A config integer: absent = nullopt; present and not a positive integer = E_CFG_FIELD_VALUE.
std::optional<int64_t> positive(const nlohmann::json& c, const char* key, const std::string& file) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer() || it->get<int64_t>() <= 0)
    raise("E_CFG_FIELD_VALUE", Where{file, "", key}, "a positive integer", it->dump());
  return it->get<int64_t>();
}

}  // namespace

void check_forward_config(const nlohmann::json& root, const std::filesystem::path& config_file) {
  const std::string file = config_file.string();
  const nlohmann::json& c =
      root.contains("text_config") && root["text_config"].is_object() ? root["text_config"] : root;
  for (const char* k :
       {"hidden_size", "num_hidden_layers", "vocab_size", "intermediate_size", "moe_intermediate_size",
        "max_position_embeddings", "num_attention_heads", "num_key_value_heads"})
    positive(c, k, file);
  auto heads = positive(c, "num_attention_heads", file);
  auto kv = positive(c, "num_key_value_heads", file);
  if (heads && kv && *heads % *kv != 0)
    raise("E_CFG_FIELD_VALUE", Where{file, "", "num_key_value_heads"},
          fmt::format("a divisor of num_attention_heads ({})", *heads), std::to_string(*kv),
          "grouped-query attention shares each key/value head among a whole number of query heads");
  auto experts = positive(c, "num_experts", file);
  if (!experts) experts = positive(c, "n_routed_experts", file);
  auto top_k = positive(c, "num_experts_per_tok", file);
  if (experts && top_k && *top_k > *experts)
    raise("E_CFG_FIELD_VALUE", Where{file, "", "num_experts_per_tok"},
          fmt::format("at most the number of experts ({})", *experts), std::to_string(*top_k),
          "the router picks its top-k among the experts present");
  if (auto it = c.find("layer_types"); it != c.end() && !it->is_null()) {
    static const std::set<std::string> known = {"full_attention", "linear_attention", "sliding_attention",
                                                "deepseek_sparse_attention"};
    if (!it->is_array()) raise("E_CFG_FIELD_VALUE", Where{file, "", "layer_types"}, "an array", it->dump());
    auto layers = positive(c, "num_hidden_layers", file);
    if (layers && static_cast<int64_t>(it->size()) != *layers)
      raise("E_CFG_FIELD_VALUE", Where{file, "", "layer_types"},
            fmt::format("one entry per layer ({})", *layers), fmt::format("{} entries", it->size()));
    for (size_t i = 0; i < it->size(); ++i) {
      const auto& t = (*it)[i];
      if (!t.is_string() || !known.count(t.get<std::string>()))
        raise("E_CFG_FIELD_VALUE", Where{file, "", fmt::format("layer_types[{}]", i)},
              "full_attention, linear_attention, sliding_attention or deepseek_sparse_attention", t.dump());
    }
  }
}

CheckedCheckpoint check_checkpoint(const std::filesystem::path& folder, std::string_view backend_name,
                                   const Backend::MemoryInfo& memory, const std::string& chat_template_file,
                                   ElemType kv_type) {
  CheckedCheckpoint out;
  // The config's consistency first: prepare_model builds the model object from it.
  const std::filesystem::path cfg = folder / "config.json";
  if (std::filesystem::exists(cfg)) {
    nlohmann::json j = nlohmann::json::parse(read_text_file(cfg), nullptr, false);
    if (!j.is_discarded()) check_forward_config(j, cfg);
  }
  LoadOptions lo;
  lo.kv_type = kv_type;  // the memory plan counts the caches in their type
  out.lm = prepare_model(folder, backend_name, memory, lo);
  const std::filesystem::path cfg_dir = out.lm->source->config_dir();
  if (cfg_dir != folder && std::filesystem::exists(cfg_dir / "config.json"))
    check_forward_config(out.lm->source->config(), cfg_dir / "config.json");
  out.tokenizer.emplace(Tokenizer::from_folder(cfg_dir));
  if (!chat_template_file.empty())
    out.chat_template.emplace(
        ChatTemplate::from_source(read_text_file(chat_template_file), chat_template_file));
  else
    out.chat_template.emplace(ChatTemplate::from_folder(cfg_dir));
  // One conversation rendered, so a template that cannot run at all refuses the start, not every request.
  nlohmann::ordered_json ctx = {{"messages", {{{"role", "user"}, {"content", "hello"}}}},
                                {"add_generation_prompt", true},
                                {"bos_token", out.tokenizer->bos_token()},
                                {"eos_token", out.tokenizer->eos_token()}};
  (void)out.chat_template->render(ctx);
  return out;
}

}  // namespace bloomery::server
