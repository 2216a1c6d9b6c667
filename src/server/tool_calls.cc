#include "server/tool_calls.h"

#include <random>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "server/grammar.h"
#include "server/json_schema.h"

namespace bloomery::server {

using ojson = nlohmann::ordered_json;

namespace {

const std::string kOpen = "<tool_call>";
const std::string kClose = "</tool_call>";

std::string call_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* abc = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string s = "call_";
  for (int i = 0; i < 24; ++i) s += abc[rng() % 62];
  return s;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// The function object of a tool ({"type": "function", "function": {...}} or the bare function).
const ojson& function_of(const ojson& tool) {
  if (tool.contains("function") && tool["function"].is_object()) return tool["function"];
  return tool;
}

// Between `open` and `close` starting at `from`; npos when absent.
bool between(const std::string& s, const std::string& open, const std::string& close, size_t& from,
             std::string& out) {
  size_t a = s.find(open, from);
  if (a == std::string::npos) return false;
  a += open.size();
  size_t b = s.find(close, a);
  if (b == std::string::npos) return false;
  out = s.substr(a, b - a);
  from = b + close.size();
  return true;
}

}  // namespace

ToolSyntax tool_syntax_of(const std::string& src) {
  if (src.find("<arg_key>") != std::string::npos) return ToolSyntax::Glm;
  if (src.find("<function=") != std::string::npos) return ToolSyntax::QwenXml;
  return ToolSyntax::QwenJson;
}

const char* tool_syntax_name(ToolSyntax s) {
  switch (s) {
    case ToolSyntax::QwenJson:
      return "qwen-json";
    case ToolSyntax::Glm:
      return "glm";
    case ToolSyntax::QwenXml:
      return "qwen-xml";
  }
  return "?";
}

ToolCallParser::ToolCallParser(ToolSyntax syntax, const ojson& tools) : syntax_(syntax), tools_(tools) {}

ojson ToolCallParser::value_for(const std::string& fn, const std::string& key, const std::string& raw) const {
  // The parameter's schema decides: a string parameter keeps the text as written; anything else is JSON
  // when it parses (the templates write non-strings with tojson).
  std::string type;
  if (tools_.is_array())
    for (const auto& t : tools_) {
      const ojson& f = function_of(t);
      if (f.value("name", "") != fn) continue;
      if (f.contains("parameters") && f["parameters"].contains("properties") &&
          f["parameters"]["properties"].contains(key) &&
          f["parameters"]["properties"][key].contains("type") &&
          f["parameters"]["properties"][key]["type"].is_string())
        type = f["parameters"]["properties"][key]["type"];
    }
  if (type == "string") return raw;
  ojson v = ojson::parse(raw, nullptr, false);
  if (v.is_discarded()) return raw;
  return v;
}

bool ToolCallParser::parse_call(const std::string& body, ToolCall& call) const {
  if (syntax_ == ToolSyntax::QwenJson) {
    ojson j = ojson::parse(trim(body), nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
    call.name = j["name"];
    const ojson args = j.contains("arguments") ? j["arguments"] : ojson::object();
    if (args.is_string()) {
      ojson parsed = ojson::parse(args.get<std::string>(), nullptr, false);
      if (parsed.is_discarded()) return false;
      call.arguments = parsed.dump();
    } else if (args.is_object()) {
      call.arguments = args.dump();
    } else {
      return false;
    }
    return true;
  }
  ojson args = ojson::object();
  if (syntax_ == ToolSyntax::Glm) {
    size_t k = body.find("<arg_key>");
    call.name = trim(body.substr(0, k));
    if (call.name.empty()) return false;
    size_t pos = k == std::string::npos ? body.size() : k;
    std::string key, value;
    while (between(body, "<arg_key>", "</arg_key>", pos, key)) {
      if (!between(body, "<arg_value>", "</arg_value>", pos, value)) return false;
      args[trim(key)] = value_for(call.name, trim(key), value);
    }
  } else {
    size_t pos = 0;
    std::string fn;
    if (!between(body, "<function=", "</function>", pos, fn)) return false;
    size_t gt = fn.find('>');
    if (gt == std::string::npos) return false;
    call.name = trim(fn.substr(0, gt));
    std::string rest = fn.substr(gt + 1), p;
    size_t q = 0;
    while (between(rest, "<parameter=", "</parameter>", q, p)) {
      size_t e = p.find('>');
      if (e == std::string::npos) return false;
      std::string v = p.substr(e + 1);
      // The template writes "\nvalue\n": one newline each side is syntax.
      if (!v.empty() && v.front() == '\n') v.erase(0, 1);
      if (!v.empty() && v.back() == '\n') v.pop_back();
      args[trim(p.substr(0, e))] = value_for(call.name, trim(p.substr(0, e)), v);
    }
    if (call.name.empty()) return false;
  }
  call.arguments = args.dump();
  return true;
}

// Content after a call that is only whitespace is held: it is the calls' separator unless text follows.
void ToolCallParser::emit(Out& out, const std::string& text) {
  if (n_calls_ > 0 && trim(held_ + text).empty()) {
    held_ += text;
    return;
  }
  out.content += held_ + text;
  held_.clear();
}

ToolCallParser::Out ToolCallParser::push(const std::string& text) {
  Out out;
  buf_ += text;
  while (true) {
    if (!in_call_) {
      size_t a = buf_.find(kOpen);
      if (a == std::string::npos) {
        // Hold back a tail that could still become "<tool_call>".
        size_t keep = 0;
        for (size_t n = std::min(buf_.size(), kOpen.size() - 1); n > 0; --n)
          if (buf_.compare(buf_.size() - n, n, kOpen, 0, n) == 0) {
            keep = n;
            break;
          }
        emit(out, buf_.substr(0, buf_.size() - keep));
        buf_.erase(0, buf_.size() - keep);
        return out;
      }
      emit(out, buf_.substr(0, a));
      if (n_calls_ > 0) held_.clear();  // whitespace between two calls
      buf_.erase(0, a + kOpen.size());
      in_call_ = true;
    }
    size_t b = buf_.find(kClose);
    if (b == std::string::npos) return out;
    ToolCall call;
    std::string body = buf_.substr(0, b);
    if (parse_call(body, call)) {
      call.id = call_id();
      out.calls.push_back(std::move(call));
      n_calls_++;
    } else {
      emit(out, kOpen + body + kClose);
    }
    buf_.erase(0, b + kClose.size());
    in_call_ = false;
  }
}

ToolCallParser::Out ToolCallParser::flush() {
  Out out;
  // An unfinished call is shown as written.
  std::string rest = (in_call_ ? kOpen : std::string()) + buf_;
  emit(out, rest);
  buf_.clear();
  held_.clear();
  in_call_ = false;
  return out;
}

std::string tool_call_grammar(ToolSyntax syntax, const ojson& tools, const std::string& only_name) {
  if (!tools.is_array() || tools.empty()) throw std::invalid_argument("'tool_choice' needs 'tools'");
  std::string rules, alts;
  int k = 0;
  for (const auto& t : tools) {
    const ojson& f = function_of(t);
    if (!f.contains("name") || !f["name"].is_string())
      throw std::invalid_argument("every tool needs a function name");
    std::string name = f["name"];
    if (!only_name.empty() && name != only_name) continue;
    ojson params = f.contains("parameters") ? f["parameters"] : ojson{{"type", "object"}};
    std::string p = fmt::format("t{}-", k++);
    std::string call;
    if (syntax == ToolSyntax::QwenJson) {
      rules += schema_to_gbnf(params, p + "args", p);
      call = gbnf_literal(kOpen + "\n{\"name\": " + ojson(name).dump() + ", \"arguments\": ") + " " + p +
             "args " + gbnf_literal("}\n" + kClose);
    } else {
      // One key/value element per parameter, in the schema's order; required ones always present.
      std::set<std::string> required;
      if (params.contains("required"))
        for (const auto& r : params["required"]) required.insert(r.get<std::string>());
      std::string seq;
      int j = 0;
      if (params.contains("properties"))
        for (auto it = params["properties"].begin(); it != params["properties"].end(); ++it, ++j) {
          const ojson& ps = it.value();
          std::string vrule = fmt::format("{}v{}", p, j);
          bool is_string = ps.contains("type") && ps["type"] == "string";
          if (is_string) {
            // Strings are written raw: no '<' (it would start a tag), the schema's length bounds.
            std::string body;
            if (ps.contains("enum")) {
              for (const auto& v : ps["enum"])
                body += (body.empty() ? "" : " | ") + gbnf_literal(v.get<std::string>());
            } else {
              uint64_t lo = ps.value("minLength", uint64_t{0});
              body = ps.contains("maxLength")
                         ? fmt::format("[^<]{{{},{}}}", lo, ps["maxLength"].get<uint64_t>())
                         : fmt::format("[^<]{{{},}}", lo);
            }
            rules += vrule + " ::= " + body + "\n";
          } else {
            rules += schema_to_gbnf(ps, vrule, vrule + "-");
          }
          std::string kv = syntax == ToolSyntax::Glm
                               ? gbnf_literal("\n<arg_key>" + it.key() + "</arg_key>\n<arg_value>") + " " +
                                     vrule + " " + gbnf_literal("</arg_value>")
                               : gbnf_literal("\n<parameter=" + it.key() + ">\n") + " " + vrule + " " +
                                     gbnf_literal("\n</parameter>");
          seq += required.count(it.key()) ? " " + kv : " ( " + kv + " )?";
        }
      call = syntax == ToolSyntax::Glm ? gbnf_literal(kOpen + name) + seq + " " + gbnf_literal("\n" + kClose)
                                       : gbnf_literal(kOpen + "\n<function=" + name + ">") + seq + " " +
                                             gbnf_literal("\n</function>\n" + kClose);
    }
    alts += (alts.empty() ? "" : " | ") + call;
  }
  if (alts.empty())
    throw std::invalid_argument("'tool_choice' names function '" + only_name +
                                "', which is not among 'tools'");
  return "root ::= " + alts + "\n" + rules + json_base_rules();
}

}  // namespace bloomery::server
