#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tokenizer/jinja_text.h"

namespace bloomery::jinja {

void fail(const std::string& msg) {
  throw EvalError("E_TPL_RENDER", msg);
}
void fail_unsupported(const std::string& msg) {
  throw EvalError("E_TPL_UNSUPPORTED", msg);
}

Value Value::undefined(std::string hint) {
  Value v;
  v.kind = Kind::Undefined;
  v.s = std::make_shared<const std::string>(std::move(hint));
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::None;
  return v;
}
Value Value::boolean(bool x) {
  Value v;
  v.kind = Kind::Bool;
  v.b = x;
  v.i = x ? 1 : 0;
  return v;
}
Value Value::integer(int64_t x) {
  Value v;
  v.kind = Kind::Int;
  v.i = x;
  return v;
}
Value Value::number(double x) {
  Value v;
  v.kind = Kind::Float;
  v.f = x;
  return v;
}
Value Value::string(std::string x, bool markup) {
  Value v;
  v.kind = Kind::String;
  v.markup = markup;
  v.s = std::make_shared<const std::string>(std::move(x));
  return v;
}
Value Value::make_list(std::vector<Value> items, ListKind kind) {
  Value v;
  v.kind = Kind::List;
  v.list = std::make_shared<ListData>();
  v.list->kind = kind;
  v.list->items = std::move(items);
  return v;
}
Value Value::make_dict() {
  Value v;
  v.kind = Kind::Dict;
  v.dict = std::make_shared<DictData>();
  return v;
}
Value Value::make_namespace() {
  Value v;
  v.kind = Kind::Namespace;
  v.dict = std::make_shared<DictData>();
  return v;
}

const Value* DictData::find(const Value& key) const {
  for (const auto& [k, v] : entries)
    if (py_eq(k, key)) return &v;
  return nullptr;
}
const Value* DictData::find(const std::string& key) const {
  for (const auto& [k, v] : entries)
    if (k.kind == Kind::String && *k.s == key) return &v;
  return nullptr;
}
void DictData::set(const Value& key, Value value) {
  for (auto& [k, v] : entries)
    if (py_eq(k, key)) {
      v = std::move(value);
      return;
    }
  entries.emplace_back(key, std::move(value));
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined:
    case Kind::None:
      return false;
    case Kind::Bool:
      return v.b;
    case Kind::Int:
      return v.i != 0;
    case Kind::Float:
      return v.f != 0.0;
    case Kind::String:
      return !v.s->empty();
    case Kind::List:
      // A generator object is always true in Python, even when it would yield nothing.
      if (v.list->kind == ListKind::Generator) return true;
      return !v.list->items.empty();
    case Kind::Dict:
      return !v.dict->entries.empty();
    default:
      return true;
  }
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined:
      return "Undefined";
    case Kind::None:
      return "NoneType";
    case Kind::Bool:
      return "bool";
    case Kind::Int:
      return "int";
    case Kind::Float:
      return "float";
    case Kind::String:
      return v.markup ? "Markup" : "str";
    case Kind::List:
      switch (v.list->kind) {
        case ListKind::Tuple:
          return "tuple";
        case ListKind::Generator:
          return "generator";
        case ListKind::View:
          return *v.s;
        case ListKind::Range:
          return "range";
        default:
          return "list";
      }
    case Kind::Dict:
      return "dict";
    case Kind::Namespace:
      return "Namespace";
    case Kind::Callable:
      return "function";
    case Kind::Loop:
      return "LoopContext";
  }
  return "object";
}

double as_double(const Value& v) {
  if (v.kind == Kind::Float) return v.f;
  return static_cast<double>(v.i);
}

namespace {
std::string repr_items(const std::vector<Value>& items) {
  std::string s;
  for (size_t k = 0; k < items.size(); ++k) {
    if (k) s += ", ";
    s += repr(items[k]);
  }
  return s;
}
std::string repr_dict(const DictData& d) {
  std::string s = "{";
  for (size_t k = 0; k < d.entries.size(); ++k) {
    if (k) s += ", ";
    s += repr(d.entries[k].first) + ": " + repr(d.entries[k].second);
  }
  return s + "}";
}
}  // namespace

std::string repr(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined:
      return "Undefined";
    case Kind::String:
      if (v.markup) return "Markup(" + py_str_repr(*v.s) + ")";
      return py_str_repr(*v.s);
    case Kind::List:
      if (v.list->kind == ListKind::List) return "[" + repr_items(v.list->items) + "]";
      if (v.list->kind == ListKind::Tuple) {
        if (v.list->items.size() == 1) return "(" + repr(v.list->items[0]) + ",)";
        return "(" + repr_items(v.list->items) + ")";
      }
      if (v.list->kind == ListKind::Range) return *v.s;
      if (v.list->kind == ListKind::View) return *v.s + "([" + repr_items(v.list->items) + "])";
      break;
    case Kind::Dict:
      return repr_dict(*v.dict);
    case Kind::Namespace:
      return "<Namespace " + repr_dict(*v.dict) + ">";
    default:
      return to_str(v);
  }
  fail_unsupported("printing a " + type_name(v) + " object (Python prints its memory address)");
}

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined:
      return "";
    case Kind::None:
      return "None";
    case Kind::Bool:
      return v.b ? "True" : "False";
    case Kind::Int:
      return std::to_string(v.i);
    case Kind::Float:
      return py_float_repr(v.f);
    case Kind::String:
      return *v.s;
    case Kind::List:
    case Kind::Dict:
    case Kind::Namespace:
      return repr(v);
    default:
      fail_unsupported("printing a " + type_name(v) + " object (Python prints its memory address)");
  }
}

bool py_eq(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Kind::Float || b.kind == Kind::Float) return as_double(a) == as_double(b);
    return a.i == b.i;
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::Undefined:
    case Kind::None:
      return true;
    case Kind::String:
      return *a.s == *b.s;
    case Kind::List: {
      if (a.list == b.list) return true;
      ListKind ka = a.list->kind, kb = b.list->kind;
      if (ka != kb || ka == ListKind::Generator) return false;
      const auto &x = a.list->items, &y = b.list->items;
      if (x.size() != y.size()) return false;
      for (size_t k = 0; k < x.size(); ++k)
        if (!py_eq(x[k], y[k])) return false;
      return true;
    }
    case Kind::Dict: {
      const auto &x = a.dict->entries, &y = b.dict->entries;
      if (x.size() != y.size()) return false;
      for (const auto& [k, val] : x) {
        const Value* o = b.dict->find(k);
        if (!o || !py_eq(val, *o)) return false;
      }
      return true;
    }
    case Kind::Namespace:
      return a.dict == b.dict;
    case Kind::Callable:
      return a.fn == b.fn;
    case Kind::Loop:
      return a.loop == b.loop;
    default:
      return false;
  }
}

int py_cmp(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind != Kind::Float && b.kind != Kind::Float) return a.i < b.i ? -1 : (a.i > b.i ? 1 : 0);
    double x = as_double(a), y = as_double(b);
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.kind == Kind::String && b.kind == Kind::String) {
    int c = a.s->compare(*b.s);  // UTF-8 byte order is code point order
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.kind == Kind::List && b.kind == Kind::List && a.list->kind == b.list->kind &&
      (a.list->kind == ListKind::List || a.list->kind == ListKind::Tuple)) {
    const auto &x = a.list->items, &y = b.list->items;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (py_eq(x[k], y[k])) continue;
      return py_cmp(x[k], y[k]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  fail("comparison not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined:
      return {};
    case Kind::List: {
      ListData& l = *v.list;
      if (l.kind == ListKind::Generator) {
        if (!l.poison.empty()) fail(l.poison);
        std::vector<Value> rest(l.items.begin() + static_cast<std::ptrdiff_t>(l.pos), l.items.end());
        l.pos = l.items.size();
        return rest;
      }
      return l.items;
    }
    case Kind::Dict: {
      std::vector<Value> keys;
      for (const auto& e : v.dict->entries) keys.push_back(e.first);
      return keys;
    }
    case Kind::String: {
      std::vector<Value> chars;
      for (char32_t c : decode_utf8(*v.s)) {
        std::string one;
        append_utf8(one, c);
        chars.push_back(Value::string(std::move(one)));  // iterating a Markup yields plain str
      }
      return chars;
    }
    default:
      fail("'" + type_name(v) + "' object is not iterable");
  }
}

int64_t py_len(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined:
      return 0;
    case Kind::String:
      return static_cast<int64_t>(codepoint_count(*v.s));
    case Kind::List:
      if (v.list->kind == ListKind::Generator) break;
      return static_cast<int64_t>(v.list->items.size());
    case Kind::Dict:
      return static_cast<int64_t>(v.dict->entries.size());
    default:
      break;
  }
  fail("object of type '" + type_name(v) + "' has no len()");
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX))
        fail_unsupported("integer " + std::to_string(u) + " above 2^63-1");
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::number(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return Value::make_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value d = Value::make_dict();
      for (const auto& [k, e] : j.items()) d.dict->set(Value::string(k), from_json(e));
      return d;
    }
    default:
      fail_unsupported("JSON value of type " + std::string(j.type_name()));
  }
}

namespace {

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out.push_back('"');
  auto esc = [&out](unsigned cp) {
    char b[16];
    std::snprintf(b, sizeof(b), "\\u%04x", cp);
    out += b;
  };
  if (!ensure_ascii) {
    for (char ch : s) {
      unsigned char c = static_cast<unsigned char>(ch);
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        default:
          if (c < 0x20)
            esc(c);
          else
            out.push_back(ch);
      }
    }
  } else {
    for (char32_t c : decode_utf8(s)) {
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        default:
          if (c >= 0x20 && c <= 0x7E) {
            out.push_back(static_cast<char>(c));
          } else if (c >= 0x10000) {
            unsigned v = static_cast<unsigned>(c) - 0x10000;
            esc(0xD800 + (v >> 10));
            esc(0xDC00 + (v & 0x3FF));
          } else {
            esc(static_cast<unsigned>(c));
          }
      }
    }
  }
  out.push_back('"');
}

std::string json_float(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
  return py_float_repr(f);
}

std::string json_key(const Value& k) {
  switch (k.kind) {
    case Kind::String:
      return *k.s;
    case Kind::Float:
      return json_float(k.f);
    case Kind::Bool:
      return k.b ? "true" : "false";
    case Kind::None:
      return "null";
    case Kind::Int:
      return std::to_string(k.i);
    default:
      fail("keys must be str, int, float, bool or None, not " + type_name(k));
  }
}

void dump(std::string& out, const Value& v, const JsonOptions& opt, int level) {
  auto newline = [&](int lvl) {
    out.push_back('\n');
    for (int k = 0; k < lvl; ++k) out += *opt.indent;
  };
  switch (v.kind) {
    case Kind::None:
      out += "null";
      return;
    case Kind::Bool:
      out += v.b ? "true" : "false";
      return;
    case Kind::Int:
      out += std::to_string(v.i);
      return;
    case Kind::Float:
      out += json_float(v.f);
      return;
    case Kind::String:
      json_string(out, *v.s, opt.ensure_ascii);
      return;
    case Kind::List: {
      if (v.list->kind != ListKind::List && v.list->kind != ListKind::Tuple) break;
      const auto& items = v.list->items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      if (opt.indent) newline(level + 1);
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) {
          out += opt.item_sep;
          if (opt.indent) newline(level + 1);
        }
        dump(out, items[k], opt, level + 1);
      }
      if (opt.indent) newline(level);
      out.push_back(']');
      return;
    }
    case Kind::Dict: {
      std::vector<std::pair<Value, Value>> entries = v.dict->entries;
      if (entries.empty()) {
        out += "{}";
        return;
      }
      if (opt.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& a, const auto& b) { return py_cmp(a.first, b.first) < 0; });
      }
      out.push_back('{');
      if (opt.indent) newline(level + 1);
      for (size_t k = 0; k < entries.size(); ++k) {
        if (k) {
          out += opt.item_sep;
          if (opt.indent) newline(level + 1);
        }
        json_string(out, json_key(entries[k].first), opt.ensure_ascii);
        out += opt.key_sep;
        dump(out, entries[k].second, opt, level + 1);
      }
      if (opt.indent) newline(level);
      out.push_back('}');
      return;
    }
    default:
      break;
  }
  fail("Object of type " + type_name(v) + " is not JSON serializable");
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& opt) {
  std::string out;
  dump(out, v, opt, 0);
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '\'':
        out += "&#39;";
        break;
      case '"':
        out += "&#34;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

}  // namespace bloomery::jinja
