// The grammar engine: GBNF parsing and errors, byte-level matching (tokens that end inside a UTF-8
// character or cross element boundaries), the vocabulary mask, JSON schema conversion (outputs of random
// walks validate), and the tool-call parser on scripted text.
#include "server/grammar.h"

#include <cmath>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/json_schema.h"
#include "server/tool_calls.h"

using namespace bloomery::server;
using json = nlohmann::json;

TEST(Grammar, LiteralsClassesRepetitionAndAlternatives) {
  auto g = Grammar::parse(R"(root ::= "ab" [0-9]+ ( "x" | "yz" )? tail
tail ::= [^a-c]{2,3}  # comment
)");
  EXPECT_TRUE(g->matches("ab1x__"));
  EXPECT_TRUE(g->matches("ab123yzdd"));
  EXPECT_TRUE(g->matches("ab9ddd"));
  EXPECT_FALSE(g->matches("ab9dddd"));  // {2,3}
  EXPECT_FALSE(g->matches("abx__"));    // + needs one digit
  EXPECT_FALSE(g->matches("ab1xab"));   // [^a-c]
  EXPECT_FALSE(g->matches("ab1x"));
}

TEST(Grammar, MultiLineRulesAndNestedGroups) {
  auto g = Grammar::parse("root ::= item (\n  \",\" item\n)*\nitem ::= \"a\"\n  | \"b\"\n");
  EXPECT_TRUE(g->matches("a,b,a"));
  EXPECT_FALSE(g->matches("a,"));
  EXPECT_FALSE(g->matches("c"));
}

TEST(Grammar, BadGrammarsNameTheConstruct) {
  auto msg = [](const std::string& src) {
    try {
      Grammar::parse(src);
    } catch (const GrammarError& e) {
      return std::string(e.what());
    }
    return std::string("compiled");
  };
  EXPECT_NE(msg("root ::= foo").find("undefined rule 'foo'"), std::string::npos);
  EXPECT_NE(msg("root ::= root \"a\" | \"b\"").find("left-recursive"), std::string::npos);
  EXPECT_NE(msg("start ::= \"a\"").find("no 'root'"), std::string::npos);
  EXPECT_NE(msg("root ::= \"a").find("closing"), std::string::npos);
  EXPECT_NE(msg("root ::= [b-a]").find("range"), std::string::npos);
}

TEST(Grammar, MultiByteCharactersAcrossByteBoundaries) {
  auto g = Grammar::parse("root ::= [α-ω]+ \"€\"");
  Grammar::State s = g->initial();
  std::string text = "αβ€";
  // Byte by byte: the state stays alive in the middle of each character.
  for (unsigned char c : text) ASSERT_TRUE(g->advance(s, c));
  EXPECT_TRUE(g->accepting(s));
  // A lead byte of a character outside the class is refused at once, before its continuation bytes.
  Grammar::State t = g->initial();
  EXPECT_FALSE(g->advance(t, static_cast<uint8_t>(0xE4)));  // 一 starts E4; [α-ω] is CE/CF
  EXPECT_FALSE(g->matches("αβ"));
  // Overlong and out-of-range lead bytes never pass for ASCII: C1 would be an overlong 'y'.
  auto a = Grammar::parse("root ::= \"y\"");
  for (uint8_t lead : {0xC0, 0xC1, 0xE0, 0xF0, 0xF5}) {
    Grammar::State u = a->initial();
    EXPECT_FALSE(a->advance(u, lead)) << int(lead);
  }
}

TEST(Grammar, MaskAllowsExactlyTheTokensThatStayInside) {
  // A toy byte-level vocabulary whose tokens cross element boundaries and split a character.
  std::vector<std::string> vocab = {"{", "\"a", "\":", " 1", "}", "1}", "x", "\xCE", "\xB1\"", "\"", "<eos>"};
  std::vector<bool> text(vocab.size(), true);
  text.back() = false;
  auto g = Grammar::parse(R"(root ::= "{" "\"" [a-zα]+ "\":" " "? [0-9]+ "}")");
  TokenMasker m(g, vocab, text);
  auto allowed = [&](const std::string& so_far) {
    Grammar::State s = g->initial();
    EXPECT_TRUE(g->advance(s, so_far));
    const TokenMask& mask = m.mask(s);
    std::vector<std::string> ok;
    for (size_t i = 0; i < vocab.size(); ++i)
      if (mask[i]) ok.push_back(vocab[i]);
    return ok;
  };
  EXPECT_EQ(allowed(""), (std::vector<std::string>{"{"}));
  EXPECT_EQ(allowed("{"), (std::vector<std::string>{"\"a", "\""}));
  EXPECT_EQ(allowed("{\"a"), (std::vector<std::string>{"\":", "x", "\xCE", "\""}));
  EXPECT_EQ(allowed("{\"\xCE"), (std::vector<std::string>{"\xB1\""}));  // completes α, then the quote
  EXPECT_EQ(allowed("{\"a\":"), (std::vector<std::string>{" 1", "1}"}));
  // Every allowed token keeps a completion possible; cache hits return the same mask.
  uint64_t misses = m.cache_misses();
  allowed("{\"a\":");
  EXPECT_EQ(m.cache_misses(), misses);
}

namespace {

// What the mask must be, token by token: the state after the token's bytes exists.
std::vector<bool> brute_mask(const Grammar& g, const Grammar::State& s, const std::vector<std::string>& vocab,
                             const std::vector<bool>& text) {
  std::vector<bool> ok(vocab.size(), false);
  for (size_t i = 0; i < vocab.size(); ++i) {
    if (!text[i] || vocab[i].empty()) continue;
    Grammar::State t = s;
    ok[i] = g.advance(t, vocab[i]);
  }
  return ok;
}

// A byte-level vocabulary built to hit the hard cases: JSON punctuation glued to text (tokens that cross
// element boundaries), multibyte characters cut at every byte, stray continuation and invalid bytes,
// duplicates, long runs, an empty token and special tokens.
std::vector<std::string> tricky_vocab(std::mt19937_64& rng, size_t n) {
  const std::vector<std::string> pieces = {"{",    "}",    "[",    "]",  "\"",  ":", ",",  " ", "\n",
                                           "\\",   "a",    "bc",   "n",  "u",   "0", "12", "-", ".",
                                           "e",    "true", "ul",   "l",  "é",   "α", "€",  "😀", "\xCE",
                                           "\xB1", "\x80", "\xFF", "\t", "\"a", "x"};
  std::vector<std::string> v = {"", "{", "\"", "é"};
  while (v.size() < n) {
    std::string t;
    size_t k = 1 + rng() % 4;
    for (size_t j = 0; j < k; ++j) t += pieces[rng() % pieces.size()];
    if (rng() % 5 == 0 && t.size() > 1) t = t.substr(rng() % t.size());  // cut inside a character
    if (rng() % 50 == 0) t = std::string(1 + rng() % 40, ' ');
    v.push_back(t);
    if (rng() % 30 == 0) v.push_back(t);  // a duplicate id
  }
  return v;
}

}  // namespace

// Applying a mask: refused ids (and ids past the vocabulary, padded heads) get -inf, allowed ones keep their
// logit; EOS keeps its own logit once the grammar accepts and is refused before; a dead end (nothing
// allowed) still lets EOS end the answer.
TEST(Grammar, ApplyMaskKeepsAllowedLogitsAndGatesEos) {
  TokenMask m(130);
  for (size_t i : {0, 5, 64, 127}) m.set(i);
  const std::vector<int32_t> eos = {129};
  std::vector<float> row(140, 2.5f);
  row[129] = 7.0f;
  apply_mask(m, false, eos, row);
  for (size_t i = 0; i < row.size(); ++i) {
    const bool allowed = i == 0 || i == 5 || i == 64 || i == 127;
    EXPECT_EQ(row[i], allowed ? 2.5f : -INFINITY) << i;
  }
  std::vector<float> done(140, 2.5f);
  done[129] = 7.0f;
  apply_mask(m, true, eos, done);
  EXPECT_EQ(done[129], 7.0f);
  EXPECT_EQ(done[64], 2.5f);
  EXPECT_EQ(done[135], -INFINITY);
  std::vector<float> dead(140, 1.0f);
  dead[129] = -INFINITY;
  apply_mask(TokenMask(130), false, eos, dead);
  EXPECT_EQ(dead[129], 0.0f);
  EXPECT_EQ(dead[3], -INFINITY);
}

// Byte by byte against character by character: a strict UTF-8 decoder in the test feeds whole characters;
// at every character boundary the two states are equal, and in the middle of a character the byte path is
// alive exactly when some valid character with those leading bytes is taken (checked over every completion).
// This is what lets the state forget a prefix's bits (State::any_tail) without changing any answer.
TEST(Grammar, BytePathEqualsTheCharacterPath) {
  const std::vector<std::string> grammars = {
      "root ::= ( [α-ω] | [^\\x00-\\x7F\\u4E00-\\u4E2F] | \"x\" )* \"!\"",
      "root ::= [\\u0800-\\uD7FF\\uE000-\\uFFFF]+ | [\\U00010000-\\U0010FFFF] [a-z]",
      "root ::= \"\\\"\" [^\"\\\\]{0,4} \"\\\"\" | [\\u00C0-\\u00FF]+ [0-9]"};
  // Whole characters from every UTF-8 length and the edges (U+0800, U+D7FF, U+E000, U+10000, U+10FFFF), and
  // bytes that are no character: a stray continuation, overlong leads, a surrogate, beyond U+10FFFF.
  const std::vector<std::string> pieces = {"x",
                                           "!",
                                           "\"",
                                           "a",
                                           "7",
                                           "α",
                                           "ω",
                                           "é",
                                           "ÿ",
                                           "À",
                                           "中",
                                           "丢",
                                           "一",
                                           "\xE0\xA0\x80",
                                           "\xED\x9F\xBF",
                                           "\xEE\x80\x80",
                                           "\xF0\x90\x80\x80",
                                           "\xF4\x8F\xBF\xBF",
                                           "😀",
                                           "\x80",
                                           "\xC0\xAF",
                                           "\xE0\x80\xAF",
                                           "\xED\xA0\x80",
                                           "\xF4\x90\x80\x80",
                                           "\xF5",
                                           "\xCE",
                                           "\xE4\xB8"};
  auto decode = [](const std::string& b, size_t& i, uint32_t& cp) {  // false: no valid character at i
    const unsigned char c = static_cast<unsigned char>(b[i]);
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + static_cast<size_t>(n) > b.size()) return false;
    cp = n == 1 ? c : (c & (0x7Fu >> n));
    for (int k = 1; k < n; ++k) {
      const unsigned char d = static_cast<unsigned char>(b[i + static_cast<size_t>(k)]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += static_cast<size_t>(n);
    return true;
  };
  // Some valid character starting with `prefix` (1–3 bytes of one character) is taken from state `s`.
  auto some_completion = [&](const Grammar& g, const Grammar::State& s, const std::string& prefix) {
    const unsigned char c = static_cast<unsigned char>(prefix[0]);
    const int n = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0) return false;
    const int left = n - static_cast<int>(prefix.size());
    uint32_t tails = 1u << (6 * left);
    for (uint32_t t = 0; t < tails; ++t) {
      std::string full = prefix;
      for (int k = left - 1; k >= 0; --k) full += static_cast<char>(0x80 | ((t >> (6 * k)) & 0x3F));
      size_t i = 0;
      uint32_t cp = 0;
      if (!decode(full, i, cp)) continue;
      Grammar::State u = s;
      if (g.advance_char(u, cp)) return true;
    }
    return false;
  };
  size_t compared = 0;
  for (const auto& src : grammars) {
    auto g = Grammar::parse(src);
    for (uint64_t seed = 0; seed < 300; ++seed) {
      std::mt19937_64 rng(seed);
      std::string text;
      for (size_t k = 1 + rng() % 8; k > 0; --k) text += pieces[rng() % pieces.size()];
      Grammar::State bytes = g->initial(), chars = g->initial();
      size_t boundary = 0;  // the character path has read text[0, boundary)
      bool chars_alive = true;
      for (size_t i = 0; i < text.size(); ++i) {
        const bool alive = g->advance(bytes, static_cast<uint8_t>(text[i]));
        // Bring the character path up to i + 1 where a whole character ends there.
        size_t j = boundary;
        uint32_t cp = 0;
        bool whole = chars_alive && decode(text, j, cp) && j == i + 1;
        if (whole) {
          chars_alive = g->advance_char(chars, cp);
          boundary = j;
          ASSERT_EQ(alive, chars_alive) << src << " seed " << seed << " byte " << i;
          if (alive) ASSERT_TRUE(bytes == chars) << src << " seed " << seed << " byte " << i;
        } else {
          bool want = false;
          if (chars_alive && i + 1 - boundary <= 3) {
            want = some_completion(*g, chars, text.substr(boundary, i + 1 - boundary));
            ASSERT_EQ(alive, want) << src << " seed " << seed << " byte " << i;
          } else {
            ASSERT_FALSE(alive) << src << " seed " << seed << " byte " << i;
          }
          chars_alive = chars_alive && want;
        }
        compared++;
        if (!alive) break;
      }
    }
  }
  EXPECT_GT(compared, 1000u);
}

// The fast mask (automaton over a preorder trie, cached per state) equals the per-token check for every
// state along random constrained generations, for several grammars, vocabularies and seeds; also after the
// cache is shared by several generations and with masks asked for in a different order.
TEST(Grammar, FastMaskEqualsTheTokenByTokenCheck) {
  auto schema = nlohmann::ordered_json::parse(R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 5}, "n": {"type": "integer"}, "k": {"enum": ["é€", "ab"]},
      "t": {"type": "array", "items": {"type": "boolean"}}}, "required": ["name", "k"]})");
  const std::vector<std::string> grammars = {json_object_gbnf(), schema_to_gbnf(schema),
                                             "root ::= [α-ω]+ \"€\" ( [^\\x00-\\x7F]{1,3} | \"😀\" )"};
  size_t checked = 0;
  for (uint64_t vs = 0; vs < 3; ++vs) {
    std::mt19937_64 vrng(100 + vs);
    std::vector<std::string> vocab = tricky_vocab(vrng, 1500);
    std::vector<bool> text(vocab.size(), true);
    vocab.push_back("<|im_end|>");  // special: never allowed, even though its bytes would be
    text.push_back(false);
    for (const auto& src : grammars) {
      auto g = Grammar::parse(src);
      TokenMasker m(g, vocab, text);
      for (uint64_t seed = 0; seed < 12; ++seed) {
        std::mt19937_64 rng(seed * 7 + vs);
        Grammar::State s = g->initial();
        for (int step = 0; step < 60; ++step) {
          const TokenMask& fast = m.mask(s);
          std::vector<bool> want = brute_mask(*g, s, vocab, text);
          ASSERT_EQ(fast.size(), vocab.size());
          std::vector<size_t> ok;
          for (size_t i = 0; i < vocab.size(); ++i) {
            ASSERT_EQ(fast[i], want[i]) << "grammar " << src.substr(0, 40) << " seed " << seed << " step "
                                        << step << " token '" << vocab[i] << "'";
            if (want[i]) ok.push_back(i);
          }
          checked++;
          if (ok.empty()) break;
          ASSERT_TRUE(g->advance(s, vocab[ok[rng() % ok.size()]]));
          if (g->finished(s) || (g->accepting(s) && rng() % 4 == 0)) break;
        }
      }
    }
  }
  EXPECT_GT(checked, 500u);
}

namespace {

// A random walk through the grammar: at each step pick a byte the grammar takes (printable ASCII and a
// few multibyte letters), stopping when complete. The text is a sentence of the grammar by construction.
std::string random_sentence(const Grammar& g, std::mt19937_64& rng, size_t max_len = 400) {
  std::vector<std::string> pieces;
  for (int c = 32; c < 127; ++c) pieces.push_back(std::string(1, static_cast<char>(c)));
  pieces.push_back("é");
  pieces.push_back("\n");
  Grammar::State s = g.initial();
  std::string out;
  while (out.size() < max_len) {
    if (g.finished(s)) return out;
    if (g.accepting(s) && rng() % 4 == 0) return out;
    std::vector<std::string> ok;
    for (const auto& p : pieces) {
      Grammar::State t = s;
      if (g.advance(t, p)) ok.push_back(p);
    }
    if (ok.empty()) break;
    // Prefer closing characters as the text grows, so walks end.
    std::string pick = ok[rng() % ok.size()];
    if (out.size() > 60)
      for (const auto& p : ok)
        if (p == "}" || p == "]" || p == "\"" || p == ",") {
          if (rng() % 2) pick = p;
        }
    g.advance(s, pick);
    out += pick;
  }
  return g.accepting(s) ? out : std::string();
}

bool validates(const json& v, const json& s) {
  if (s.contains("enum")) return std::find(s["enum"].begin(), s["enum"].end(), v) != s["enum"].end();
  if (s.contains("anyOf")) {
    for (const auto& a : s["anyOf"])
      if (validates(v, a)) return true;
    return false;
  }
  std::string t = s.value("type", "");
  if (t == "object") {
    if (!v.is_object()) return false;
    for (const auto& r : s.value("required", json::array()))
      if (!v.contains(r.get<std::string>())) return false;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!s["properties"].contains(it.key())) return false;
      if (!validates(it.value(), s["properties"][it.key()])) return false;
    }
    return true;
  }
  if (t == "array") {
    if (!v.is_array()) return false;
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    for (const auto& x : v)
      if (!validates(x, s["items"])) return false;
    return true;
  }
  if (t == "string") {
    if (!v.is_string()) return false;
    // Length in characters: count UTF-8 lead bytes.
    size_t n = 0;
    for (unsigned char c : v.get<std::string>()) n += (c & 0xC0) != 0x80;
    return n >= s.value("minLength", size_t{0}) && n <= s.value("maxLength", size_t{1} << 30);
  }
  if (t == "integer") return v.is_number_integer();
  if (t == "number") return v.is_number();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  return true;
}

}  // namespace

TEST(JsonSchema, RandomSentencesParseAndValidateOverManySeeds) {
  json schema = json::parse(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "maxLength": 8},
      "age": {"type": "integer"},
      "tags": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 3}, "maxItems": 3},
      "kind": {"enum": ["cat", "dog", 3]},
      "ok": {"type": "boolean"},
      "maybe": {"anyOf": [{"type": "null"}, {"type": "number"}]}
    },
    "required": ["name", "kind"]
  })");
  auto g = Grammar::parse(schema_to_gbnf(nlohmann::ordered_json::parse(schema.dump())));
  int produced = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    std::mt19937_64 rng(seed);
    std::string text = random_sentence(*g, rng);
    if (text.empty()) continue;
    produced++;
    json v = json::parse(text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << "seed " << seed << ": " << text;
    EXPECT_TRUE(validates(v, schema)) << "seed " << seed << ": " << text;
  }
  EXPECT_GT(produced, 150);
}

TEST(JsonSchema, RefsAndRecursionAndJsonObject) {
  auto schema = nlohmann::ordered_json::parse(R"({"$defs": {"node": {"type": "object", "properties": {
      "v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
      "required": ["v", "next"]}}, "$ref": "#/$defs/node"})");
  auto g = Grammar::parse(schema_to_gbnf(nlohmann::ordered_json::parse(schema.dump())));
  EXPECT_TRUE(g->matches(R"({"v": 1, "next": {"v": 2, "next": null}})"));
  EXPECT_FALSE(g->matches(R"({"v": 1})"));
  auto o = Grammar::parse(json_object_gbnf());
  EXPECT_TRUE(o->matches(R"({"a": [1, 2.5e3, "x\n", true, null, {}]})"));
  EXPECT_FALSE(o->matches(R"([1])"));
  EXPECT_FALSE(o->matches(R"({"a": 01})"));
}

TEST(JsonSchema, UncompilableConstructsAreNamed) {
  auto msg = [](const char* s) {
    try {
      schema_to_gbnf(nlohmann::ordered_json::parse(s));
    } catch (const GrammarError& e) {
      return std::string(e.what());
    }
    return std::string("compiled");
  };
  EXPECT_NE(msg(R"({"type": "string", "pattern": "^a+$"})").find("'pattern'"), std::string::npos);
  EXPECT_NE(msg(R"({"type": "integer", "minimum": 3})").find("'minimum'"), std::string::npos);
  EXPECT_NE(
      msg(R"({"properties": {"a": {"type": "string", "format": "email"}}})").find("/properties/a/format"),
      std::string::npos);
  EXPECT_NE(msg(R"({"$ref": "http://example.com/s.json"})").find("local reference"), std::string::npos);
  EXPECT_NE(msg(R"({"allOf": [{"type": "object"}, {"type": "object"}]})").find("allOf"), std::string::npos);
}

TEST(ToolCalls, SyntaxIsReadOffTheTemplate) {
  EXPECT_EQ(tool_syntax_of("<tool_call>{name}\n<arg_key>{key}</arg_key>"), ToolSyntax::Glm);
  EXPECT_EQ(tool_syntax_of("<tool_call>\n<function=name>"), ToolSyntax::QwenXml);
  EXPECT_EQ(tool_syntax_of("<tool_call>\n{\"name\": ...}"), ToolSyntax::QwenJson);
}

TEST(ToolCalls, QwenJsonCallsAreParsedAndStreamedPiecesReassemble) {
  std::string text =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": \"{\\\"tz\\\": \\\"CET\\\"}\"}\n</tool_call>";
  // Any split of the text into pieces gives the same content and calls.
  for (size_t step : {size_t{1}, size_t{3}, size_t{7}, text.size()}) {
    ToolCallParser p(ToolSyntax::QwenJson, json::array());
    std::string content;
    std::vector<ToolCall> calls;
    for (size_t i = 0; i < text.size(); i += step) {
      auto o = p.push(text.substr(i, step));
      content += o.content;
      calls.insert(calls.end(), o.calls.begin(), o.calls.end());
    }
    auto o = p.flush();
    content += o.content;
    EXPECT_EQ(content, "Let me check.\n") << step;
    ASSERT_EQ(calls.size(), 2u) << step;
    EXPECT_EQ(calls[0].name, "get_weather");
    EXPECT_EQ(json::parse(calls[0].arguments), json::parse(R"({"city": "Paris"})"));
    EXPECT_EQ(json::parse(calls[1].arguments), json::parse(R"({"tz": "CET"})"));
    EXPECT_EQ(calls[0].id.rfind("call_", 0), 0u);
    EXPECT_NE(calls[0].id, calls[1].id);
  }
}

TEST(ToolCalls, GlmAndXmlCallsUseTheParameterTypes) {
  json tools = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"code": {"type": "string"}, "n": {"type": "integer"}}}}}])");
  ToolCallParser glm(ToolSyntax::Glm, tools);
  auto o = glm.push(
      "<tool_call>f\n<arg_key>code</arg_key>\n<arg_value>12</arg_value>\n<arg_key>n</arg_key>\n"
      "<arg_value>12</arg_value>\n</tool_call>");
  ASSERT_EQ(o.calls.size(), 1u);
  EXPECT_EQ(json::parse(o.calls[0].arguments), json::parse(R"({"code": "12", "n": 12})"));
  ToolCallParser xml(ToolSyntax::QwenXml, tools);
  o = xml.push(
      "<tool_call>\n<function=f>\n<parameter=code>\nprint(1)\n</parameter>\n</function>\n</tool_call>");
  ASSERT_EQ(o.calls.size(), 1u);
  EXPECT_EQ(o.calls[0].name, "f");
  EXPECT_EQ(json::parse(o.calls[0].arguments), json::parse(R"j({"code": "print(1)"})j"));
}

TEST(ToolCalls, BrokenCallsStayContent) {
  ToolCallParser p(ToolSyntax::QwenJson, json::array());
  auto a = p.push("x <tool_call>{not json}</tool_call> y <tool_");
  auto b = p.flush();
  EXPECT_TRUE(a.calls.empty());
  EXPECT_EQ(a.content + b.content, "x <tool_call>{not json}</tool_call> y <tool_");
}

TEST(ToolCalls, ForcingGrammarsProduceCallsTheParserReads) {
  json tools = json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string", "maxLength": 6}, "days": {"type": "integer"}},
      "required": ["city"]}}},
    {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}])");
  for (ToolSyntax syn : {ToolSyntax::QwenJson, ToolSyntax::Glm, ToolSyntax::QwenXml}) {
    for (std::string only : {"", "get_weather"}) {
      auto g = Grammar::parse(tool_call_grammar(syn, tools, only));
      for (uint64_t seed = 0; seed < 40; ++seed) {
        std::mt19937_64 rng(seed);
        std::string text = random_sentence(*g, rng);
        if (text.empty()) continue;
        ToolCallParser p(syn, tools);
        auto o = p.push(text);
        auto f = p.flush();
        ASSERT_EQ(o.calls.size(), 1u) << tool_syntax_name(syn) << ": " << text;
        EXPECT_TRUE((o.content + f.content).empty()) << text;
        if (!only.empty()) EXPECT_EQ(o.calls[0].name, only);
        json args = json::parse(o.calls[0].arguments);
        if (o.calls[0].name == "get_weather") {
          ASSERT_TRUE(args.contains("city")) << text;
          EXPECT_TRUE(args["city"].is_string());
        }
      }
    }
  }
  EXPECT_THROW(tool_call_grammar(ToolSyntax::QwenJson, tools, "nope"), std::invalid_argument);
}
