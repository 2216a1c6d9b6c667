// Tokenizer pieces on small hand-made tokenizer.json specs: BPE merge order (against a naive reference),
// added-token options, byte fallback, decoders, and named refusals of what bloomery cannot reproduce.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"

namespace bloomery {
namespace {

using nlohmann::json;

// A byte-level BPE: ids 0..255 are the byte alphabet, then one id per merge result.
json byte_level_spec(const std::vector<std::pair<std::string, std::string>>& merges,
                     bool byte_level_pretok = true) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level::utf8_for_byte(static_cast<uint8_t>(b))] = b;
  json m = json::array();
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = static_cast<int>(vocab.size());
    m.push_back(json::array({a, b}));
  }
  json spec = {{"version", "1.0"},
               {"added_tokens", json::array()},
               {"normalizer", nullptr},
               {"pre_tokenizer", nullptr},
               {"post_processor", nullptr},
               {"decoder", {{"type", "ByteLevel"}}},
               {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}}}};
  if (byte_level_pretok)
    spec["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  return spec;
}

// The textbook BPE: merge the lowest-ranked adjacent pair (leftmost on ties) until none is left.
std::vector<std::string> naive_bpe(const std::string& word,
                                   const std::vector<std::pair<std::string, std::string>>& merges) {
  std::vector<std::string> sym;
  for (char c : word) sym.emplace_back(1, c);
  while (true) {
    size_t best_rank = merges.size(), best_pos = 0;
    for (size_t i = 0; i + 1 < sym.size(); ++i)
      for (size_t r = 0; r < best_rank; ++r)
        if (merges[r].first == sym[i] && merges[r].second == sym[i + 1]) {
          best_rank = r;
          best_pos = i;
          break;
        }
    if (best_rank == merges.size()) return sym;
    sym[best_pos] += sym[best_pos + 1];
    sym.erase(sym.begin() + static_cast<long>(best_pos) + 1);
  }
}

TEST(Bpe, MatchesNaiveReferenceOnRandomMergesAndWords) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<std::string> tokens = {"a", "b", "c", "d"};
    std::vector<std::pair<std::string, std::string>> merges;
    for (int k = 0; k < 30; ++k) {
      const auto& x = tokens[rng() % tokens.size()];
      const auto& y = tokens[rng() % tokens.size()];
      if (x.size() + y.size() > 8) continue;
      bool dup = false;
      for (const auto& m : merges) dup |= m.first == x && m.second == y;
      if (dup) continue;
      merges.emplace_back(x, y);
      tokens.push_back(x + y);
    }
    for (bool byte_level : {true, false}) {
      Tokenizer tok = Tokenizer::from_json(byte_level_spec(merges, byte_level), "random");
      for (int w = 0; w < 50; ++w) {
        std::string word;
        size_t len = 1 + rng() % 14;
        for (size_t i = 0; i < len; ++i) word.push_back(static_cast<char>('a' + rng() % 4));
        std::vector<std::string> want = naive_bpe(word, merges);
        // Twice: the second call comes from the word cache.
        for (int again = 0; again < 2; ++again) {
          std::vector<std::string> got;
          for (int32_t id : tok.encode(word)) got.push_back(tok.token_string(id));
          ASSERT_EQ(got, want) << "word " << word << " trial " << trial << " byte_level " << byte_level;
        }
      }
    }
  }
}

TEST(Bpe, BothMergeSpellingsAgree) {
  std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}};
  json spec = byte_level_spec(merges);
  Tokenizer a = Tokenizer::from_json(spec, "arrays");
  for (auto& m : spec["model"]["merges"]) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  Tokenizer b = Tokenizer::from_json(spec, "strings");
  EXPECT_EQ(a.encode("hello hell"), b.encode("hello hell"));
  EXPECT_EQ(a.token_string(a.encode("hello")[0]), "hello");
}

void expect_error(const json& spec, const std::string& id, const std::string& field) {
  try {
    Tokenizer::from_json(spec, "spec.json");
    ADD_FAILURE() << "expected " << id;
  } catch (const Error& e) {
    EXPECT_EQ(e.id(), id) << e.what();
    EXPECT_EQ(e.info().where.field, field) << e.what();
    EXPECT_EQ(e.info().where.file, "spec.json");
  }
}

TEST(Tokenizer, RefusesWhatItCannotReproduce) {
  json base = byte_level_spec({{"a", "b"}});
  json s = base;
  s["model"]["type"] = "WordPiece";
  expect_error(s, "E_TOK_UNSUPPORTED", "model.type");
  s = base;
  s["normalizer"] = {{"type", "Lowercase"}};
  expect_error(s, "E_TOK_UNSUPPORTED", "normalizer");
  s = base;
  s["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", json::array({{{"type", "Digits"}, {"individual_digits", true}}})}};
  expect_error(s, "E_TOK_UNSUPPORTED", "pre_tokenizer.pretokenizers[0]");
  s = base;
  s["decoder"] = {{"type", "WordPiece"}};
  expect_error(s, "E_TOK_UNSUPPORTED", "decoder");
  s = base;
  s["model"]["dropout"] = 0.1;
  expect_error(s, "E_TOK_UNSUPPORTED", "model.dropout");
  s = base;
  s["model"]["merges"].push_back(json::array({"a", "zz"}));
  expect_error(s, "E_TOK_BAD_MERGE", "model.merges[1]");
  s = base;
  s["model"]["merges"].push_back("a b c");
  expect_error(s, "E_TOK_BAD_MERGE", "model.merges[1]");
  s = base;
  s["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  expect_error(s, "E_TOK_REGEX", "pre_tokenizer.pattern.Regex");
  s = base;
  s["post_processor"] = {{"type", "RobertaProcessing"}};
  expect_error(s, "E_TOK_UNSUPPORTED", "post_processor");
}

TEST(Tokenizer, SplitBehaviours) {
  // Merges that glue every run of letters and dashes, so each pre-tokenized piece becomes one token.
  std::vector<std::pair<std::string, std::string>> merges = {
      {"a", "-"}, {"-", "b"}, {"a-", "b"}, {"-", "-"}, {"a", "a"}};
  auto spec_for = [&](const char* behavior) {
    json s = byte_level_spec(merges);
    s["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         json::array({{{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}},
                      {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
    return s;
  };
  auto strings = [](const Tokenizer& t, const std::string& text) {
    std::vector<std::string> out;
    for (int32_t id : t.encode(text)) out.push_back(t.token_string(id));
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(strings(Tokenizer::from_json(spec_for("Isolated"), "s"), "a-b"), (V{"a", "-", "b"}));
  EXPECT_EQ(strings(Tokenizer::from_json(spec_for("Removed"), "s"), "a-b"), (V{"a", "b"}));
  EXPECT_EQ(strings(Tokenizer::from_json(spec_for("MergedWithPrevious"), "s"), "a-b"), (V{"a-", "b"}));
  EXPECT_EQ(strings(Tokenizer::from_json(spec_for("MergedWithNext"), "s"), "a-b"), (V{"a", "-b"}));
  EXPECT_EQ(strings(Tokenizer::from_json(spec_for("Contiguous"), "s"), "a--b"), (V{"a", "--", "b"}));
  EXPECT_EQ(strings(Tokenizer::from_json(spec_for("Isolated"), "s"), "a--b"), (V{"a", "-", "-", "b"}));
}

// SentencePiece-style: no pre-tokenizer, "▁" for spaces, <0xXX> byte fallback, decoder that undoes both.
json byte_fallback_spec() {
  json vocab = {{"<unk>", 0},
                {"\xE2\x96\x81", 1},
                {"a", 2},
                {"\xE2\x96\x81"
                 "a",
                 3}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 4 + b;
  }
  return {
      {"added_tokens", json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}}})},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         json::array({{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                      {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}})}}},
      {"pre_tokenizer", nullptr},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         json::array({{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                      {{"type", "ByteFallback"}},
                      {{"type", "Fuse"}},
                      {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges", json::array({json::array({"\xE2\x96\x81", "a"})})},
        {"byte_fallback", true},
        {"unk_token", "<unk>"}}}};
}

TEST(Tokenizer, ByteFallbackEncodeDecodeAndStream) {
  Tokenizer tok = Tokenizer::from_json(byte_fallback_spec(), "sp");
  // "a あ": ▁a, ▁, then あ (E3 81 82) as three byte tokens.
  auto ids = tok.encode("a \xE3\x81\x82");
  ASSERT_EQ(ids, (std::vector<int32_t>{3, 1, 4 + 0xE3, 4 + 0x81, 4 + 0x82}));
  EXPECT_EQ(tok.decode_text(ids), "a \xE3\x81\x82");  // leading space stripped, bytes fused
  StreamDecoder stream(tok);
  EXPECT_EQ(stream.push(ids[0]), "a");
  EXPECT_EQ(stream.push(ids[1]), " ");
  EXPECT_EQ(stream.push(ids[2]), "");  // half a character is held back
  EXPECT_EQ(stream.held(), 1u);
  EXPECT_EQ(stream.push(ids[3]), "");
  EXPECT_EQ(stream.push(ids[4]), "\xE3\x81\x82");
  EXPECT_EQ(stream.finish(), "");
  // A byte that can never start a character comes out at once as U+FFFD; a cut-off one at finish().
  EXPECT_EQ(stream.push(4 + 0xFF), "\xEF\xBF\xBD");
  EXPECT_EQ(stream.push(4 + 0xE3), "");
  EXPECT_EQ(stream.push(2),
            "\xEF\xBF\xBD"
            "a");
  EXPECT_EQ(stream.push(4 + 0xF0), "");
  EXPECT_EQ(stream.finish(), "\xEF\xBF\xBD");
  EXPECT_THROW(tok.piece(9999), Error);
}

TEST(Tokenizer, AddedTokenOptions) {
  json spec = byte_level_spec({{"a", "b"}});
  spec["added_tokens"] = json::array({
      {{"id", 0}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
      {{"id", 0}, {"content", "[L]"}, {"special", true}, {"lstrip", true}, {"normalized", false}},
      {{"id", 0}, {"content", "[R]"}, {"special", false}, {"rstrip", true}, {"normalized", false}},
      {{"id", 0}, {"content", "ab"}, {"special", false}, {"single_word", true}},
  });
  Tokenizer tok = Tokenizer::from_json(spec, "added");
  // File ids are ignored like HF does: new tokens take the next free ids; "ab" is already in the vocabulary.
  int32_t s = 257, l = 258, r = 259;
  ASSERT_EQ(tok.token_to_id("<s>"), s);
  ASSERT_EQ(tok.token_to_id("[L]"), l);
  ASSERT_EQ(tok.token_to_id("[R]"), r);
  EXPECT_EQ(tok.token_to_id("ab"), 256);
  EXPECT_EQ(tok.vocab_size(), 260);
  const int32_t sp = ' ';
  const int32_t x = 'x';
  // Byte ids: printable ASCII bytes are their own id in byte_level_spec; the space byte is id 32.
  EXPECT_EQ(tok.encode("x  [L]x"), (std::vector<int32_t>{x, l, x}));
  EXPECT_EQ(tok.encode("x[R]  x"), (std::vector<int32_t>{x, r, x}));
  EXPECT_EQ(tok.encode("x<s>x"), (std::vector<int32_t>{x, s, x}));
  EXPECT_EQ(tok.encode("x<s>x", /*parse_special=*/false).size(), 5u);      // special text is plain text
  EXPECT_EQ(tok.encode("x[R]x", false), (std::vector<int32_t>{x, r, x}));  // non-special still matched
  EXPECT_EQ(tok.encode("x ab x"), (std::vector<int32_t>{x, sp, 256, sp, x}));
  EXPECT_EQ(tok.encode("xab"),
            (std::vector<int32_t>{x, 256}));  // not a single word: ordinary BPE gives ab too
  EXPECT_TRUE(tok.is_special(s));
  EXPECT_FALSE(tok.is_special(r));
  std::vector<int32_t> ids = {x, s, x};
  EXPECT_EQ(tok.decode(ids), "x<s>x");
  EXPECT_EQ(tok.decode(ids, /*skip_special=*/true), "xx");
}

}  // namespace
}  // namespace bloomery
