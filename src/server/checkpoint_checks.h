// Every check bloomery-serve runs on a checkpoint before it loads a weight, in one function, so that
// `bloomery inspect` runs exactly the same ones and refuses a folder with the same named error (issue 18):
// the loader's prepare (folder, headers, offsets, dtypes, index, quantisation config, declarations against
// the tensors present, shapes against config.json, scales), the config's consistency for the forward, the
// tokenizer, and the chat template rendered once.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "backend/backend.h"
#include "models/model_loader.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace bloomery::server {

struct CheckedCheckpoint {
  std::unique_ptr<LoadedModel> lm;  // prepared: nothing allocated
  std::optional<Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat_template;
};

// Throws bloomery::Error (the first problem, by name). `chat_template_file` overrides the folder's template;
// kv_type is the K/V caches' element type the memory plan counts (-ctk/-ctv).
CheckedCheckpoint check_checkpoint(const std::filesystem::path& folder, std::string_view backend_name,
                                   const Backend::MemoryInfo& memory, const std::string& chat_template_file,
                                   ElemType kv_type = ElemType::F32);

// What the forward needs of config.json (text_config when present): positive sizes, attention heads that
// divide, top-k at most the expert count, layer types the families know. E_CFG_FIELD_VALUE naming the field.
void check_forward_config(const nlohmann::json& config, const std::filesystem::path& config_file);

}  // namespace bloomery::server
