// libFuzzer target: arbitrary bytes as a chat template plus its messages. The input is split at the first
// "\n---\n": before it is the Jinja source, after it the messages as JSON (a list, or an object whose keys
// become the context). Without a separator, or when that JSON does not parse, a fixed conversation is used,
// so the fuzzer spends its time on the template engine (src/tokenizer/jinja_*.cc) and not on JSON syntax.
// Compiling and rendering must either succeed or throw bloomery::Error (E_TPL_*); any other exception, a
// crash, a sanitizer report or a hang (libFuzzer's -timeout) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/chat_template.h"

namespace {

nlohmann::ordered_json fixed_messages() {
  return nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hi <think> & \"quotes\" \u00e9"},
    {"role": "assistant", "content": "", "tool_calls": [
      {"type": "function", "function": {"name": "f", "arguments": {"x": 1, "y": [true, null, 2.5]}}}]},
    {"role": "tool", "content": "42"},
    {"role": "user", "content": [{"type": "text", "text": "and?"}]}
  ])");
}

nlohmann::ordered_json context_from(std::string_view json_part, bool has_json) {
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  nlohmann::ordered_json given = nlohmann::ordered_json::value_t::discarded;
  if (has_json) given = nlohmann::ordered_json::parse(json_part, nullptr, false);
  if (given.is_object()) {
    ctx = std::move(given);
  } else {
    ctx["messages"] = given.is_array() ? std::move(given) : fixed_messages();
  }
  if (!ctx.contains("messages")) ctx["messages"] = fixed_messages();
  ctx["add_generation_prompt"] = true;
  ctx["bos_token"] = "<s>";
  ctx["eos_token"] = "</s>";
  ctx["tools"] = nullptr;
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  static constexpr std::string_view kSeparator = "\n---\n";
  const size_t cut = input.find(kSeparator);
  const bool has_json = cut != std::string_view::npos;
  const std::string source(has_json ? input.substr(0, cut) : input);
  const std::string_view json_part = has_json ? input.substr(cut + kSeparator.size()) : std::string_view{};
  try {
    const bloomery::ChatTemplate tpl = bloomery::ChatTemplate::from_source(source, "fuzz.jinja");
    const std::string out = tpl.render(context_from(json_part, has_json));
    (void)out;
  } catch (const bloomery::Error& e) {
    // A named error: E_TPL_SYNTAX / E_TPL_UNSUPPORTED / E_TPL_RENDER / E_TPL_RAISE, never an empty id.
    if (e.id().rfind("E_TPL_", 0) != 0) std::abort();
  }
  // Anything else thrown escapes and libFuzzer reports it as a crash (uncaught exception).
  return 0;
}
