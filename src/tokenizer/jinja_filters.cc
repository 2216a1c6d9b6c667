// Jinja2 3.1 built-in filters (the subset chat templates use), plus HF's tojson override.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include <utf8proc.h>

#include "tokenizer/jinja_args.h"
#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_interp.h"
#include "tokenizer/jinja_ops.h"
#include "tokenizer/jinja_text.h"

namespace bloomery::jinja {

namespace {

const std::set<std::string> kFilters = {
    "abs",        "attr",    "capitalize", "center", "count",  "d",      "default",    "dictsort",
    "e",          "escape",  "first",      "float",  "indent", "int",    "items",      "join",
    "last",       "length",  "list",       "lower",  "map",    "max",    "min",        "reject",
    "rejectattr", "replace", "reverse",    "round",  "safe",   "select", "selectattr", "sort",
    "string",     "sum",     "title",      "tojson", "trim",   "unique", "upper",      "wordcount"};

Value generator(std::vector<Value> items) {
  return Value::make_list(std::move(items), ListKind::Generator);
}

bool is_iterable(const Value& v) {
  return v.kind == Kind::String || v.kind == Kind::List || v.kind == Kind::Dict || v.kind == Kind::Undefined;
}

// Jinja2's map/select/items/unique are Python generators: a non-iterable input fails only when consumed.
Value lazy_failure(const std::string& msg) {
  Value g = generator({});
  g.list->poison = msg;
  return g;
}
Value not_iterable(const Value& v) {
  return lazy_failure("'" + type_name(v) + "' object is not iterable");
}

// Jinja2's make_attrgetter: "a.b.0" walks items (getitem first) part by part.
Value attr_path(const Value& item, const Value& attribute, const std::optional<Value>& dflt) {
  std::vector<Value> parts;
  if (attribute.kind == Kind::String) {
    static const std::string dot = ".";
    for (const std::string& p : py_split(*attribute.s, &dot, -1)) {
      bool digits =
          !p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
      parts.push_back(digits ? Value::integer(std::stoll(p)) : Value::string(p));
    }
  } else if (!attribute.is_none()) {
    parts.push_back(attribute);
  }
  Value cur = item;
  for (const Value& p : parts) {
    cur = get_item(cur, p);
    if (dflt && !dflt->is_none() && cur.is_undefined()) cur = *dflt;
  }
  return cur;
}

// Key function of sort/dictsort/unique/min/max: optional attribute, then lowercase strings unless
// case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.kind == Kind::String) return Value::string(py_lower(*v.s));
  return v;
}

std::vector<Value> sorted(std::vector<Value> items, bool reverse, bool case_sensitive,
                          const std::optional<Value>& attribute) {
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& it : items) {
    Value k = attribute ? attr_path(it, *attribute, std::nullopt) : it;
    keyed.emplace_back(sort_key(k, case_sensitive), std::move(it));
  }
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& a, const auto& b) {
    return reverse ? py_cmp(b.first, a.first) < 0 : py_cmp(a.first, b.first) < 0;
  });
  std::vector<Value> out;
  for (auto& [k, v] : keyed) out.push_back(std::move(v));
  return out;
}

std::optional<int64_t> parse_py_int(std::string s) {
  s = py_strip(s, nullptr, true, true);
  size_t k = 0;
  bool neg = false;
  if (k < s.size() && (s[k] == '+' || s[k] == '-')) neg = s[k++] == '-';
  if (k >= s.size()) return std::nullopt;
  int64_t v = 0;
  bool prev_digit = false;
  for (; k < s.size(); ++k) {
    char c = s[k];
    if (c == '_' && prev_digit && k + 1 < s.size() && s[k + 1] >= '0' && s[k + 1] <= '9') {
      prev_digit = false;
      continue;
    }
    if (c < '0' || c > '9') return std::nullopt;
    if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, c - '0', &v))
      fail_unsupported("integer beyond 64 bits");
    prev_digit = true;
  }
  return neg ? -v : v;
}

std::optional<double> parse_py_float(std::string s) {
  s = py_strip(s, nullptr, true, true);
  std::string t;
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] == '_' && k > 0 && isdigit(static_cast<unsigned char>(s[k - 1])) && k + 1 < s.size() &&
        isdigit(static_cast<unsigned char>(s[k + 1])))
      continue;
    t.push_back(s[k]);
  }
  if (t.empty()) return std::nullopt;
  std::string low = py_lower(t);
  std::string body = (low[0] == '+' || low[0] == '-') ? low.substr(1) : low;
  double sign = low[0] == '-' ? -1.0 : 1.0;
  if (body == "inf" || body == "infinity") return sign * HUGE_VAL;
  if (body == "nan") return std::nan("");
  for (char c : body)
    if (!(isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == '+' || c == '-'))
      return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return v;
}

Value do_round(const Value& v, int64_t precision, const std::string& method) {
  if (method != "common" && method != "ceil" && method != "floor")
    fail("method must be common, ceil or floor");
  if (!v.is_number()) fail("type " + type_name(v) + " doesn't define __round__ method");
  if (precision < 0) fail_unsupported("round with a negative precision");
  if (method == "common") {
    if (v.kind != Kind::Float) return Value::integer(v.i);
    if (!std::isfinite(v.f)) return v;
    // glibc printf rounds the exact binary value half-to-even, as CPython's round() does.
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::min<int64_t>(precision, 300)), v.f);
    return Value::number(std::strtod(buf, nullptr));
  }
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = as_double(v) * scale;
  x = method == "ceil" ? std::ceil(x) : std::floor(x);
  return Value::number(x / scale);
}

std::string indent(const std::string& s, const std::string& ind, bool first, bool blank) {
  // Jinja2 appends "\n" and uses str.splitlines(); only \n-style breaks are kept as "\n".
  std::string text = s + "\n";
  std::vector<std::string> lines;
  {
    std::vector<char32_t> cps = decode_utf8(text);
    std::vector<char32_t> line;
    for (size_t k = 0; k < cps.size(); ++k) {
      char32_t c = cps[k];
      bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
                 c == 0x85 || c == 0x2028 || c == 0x2029;
      if (!brk) {
        line.push_back(c);
        continue;
      }
      if (c == '\r' && k + 1 < cps.size() && cps[k + 1] == '\n') ++k;
      lines.push_back(encode_utf8(line));
      line.clear();
    }
    if (!line.empty()) lines.push_back(encode_utf8(line));
  }
  std::string rv;
  if (blank) {
    for (size_t k = 0; k < lines.size(); ++k) rv += (k ? "\n" + ind : "") + lines[k];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t k = 1; k < lines.size(); ++k) rv += "\n" + (lines[k].empty() ? "" : ind + lines[k]);
  }
  if (first) rv = ind + rv;
  return rv;
}

bool is_word_char(char32_t c) {
  if (c == '_') return true;
  if (c < 0x80) return isalnum(static_cast<int>(c)) != 0;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

// Jinja2's title filter: upper-case the first character of each word split on [-\s({[<]+.
std::string jinja_title(const std::string& s) {
  std::vector<char32_t> cps = decode_utf8(s);
  std::string out;
  size_t k = 0;
  auto is_sep = [](char32_t c) {
    return py_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
  };
  while (k < cps.size()) {
    size_t j = k;
    bool sep = is_sep(cps[k]);
    while (j < cps.size() && is_sep(cps[j]) == sep) ++j;
    std::string piece = encode_utf8(std::vector<char32_t>(cps.begin() + k, cps.begin() + j));
    if (sep) {
      out += piece;
    } else {
      std::string first;
      append_utf8(first, cps[k]);
      out += py_upper(first) + py_lower(piece.substr(first.size()));
    }
    k = j;
  }
  return out;
}

Value select_or_reject(Interpreter& in, const Value& value, const CallArgs& a, bool select, bool by_attr) {
  std::vector<Value> out;
  if (!truthy(value)) return generator({});
  if (!is_iterable(value)) return not_iterable(value);
  size_t off = by_attr ? 1 : 0;
  if (by_attr && a.pos.empty()) fail("Missing parameter for attribute name");
  std::optional<std::string> test;
  if (a.pos.size() > off) {
    if (a.pos[off].kind != Kind::String) fail("test name must be a string");
    test = *a.pos[off].s;
    if (!is_known_test(*test)) fail_unsupported("test '" + *test + "'");
  }
  for (const Value& item : iterate(value)) {
    Value probe = by_attr ? attr_path(item, a.pos[0], std::nullopt) : item;
    bool ok;
    if (test) {
      CallArgs ta;
      ta.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(off + 1), a.pos.end());
      ta.kw = a.kw;
      ok = apply_test(in, *test, probe, ta);
    } else {
      ok = truthy(probe);
    }
    if (ok == select) out.push_back(item);
  }
  return generator(std::move(out));
}

Value json_filter(const Value& v, const CallArgs& a) {
  Args p(a, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions opt;
  opt.ensure_ascii = p.has(0) && truthy(p.get(0));
  if (p.has(1) && !p.get(1).is_none()) {
    const Value& ind = p.get(1);
    if (ind.kind == Kind::String)
      opt.indent = *ind.s;
    else if (ind.kind == Kind::Int || ind.kind == Kind::Bool)
      opt.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, ind.i)), ' ');
    else
      fail_unsupported("tojson indent of type " + type_name(ind));
    opt.item_sep = ",";
  }
  if (p.has(2) && !p.get(2).is_none()) {
    std::vector<Value> seps = iterate(p.get(2));
    if (seps.size() != 2 || !seps[0].is_string() || !seps[1].is_string())
      fail("tojson separators must be a pair of strings");
    opt.item_sep = *seps[0].s;
    opt.key_sep = *seps[1].s;
  }
  opt.sort_keys = p.has(3) && truthy(p.get(3));
  return Value::string(to_json(v, opt));
}

// str(value) keeping Markup-ness, like Jinja2's soft_str.
Value soft_str(const Value& v) {
  if (v.kind == Kind::String) return v;
  return Value::string(to_str(v));
}

}  // namespace

bool is_known_filter(const std::string& name) {
  return kFilters.count(name) > 0;
}

Value apply_filter(Interpreter& in, const std::string& name, const Value& v, CallArgs& a) {
  if (name == "tojson") return json_filter(v, a);
  if (name == "default" || name == "d") {
    Args p(a, name, {"default_value", "boolean"});
    bool boolean = p.has(1) && truthy(p.get(1));
    if (v.is_undefined() || (boolean && !truthy(v))) return p.has(0) ? p.get(0) : Value::string("");
    return v;
  }
  if (name == "length" || name == "count") {
    Args p(a, name, {});
    return Value::integer(py_len(v));
  }
  if (name == "string") {
    Args p(a, name, {});
    return soft_str(v);
  }
  if (name == "safe") {
    Args p(a, name, {});
    return Value::string(to_str(v), true);
  }
  if (name == "escape" || name == "e") {
    Args p(a, name, {});
    if (v.kind == Kind::String && v.markup) return v;
    return Value::string(html_escape(to_str(v)), true);
  }
  if (name == "trim") {
    Args p(a, name, {"chars"});
    Value s = soft_str(v);
    std::optional<std::string> chars;
    if (p.has(0) && !p.get(0).is_none()) chars = to_str(p.get(0));
    return Value::string(py_strip(*s.s, chars ? &*chars : nullptr, true, true), s.markup);
  }
  if (name == "lower" || name == "upper" || name == "capitalize" || name == "title") {
    Args p(a, name, {});
    Value s = soft_str(v);
    if (name == "lower") return Value::string(py_lower(*s.s), s.markup);
    if (name == "upper") return Value::string(py_upper(*s.s), s.markup);
    if (name == "capitalize") return Value::string(py_capitalize(*s.s), s.markup);
    return Value::string(jinja_title(*s.s), s.markup);
  }
  if (name == "replace") {
    Args p(a, name, {"old", "new", "count"});
    if (v.kind == Kind::String && v.markup) fail_unsupported("replace on a Markup string");
    int64_t count = p.has(2) && !p.get(2).is_none() ? p.integer(2) : -1;
    return Value::string(py_replace(to_str(v), to_str(p.req(0)), to_str(p.req(1)), count));
  }
  if (name == "center") {
    Args p(a, name, {"width"});
    std::string s = to_str(v);
    int64_t width = p.has(0) ? p.integer(0) : 80;
    int64_t n = static_cast<int64_t>(codepoint_count(s));
    if (width <= n) return Value::string(s);
    int64_t marg = width - n;
    int64_t left = marg / 2 + (marg & width & 1);
    return Value::string(std::string(static_cast<size_t>(left), ' ') + s +
                         std::string(static_cast<size_t>(marg - left), ' '));
  }
  if (name == "indent") {
    Args p(a, name, {"width", "first", "blank"});
    std::string ind = "    ";
    if (p.has(0))
      ind = p.get(0).is_string() ? *p.get(0).s
                                 : std::string(static_cast<size_t>(std::max<int64_t>(0, p.integer(0))), ' ');
    if (v.kind != Kind::String) fail("unsupported operand type(s) for +=: '" + type_name(v) + "' and 'str'");
    return Value::string(indent(to_str(v), ind, p.has(1) && truthy(p.get(1)), p.has(2) && truthy(p.get(2))),
                         v.markup);
  }
  if (name == "wordcount") {
    Args p(a, name, {});
    int64_t n = 0;
    bool in_word = false;
    for (char32_t c : decode_utf8(to_str(v))) {
      bool w = is_word_char(c);
      if (w && !in_word) ++n;
      in_word = w;
    }
    return Value::integer(n);
  }
  if (name == "items") {
    Args p(a, name, {});
    if (v.is_undefined()) return generator({});
    if (v.kind != Kind::Dict) return lazy_failure("Can only get item pairs from a mapping.");
    std::vector<Value> items;
    for (const auto& [k, val] : v.dict->entries) items.push_back(Value::make_list({k, val}, ListKind::Tuple));
    return generator(std::move(items));
  }
  if (name == "list") {
    Args p(a, name, {});
    return Value::make_list(iterate(v));
  }
  if (name == "first") {
    Args p(a, name, {});
    if (v.kind == Kind::List && v.list->kind == ListKind::Generator) {
      ListData& l = *v.list;
      if (!l.poison.empty()) fail(l.poison);
      if (l.pos < l.items.size()) return l.items[l.pos++];
      return Value::undefined("No first item, sequence was empty.");
    }
    std::vector<Value> items = iterate(v);
    if (items.empty()) return Value::undefined("No first item, sequence was empty.");
    return items.front();
  }
  if (name == "last") {
    Args p(a, name, {});
    if (v.kind == Kind::List && v.list->kind == ListKind::Generator)
      fail("'generator' object is not reversible");
    if (v.kind == Kind::List && v.list->kind == ListKind::View) fail_unsupported("last of a dict view");
    std::vector<Value> items = iterate(v);
    if (items.empty()) return Value::undefined("No last item, sequence was empty.");
    return items.back();
  }
  if (name == "reverse") {
    Args p(a, name, {});
    if (v.kind == Kind::String) {
      Value step = Value::integer(-1);
      return slice(v, nullptr, nullptr, &step);
    }
    if (v.kind == Kind::List && v.list->kind == ListKind::Generator) {
      std::vector<Value> items = iterate(v);
      std::reverse(items.begin(), items.end());
      return Value::make_list(std::move(items));
    }
    std::vector<Value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    return generator(std::move(items));  // Python's reversed() iterator
  }
  if (name == "join") {
    Args p(a, name, {"d", "attribute"});
    std::string sep = p.has(0) ? to_str(p.get(0)) : "";
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v)) {
      if (!first) out += sep;
      first = false;
      out += to_str(p.has(1) && !p.get(1).is_none() ? attr_path(item, p.get(1), std::nullopt) : item);
    }
    return Value::string(std::move(out));
  }
  if (name == "map") {
    if (!truthy(v)) return generator({});
    if (!is_iterable(v)) return not_iterable(v);
    std::vector<Value> out;
    if (a.pos.empty()) {
      std::optional<Value> attribute, dflt;
      for (const auto& [k, val] : a.kw) {
        if (k == "attribute")
          attribute = val;
        else if (k == "default")
          dflt = val;
        else
          fail("Unexpected keyword argument '" + k + "'");
      }
      if (!attribute) fail("map requires a filter argument");
      for (const Value& item : iterate(v)) out.push_back(attr_path(item, *attribute, dflt));
      return generator(std::move(out));
    }
    if (!a.pos[0].is_string()) fail("map filter name must be a string");
    std::string f = *a.pos[0].s;
    if (!is_known_filter(f)) fail_unsupported("filter '" + f + "'");
    CallArgs rest;
    rest.pos.assign(a.pos.begin() + 1, a.pos.end());
    rest.kw = a.kw;
    for (const Value& item : iterate(v)) {
      CallArgs copy = rest;
      out.push_back(apply_filter(in, f, item, copy));
    }
    return generator(std::move(out));
  }
  if (name == "select" || name == "reject") return select_or_reject(in, v, a, name == "select", false);
  if (name == "selectattr" || name == "rejectattr")
    return select_or_reject(in, v, a, name == "selectattr", true);
  if (name == "attr") {
    // Jinja2's attr filter reads Python attributes only, never items.
    Args p(a, name, {"name"});
    if (v.is_undefined()) fail("'" + *v.s + "' is undefined");
    std::string attr = to_str(p.req(0));
    if (auto r = builtin_attribute(v, attr)) return *r;
    if (v.kind == Kind::Namespace)
      if (const Value* r = v.dict->find(attr)) return *r;
    return Value::undefined(attr);
  }
  if (name == "abs") {
    Args p(a, name, {});
    if (v.kind == Kind::Float) return Value::number(std::fabs(v.f));
    if (v.kind == Kind::Int || v.kind == Kind::Bool) return v.i < 0 ? negate(v) : Value::integer(v.i);
    fail("bad operand type for abs(): '" + type_name(v) + "'");
  }
  if (name == "int") {
    Args p(a, name, {"default", "base"});
    Value dflt = p.has(0) ? p.get(0) : Value::integer(0);
    if (v.is_undefined()) fail("'" + *v.s + "' is undefined");
    if (p.has(1) && p.integer(1) != 10) fail_unsupported("int filter with a base other than 10");
    if (v.kind == Kind::Int) return v;
    if (v.kind == Kind::Bool) return Value::integer(v.i);
    if (v.kind == Kind::Float) {
      if (!std::isfinite(v.f)) return dflt;
      return Value::integer(static_cast<int64_t>(std::trunc(v.f)));
    }
    if (v.kind == Kind::String) {
      if (auto i = parse_py_int(*v.s)) return Value::integer(*i);
      if (auto f = parse_py_float(*v.s)) {
        if (!std::isfinite(*f)) return dflt;
        return Value::integer(static_cast<int64_t>(std::trunc(*f)));
      }
    }
    return dflt;
  }
  if (name == "float") {
    Args p(a, name, {"default"});
    Value dflt = p.has(0) ? p.get(0) : Value::number(0.0);
    if (v.is_undefined()) fail("'" + *v.s + "' is undefined");
    if (v.is_number()) return Value::number(as_double(v));
    if (v.kind == Kind::String) {
      if (auto f = parse_py_float(*v.s)) return Value::number(*f);
    }
    return dflt;
  }
  if (name == "round") {
    Args p(a, name, {"precision", "method"});
    return do_round(v, p.has(0) ? p.integer(0) : 0, p.has(1) ? to_str(p.get(1)) : "common");
  }
  if (name == "sum") {
    Args p(a, name, {"attribute", "start"});
    Value total = p.has(1) ? p.get(1) : Value::integer(0);
    for (const Value& item : iterate(v)) {
      Value x = p.has(0) && !p.get(0).is_none() ? attr_path(item, p.get(0), std::nullopt) : item;
      total = binary_op("+", total, x);
    }
    return total;
  }
  if (name == "sort") {
    Args p(a, name, {"reverse", "case_sensitive", "attribute"});
    std::optional<Value> attribute;
    if (p.has(2) && !p.get(2).is_none()) attribute = p.get(2);
    return Value::make_list(
        sorted(iterate(v), p.has(0) && truthy(p.get(0)), p.has(1) && truthy(p.get(1)), attribute));
  }
  if (name == "dictsort") {
    Args p(a, name, {"case_sensitive", "by", "reverse"});
    if (v.kind != Kind::Dict) fail("dictsort needs a mapping, not " + type_name(v));
    std::string by = p.has(1) ? to_str(p.get(1)) : "key";
    if (by != "key" && by != "value") fail("You can only sort by either \"key\" or \"value\"");
    bool cs = p.has(0) && truthy(p.get(0));
    bool rev = p.has(2) && truthy(p.get(2));
    std::vector<std::pair<Value, Value>> keyed;
    for (const auto& [k, val] : v.dict->entries)
      keyed.emplace_back(sort_key(by == "key" ? k : val, cs), Value::make_list({k, val}, ListKind::Tuple));
    std::stable_sort(keyed.begin(), keyed.end(), [rev](const auto& x, const auto& y) {
      return rev ? py_cmp(y.first, x.first) < 0 : py_cmp(x.first, y.first) < 0;
    });
    std::vector<Value> out;
    for (auto& kv : keyed) out.push_back(kv.second);
    return Value::make_list(std::move(out));
  }
  if (name == "unique") {
    Args p(a, name, {"case_sensitive", "attribute"});
    bool cs = p.has(0) && truthy(p.get(0));
    if (!is_iterable(v)) return not_iterable(v);
    std::vector<Value> seen, out;
    for (const Value& item : iterate(v)) {
      Value k =
          sort_key(p.has(1) && !p.get(1).is_none() ? attr_path(item, p.get(1), std::nullopt) : item, cs);
      bool dup = false;
      for (const Value& s : seen) dup = dup || py_eq(s, k);
      if (!dup) {
        seen.push_back(k);
        out.push_back(item);
      }
    }
    return generator(std::move(out));
  }
  if (name == "min" || name == "max") {
    Args p(a, name, {"case_sensitive", "attribute"});
    bool cs = p.has(0) && truthy(p.get(0));
    std::optional<Value> best, best_key;
    for (const Value& item : iterate(v)) {
      Value k =
          sort_key(p.has(1) && !p.get(1).is_none() ? attr_path(item, p.get(1), std::nullopt) : item, cs);
      int c = best_key ? py_cmp(k, *best_key) : 0;
      if (!best || (name == "min" ? c < 0 : c > 0)) {
        best = item;
        best_key = k;
      }
    }
    if (!best) return Value::undefined("No aggregated item, sequence was empty.");
    return *best;
  }
  fail_unsupported("filter '" + name + "'");
}

}  // namespace bloomery::jinja
