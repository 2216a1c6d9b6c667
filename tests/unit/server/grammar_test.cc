// The grammar engine: GBNF parsing and errors, byte-level matching (tokens that end inside a UTF-8
// character or cross element boundaries), the vocabulary mask, JSON schema conversion (outputs of random
// walks validate), and the tool-call parser on scripted text.
#include "server/grammar.h"

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
    const auto& mask = m.mask(s);
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
