#include "server/json_schema.h"

#include <map>
#include <set>

#include <fmt/format.h>

#include "server/grammar.h"

namespace bloomery::server {

using json = nlohmann::ordered_json;

std::string gbnf_literal(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string json_base_rules() {
  // Numbers are bounded (16 digits, 3 exponent digits) and whitespace is at most one space, so that a
  // constrained generation cannot run on in one number or in blanks.
  return R"(jvalue ::= jobject | jarray | jstring | jnumber | jbool | jnull
jobject ::= "{" ws ( jstring ws ":" ws jvalue ( ws "," ws jstring ws ":" ws jvalue )* )? ws "}"
jarray ::= "[" ws ( jvalue ( ws "," ws jvalue )* )? ws "]"
jstring ::= "\"" jchar* "\""
jchar ::= [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
jinteger ::= "-"? ( "0" | [1-9] [0-9]{0,15} )
jnumber ::= jinteger ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?
jbool ::= "true" | "false"
jnull ::= "null"
ws ::= " "?
)";
}

std::string json_object_gbnf() {
  return "root ::= jobject\n" + json_base_rules();
}

namespace {

// Keywords that only describe (never constrain) a value.
const std::set<std::string>& annotations() {
  static const std::set<std::string> a = {"title", "description", "default",    "examples", "$schema",
                                          "$id",   "$comment",    "deprecated", "readOnly", "writeOnly",
                                          "$defs", "definitions", "strict",     "name"};
  return a;
}

class Converter {
 public:
  Converter(const json& root_schema, std::string prefix) : doc_(root_schema), prefix_(std::move(prefix)) {}

  // Returns a GBNF expression for `s`; `where` is its JSON pointer for error messages.
  std::string visit(const json& s, const std::string& where) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) refuse(where, "false", "a schema that matches nothing");
      return "jvalue";
    }
    if (!s.is_object()) refuse(where, s.dump(), "a schema object");
    if (s.contains("$ref")) return ref(s, where);
    for (auto it = s.begin(); it != s.end(); ++it) check_known(it.key(), where, s);
    if (s.contains("const")) return gbnf_literal(s["const"].dump());
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) refuse(where + "/enum", "enum", "a non-empty array");
      std::string alts;
      for (const auto& v : s["enum"]) alts += (alts.empty() ? "" : " | ") + gbnf_literal(v.dump());
      return "(" + alts + ")";
    }
    for (const char* k : {"anyOf", "oneOf"}) {
      if (!s.contains(k)) continue;
      if (!s[k].is_array() || s[k].empty()) refuse(where + "/" + k, k, "a non-empty array");
      std::string alts;
      for (size_t i = 0; i < s[k].size(); ++i)
        alts += (alts.empty() ? "" : " | ") + visit(s[k][i], fmt::format("{}/{}/{}", where, k, i));
      return "(" + alts + ")";
    }
    if (s.contains("allOf")) {
      if (!s["allOf"].is_array() || s["allOf"].size() != 1)
        refuse(where + "/allOf", "allOf", "allOf with one schema (intersections are not compiled)");
      return visit(s["allOf"][0], where + "/allOf/0");
    }
    if (!s.contains("type")) {
      if (s.contains("properties")) return object(s, where);
      if (s.contains("items") || s.contains("prefixItems")) return array(s, where);
      return "jvalue";
    }
    const json& t = s["type"];
    if (t.is_array()) {
      std::string alts;
      for (const auto& one : t) {
        json copy = s;
        copy["type"] = one;
        alts += (alts.empty() ? "" : " | ") + visit(copy, where);
      }
      return "(" + alts + ")";
    }
    if (!t.is_string()) refuse(where + "/type", t.dump(), "a type name or an array of them");
    std::string type = t;
    if (type == "object") return object(s, where);
    if (type == "array") return array(s, where);
    if (type == "string") return string(s, where);
    if (type == "integer") return "jinteger";
    if (type == "number") return "jnumber";
    if (type == "boolean") return "jbool";
    if (type == "null") return "jnull";
    refuse(where + "/type", type, "object, array, string, integer, number, boolean or null");
  }

  std::string rules() const { return rules_; }

 private:
  [[noreturn]] static void refuse(const std::string& where, const std::string& construct,
                                  const std::string& expected) {
    throw GrammarError(fmt::format("json_schema: '{}' at '{}' cannot be compiled (expected {})", construct,
                                   where.empty() ? "#" : where, expected));
  }

  void check_known(const std::string& k, const std::string& where, const json& s) {
    static const std::set<std::string> known = {"type",  "properties",  "required",  "additionalProperties",
                                                "items", "prefixItems", "minItems",  "maxItems",
                                                "enum",  "const",       "anyOf",     "oneOf",
                                                "allOf", "minLength",   "maxLength", "$ref"};
    if (known.count(k) || annotations().count(k)) return;
    // A keyword that would constrain the value but is not compiled: refuse rather than produce output the
    // schema rejects.
    refuse(where + "/" + k, k,
           "a supported keyword (type, properties, required, items, enum, const, anyOf, "
           "oneOf, minLength, maxLength, minItems, maxItems, $ref)");
    (void)s;
  }

  std::string new_rule(const std::string& base, const std::string& body) {
    std::string name = fmt::format("{}{}-{}", prefix_, base, counter_++);
    rules_ += name + " ::= " + body + "\n";
    return name;
  }

  std::string ref(const json& s, const std::string& where) {
    if (!s["$ref"].is_string()) refuse(where + "/$ref", s["$ref"].dump(), "a string");
    std::string r = s["$ref"];
    auto it = refs_.find(r);
    if (it != refs_.end()) return it->second;
    std::string path;
    if (r.rfind("#/$defs/", 0) == 0 || r.rfind("#/definitions/", 0) == 0)
      path = r.substr(1);
    else
      refuse(where + "/$ref", r, "a local reference #/$defs/NAME or #/definitions/NAME");
    json::json_pointer ptr(path);
    if (!doc_.contains(ptr)) refuse(where + "/$ref", r, "a definition that exists");
    // Named before visiting so that recursive schemas refer to themselves.
    std::string name = fmt::format("{}ref-{}", prefix_, counter_++);
    refs_[r] = name;
    std::string body = visit(doc_.at(ptr), r);
    rules_ += name + " ::= " + body + "\n";
    return name;
  }

  std::string object(const json& s, const std::string& where) {
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) refuse(where + "/required", "required", "an array of names");
      for (const auto& r : s["required"]) required.insert(r.get<std::string>());
    }
    struct Prop {
      std::string kv;
      bool required;
    };
    std::vector<Prop> props;
    std::set<std::string> listed;
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) refuse(where + "/properties", "properties", "an object");
      for (auto it = s["properties"].begin(); it != s["properties"].end(); ++it) {
        std::string value = visit(it.value(), where + "/properties/" + it.key());
        std::string kv = gbnf_literal(json(it.key()).dump()) + " ws \":\" ws " + value;
        props.push_back({new_rule("kv", kv), required.count(it.key()) > 0});
        listed.insert(it.key());
      }
    }
    // Required names without a property schema take any value.
    for (const auto& r : required)
      if (!listed.count(r))
        props.push_back({new_rule("kv", gbnf_literal(json(r).dump()) + " ws \":\" ws jvalue"), true});
    if (props.empty()) {
      bool closed = s.contains("additionalProperties") && s["additionalProperties"] == false;
      return closed ? "\"{\" ws \"}\"" : "jobject";
    }
    // after[i]: properties i.. once one was written (each with its comma); first[i]: none written yet.
    size_t n = props.size();
    std::vector<std::string> after(n + 1);
    after[n] = "";
    for (size_t i = n; i-- > 0;) {
      std::string item = "ws \",\" ws " + props[i].kv;
      std::string mine = props[i].required ? item : "( " + item + " )?";
      after[i] = mine + (after[i + 1].empty() ? "" : " " + after[i + 1]);
    }
    std::string first;
    bool saw_required = false;
    for (size_t j = 0; j < n; ++j) {
      std::string alt = props[j].kv + (after[j + 1].empty() ? "" : " " + after[j + 1]);
      first += (first.empty() ? "" : " | ") + alt;
      if (props[j].required) {
        saw_required = true;
        break;
      }
    }
    std::string body = "\"{\" ws ( " + first + " )" + (saw_required ? "" : "?") + " ws \"}\"";
    return new_rule("object", body);
  }

  std::string array(const json& s, const std::string& where) {
    uint64_t lo = 0, hi = 0;
    bool bounded = false;
    if (s.contains("minItems")) lo = s["minItems"].get<uint64_t>();
    if (s.contains("maxItems")) {
      hi = s["maxItems"].get<uint64_t>();
      bounded = true;
      if (hi < lo) refuse(where + "/maxItems", "maxItems", "maxItems >= minItems");
    }
    if (s.contains("prefixItems")) {
      if (!s["prefixItems"].is_array()) refuse(where + "/prefixItems", "prefixItems", "an array");
      std::string body = "\"[\" ws";
      for (size_t i = 0; i < s["prefixItems"].size(); ++i)
        body += (i ? " ws \",\" ws " : " ") +
                visit(s["prefixItems"][i], fmt::format("{}/prefixItems/{}", where, i));
      return new_rule("tuple", body + " ws \"]\"");
    }
    std::string item = s.contains("items") ? visit(s["items"], where + "/items") : "jvalue";
    item = new_rule("item", item);
    std::string more = "( ws \",\" ws " + item + " )";
    std::string list;
    if (lo == 0) {
      std::string tail = bounded ? (hi == 0 ? "" : more + fmt::format("{{0,{}}}", hi - 1)) : more + "*";
      list = bounded && hi == 0 ? "" : "( " + item + (tail.empty() ? "" : " " + tail) + " )?";
    } else {
      std::string tail =
          bounded ? more + fmt::format("{{{},{}}}", lo - 1, hi - 1) : more + fmt::format("{{{},}}", lo - 1);
      list = item + " " + tail;
    }
    return new_rule("array", "\"[\" ws " + list + " ws \"]\"");
  }

  std::string string(const json& s, const std::string& where) {
    (void)where;
    uint64_t lo = s.contains("minLength") ? s["minLength"].get<uint64_t>() : 0;
    if (!s.contains("maxLength"))
      return lo == 0 ? "jstring" : fmt::format("\"\\\"\" jchar{{{},}} \"\\\"\"", lo);
    uint64_t hi = s["maxLength"].get<uint64_t>();
    if (hi < lo) refuse(where + "/maxLength", "maxLength", "maxLength >= minLength");
    return fmt::format("\"\\\"\" jchar{{{},{}}} \"\\\"\"", lo, hi);
  }

  const json& doc_;
  std::string prefix_;
  std::string rules_;
  std::map<std::string, std::string> refs_;
  int counter_ = 0;
};

}  // namespace

std::string schema_to_gbnf(const json& schema, const std::string& root_name, const std::string& prefix) {
  Converter c(schema, prefix);
  std::string expr = c.visit(schema, "");
  std::string out = root_name + " ::= " + expr + "\n" + c.rules();
  if (prefix.empty()) out += json_base_rules();
  return out;
}

}  // namespace bloomery::server
