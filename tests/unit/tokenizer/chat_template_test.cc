// ChatTemplate: loading from a model folder, render-time errors and their ids.
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/chat_template.h"

namespace bloomery {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("bloomery_ct_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
  }
  const fs::path& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

const ojson kCtx =
    ojson::parse(R"({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true})");

TEST(ChatTemplate, FromFolderPrefersChatTemplateJinja) {
  TempDir d;
  d.write("tokenizer_config.json", R"({"chat_template": "config"})");
  d.write("chat_template.jinja", "file:{{ messages[0].content }}");
  EXPECT_EQ(ChatTemplate::from_folder(d.path()).render(kCtx), "file:hi");
}

TEST(ChatTemplate, FromFolderReadsTokenizerConfigStringOrDefaultEntry) {
  TempDir a;
  a.write("tokenizer_config.json", R"({"chat_template": "{{ messages | length }}"})");
  EXPECT_EQ(ChatTemplate::from_folder(a.path()).render(kCtx), "1");
  TempDir b;
  b.write(
      "tokenizer_config.json",
      R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})");
  EXPECT_EQ(ChatTemplate::from_folder(b.path()).render(kCtx), "D");
}

TEST(ChatTemplate, FromFolderWithoutTemplateIsRefused) {
  TempDir a;
  a.write("tokenizer_config.json", R"({"eos_token": "x"})");
  try {
    ChatTemplate::from_folder(a.path());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.id(), "E_TPL_MISSING");
  }
  TempDir empty;
  EXPECT_THROW(ChatTemplate::from_folder(empty.path()), Error);
  TempDir b;
  b.write("tokenizer_config.json", R"({"chat_template": [{"name": "rag", "template": "R"}]})");
  EXPECT_THROW(ChatTemplate::from_folder(b.path()), Error);
}

TEST(ChatTemplate, RaiseExceptionCarriesTheTemplatesMessage) {
  auto t = ChatTemplate::from_source(
      "ok\n{% if not tools %}{{ raise_exception('tools required') }}{% endif %}", "r");
  try {
    t.render(kCtx);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.id(), "E_TPL_RAISE");
    std::string msg = e.what();
    EXPECT_NE(msg.find("tools required"), std::string::npos) << msg;
    EXPECT_NE(msg.find("r:2:"), std::string::npos) << msg;
  }
}

TEST(ChatTemplate, RenderErrorsNameLineAndColumn) {
  auto t = ChatTemplate::from_source("a\n  {{ missing.attr }}", "tpl");
  try {
    t.render(kCtx);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.id(), "E_TPL_RENDER");
    EXPECT_NE(std::string(e.what()).find("tpl:2:"), std::string::npos) << e.what();
  }
}

TEST(ChatTemplate, ToolsKeepRequestKeyOrderInTojson) {
  auto t = ChatTemplate::from_source("{{ tools[0] | tojson }}", "k");
  ojson ctx = ojson::parse(R"({"messages": [], "tools": [{"type": "function", "b": 1, "a": "é"}]})");
  EXPECT_EQ(t.render(ctx), R"({"type": "function", "b": 1, "a": "é"})");
  // plain nlohmann::json sorts keys; the overload still renders, in that order
  EXPECT_EQ(t.render(nlohmann::json::parse(R"({"tools": [{"b": 1, "a": 2}]})")), R"({"a": 2, "b": 1})");
}

TEST(ChatTemplate, ContextMustBeAnObject) {
  auto t = ChatTemplate::from_source("x", "c");
  EXPECT_THROW(t.render(ojson::array()), Error);
}

}  // namespace
}  // namespace bloomery
