// `bloomery tokenize <folder> "text"`: prints the ids and pieces of a text, a file or a rendered chat.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "tools/command.h"

#if __has_include("tokenizer/chat_template.h")
#include "tokenizer/chat_template.h"
#define BLOOMERY_HAVE_CHAT_TEMPLATE 1
#endif

namespace bloomery::tools {
namespace {

std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) raise("E_IO_OPEN", Where{path.string(), {}, {}}, "a readable file", "cannot open");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A piece as JSON: its text when it is valid UTF-8, else its byte values (as the server's /tokenize does).
nlohmann::json piece_json(const std::string& bytes) {
  if (utf8::is_valid(bytes)) return bytes;
  nlohmann::json arr = nlohmann::json::array();
  for (unsigned char c : bytes) arr.push_back(static_cast<int>(c));
  return arr;
}

int run_tokenize(int argc, char** argv) {
  CLI::App app{"Tokenize a text with a model folder's tokenizer.json: prints ids and pieces."};
  std::string folder, text, file, chat;
  bool no_special = false, json_out = false, generation_prompt = false;
  app.add_option("folder", folder, "model folder (with tokenizer.json) or a tokenizer.json file")->required();
  app.add_option("text", text, "text to tokenize (special-token text such as <|im_end|> is parsed)");
  app.add_option("--file", file, "read the text from this file, byte for byte");
  app.add_option("--chat", chat,
                 "render this messages.json (an array of messages, or an object with messages, tools, ...) "
                 "with the folder's chat template, then tokenize");
  app.add_flag("--add-generation-prompt", generation_prompt, "with --chat: end with the assistant prompt");
  app.add_flag("--no-special", no_special, "treat special-token text as plain text");
  app.add_flag("--json", json_out, "print {\"ids\": [...], \"pieces\": [...]}");
  CLI11_PARSE(app, argc, argv);

  int sources = !text.empty() + !file.empty() + !chat.empty();
  if (sources != 1) {
    std::fprintf(stderr, "error: give exactly one of: text, --file, --chat\n");
    return 2;
  }
  std::filesystem::path path(folder);
  bool is_folder = std::filesystem::is_directory(path);
  Tokenizer tok = is_folder ? Tokenizer::from_folder(path) : Tokenizer::from_file(path);

  std::string input;
  if (!file.empty()) {
    input = read_bytes(file);
  } else if (!chat.empty()) {
#ifdef BLOOMERY_HAVE_CHAT_TEMPLATE
    if (!is_folder) {
      std::fprintf(stderr, "error: --chat needs a model folder (for its chat template)\n");
      return 2;
    }
    nlohmann::ordered_json given;
    try {
      given = nlohmann::ordered_json::parse(read_bytes(chat));
    } catch (const nlohmann::json::exception& e) {
      raise("E_CLI_BAD_JSON", Where{chat, {}, {}}, "JSON messages", e.what());
    }
    nlohmann::ordered_json context = nlohmann::ordered_json::object();
    if (given.is_array()) {
      context["messages"] = given;
    } else if (given.is_object() && given.contains("messages")) {
      context = given;
    } else {
      raise("E_CLI_BAD_JSON", Where{chat, {}, {}}, "an array of messages or an object with \"messages\"",
            given.type_name());
    }
    if (!context.contains("add_generation_prompt")) context["add_generation_prompt"] = generation_prompt;
    if (!context.contains("bos_token")) context["bos_token"] = tok.bos_token();
    if (!context.contains("eos_token")) context["eos_token"] = tok.eos_token();
    input = ChatTemplate::from_folder(path).render(context);
#else
    std::fprintf(stderr, "error: this build has no chat template support\n");
    return 2;
#endif
  } else {
    input = text;
  }

  auto ids = tok.encode(input, !no_special);
  if (json_out) {
    nlohmann::json out;
    out["ids"] = ids;
    out["pieces"] = nlohmann::json::array();
    for (int32_t id : ids) out["pieces"].push_back(piece_json(tok.piece(id)));
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  if (!chat.empty()) std::printf("%s\n---\n", utf8::replace_invalid(input).c_str());
  std::printf("%zu tokens\n", ids.size());
  for (int32_t id : ids) std::printf("%8d  %s\n", id, piece_json(tok.piece(id)).dump(-1, ' ', false).c_str());
  return 0;
}

RegisterCommand reg{"tokenize", "print a text's token ids and pieces (tokenizer.json, chat templates)",
                    run_tokenize};

}  // namespace
}  // namespace bloomery::tools
