// Tests, global functions, attribute/item access and str/dict methods (filters live in jinja_filters.cc).
#include "tokenizer/jinja_builtins.h"

#include <cmath>
#include <ctime>
#include <set>

#include "tokenizer/jinja_args.h"
#include "tokenizer/jinja_interp.h"
#include "tokenizer/jinja_ops.h"
#include "tokenizer/jinja_text.h"

namespace bloomery::jinja {

namespace {

const std::set<std::string> kTests = {
    "boolean",  "callable", "defined", "divisibleby", "eq",   "equalto",   "==",     "escaped",
    "even",     "false",    "filter",  "float",       "ge",   ">=",        "gt",     "greaterthan",
    ">",        "in",       "integer", "iterable",    "le",   "<=",        "lower",  "lt",
    "lessthan", "<",        "mapping", "ne",          "!=",   "none",      "number", "odd",
    "sameas",   "sequence", "string",  "test",        "true", "undefined", "upper"};
const std::set<std::string> kGlobals = {"range", "namespace", "dict", "raise_exception", "strftime_now"};
// Methods this interpreter implements, by receiver type.
const std::set<std::string> kStrMethods = {
    "startswith", "endswith", "split",        "rsplit",      "strip",      "lstrip",  "rstrip",
    "replace",    "upper",    "lower",        "title",       "capitalize", "find",    "rfind",
    "count",      "join",     "splitlines",   "isdigit",     "isalpha",    "isalnum", "isspace",
    "islower",    "isupper",  "removeprefix", "removesuffix"};
const std::set<std::string> kDictMethods = {"items", "keys", "values", "get"};
// Every other attribute Python has on these types: touching one is refused rather than mis-rendered.
const std::set<std::string> kStrAttrs = {"casefold",   "center",      "encode",  "expandtabs", "format",
                                         "format_map", "index",       "isascii", "isdecimal",  "isidentifier",
                                         "isnumeric",  "isprintable", "istitle", "ljust",      "maketrans",
                                         "partition",  "rindex",      "rjust",   "rpartition", "swapcase",
                                         "translate",  "zfill"};
const std::set<std::string> kDictAttrs = {"clear",   "copy",       "fromkeys", "pop",
                                          "popitem", "setdefault", "update"};
const std::set<std::string> kListAttrs = {"append", "clear", "copy",   "count",   "extend", "index",
                                          "insert", "pop",   "remove", "reverse", "sort"};

Value bound(std::string name, std::function<Value(CallArgs&)> f) {
  Value v;
  v.kind = Kind::Callable;
  v.fn = std::make_shared<Callable>();
  v.fn->name = std::move(name);
  v.fn->fn = [f = std::move(f)](Interpreter&, CallArgs& a) { return f(a); };
  return v;
}

const std::string& need_str(const Value& v, const std::string& what) {
  if (v.kind != Kind::String) fail(what + " must be str, not " + type_name(v));
  return *v.s;
}

int64_t cp_index(const std::string& s, size_t byte_off) {
  return static_cast<int64_t>(codepoint_count(std::string_view(s).substr(0, byte_off)));
}

bool prefix_test(const std::string& s, const Value& arg, bool ends) {
  auto one = [&](const std::string& p) {
    if (p.size() > s.size()) return false;
    return ends ? s.compare(s.size() - p.size(), p.size(), p) == 0 : s.compare(0, p.size(), p) == 0;
  };
  if (arg.kind == Kind::List && arg.list->kind == ListKind::Tuple) {
    for (const Value& p : arg.list->items)
      if (one(need_str(p, "tuple for startswith/endswith"))) return true;
    return false;
  }
  return one(need_str(arg, ends ? "endswith first arg" : "startswith first arg"));
}

std::vector<std::string> splitlines(const std::string& s, bool keepends) {
  std::vector<std::string> out;
  std::vector<char32_t> cps = decode_utf8(s);
  std::vector<char32_t> line;
  for (size_t k = 0; k < cps.size(); ++k) {
    char32_t c = cps[k];
    bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
               c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) {
      line.push_back(c);
      continue;
    }
    std::vector<char32_t> end{c};
    if (c == '\r' && k + 1 < cps.size() && cps[k + 1] == '\n') end.push_back(cps[++k]);
    if (keepends) line.insert(line.end(), end.begin(), end.end());
    out.push_back(encode_utf8(line));
    line.clear();
  }
  if (!line.empty()) out.push_back(encode_utf8(line));
  return out;
}

template <typename Pred>
bool all_cps(const std::string& s, Pred p) {
  std::vector<char32_t> cps = decode_utf8(s);
  if (cps.empty()) return false;
  for (char32_t c : cps)
    if (!p(c)) return false;
  return true;
}

Value str_list(const std::vector<std::string>& parts) {
  std::vector<Value> items;
  for (const auto& p : parts) items.push_back(Value::string(p));
  return Value::make_list(std::move(items));
}

std::optional<Value> plain_str_method(const Value& obj, const std::string& name);

// markupsafe's Markup methods: most return Markup, and those that take text escape their arguments.
std::optional<Value> str_method(const Value& obj, const std::string& name) {
  if (!obj.markup) return plain_str_method(obj, name);
  Value plain = Value::string(*obj.s);
  std::optional<Value> m = plain_str_method(plain, name);
  if (!m) return m;
  static const std::set<std::string> wraps = {"strip", "lstrip", "rstrip",     "lower",
                                              "upper", "title",  "capitalize", "replace"};
  static const std::set<std::string> lists = {"split", "rsplit", "splitlines"};
  if (!wraps.count(name) && !lists.count(name) && name != "join") return m;
  Value inner = *m;
  Value wrapped = inner;
  wrapped.fn = std::make_shared<Callable>();
  wrapped.fn->name = name;
  wrapped.fn->fn = [inner, name](Interpreter& in, CallArgs& a) {
    CallArgs esc = a;
    auto escape_arg = [](Value& v) {
      if (v.kind == Kind::String && !v.markup) v = Value::string(html_escape(*v.s), true);
    };
    if (wraps.count(name))
      for (Value& v : esc.pos) escape_arg(v);
    if (name == "join" && !esc.pos.empty()) {
      std::vector<Value> items = iterate(esc.pos[0]);
      for (Value& v : items) {
        if (v.kind != Kind::String) fail("sequence item: expected str instance, " + type_name(v) + " found");
        escape_arg(v);
      }
      esc.pos[0] = Value::make_list(std::move(items));
    }
    Value r = inner.fn->fn(in, esc);
    if (r.kind == Kind::String) r.markup = true;
    if (r.kind == Kind::List)
      for (Value& v : r.list->items) v.markup = true;
    return r;
  };
  return wrapped;
}

std::optional<Value> plain_str_method(const Value& obj, const std::string& name) {
  if (!kStrMethods.count(name)) return std::nullopt;
  std::string s = *obj.s;
  auto m = [&](std::function<Value(CallArgs&)> f) { return bound(name, std::move(f)); };
  if (name == "startswith" || name == "endswith") {
    bool ends = name == "endswith";
    return m([s, ends, name](CallArgs& a) {
      Args p(a, name, {"prefix"});
      return Value::boolean(prefix_test(s, p.req(0), ends));
    });
  }
  if (name == "split" || name == "rsplit") {
    bool r = name == "rsplit";
    return m([s, r, name](CallArgs& a) {
      Args p(a, name, {"sep", "maxsplit"});
      std::optional<std::string> sep;
      if (p.has(0) && !p.get(0).is_none()) sep = need_str(p.get(0), "sep");
      if (sep && sep->empty()) fail("empty separator");
      int64_t maxsplit = p.has(1) ? p.integer(1) : -1;
      const std::string* sp = sep ? &*sep : nullptr;
      return str_list(r ? py_rsplit(s, sp, maxsplit) : py_split(s, sp, maxsplit));
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool l = name != "rstrip", rt = name != "lstrip";
    return m([s, l, rt, name](CallArgs& a) {
      Args p(a, name, {"chars"});
      std::optional<std::string> chars;
      if (p.has(0) && !p.get(0).is_none()) chars = need_str(p.get(0), "strip arg");
      return Value::string(py_strip(s, chars ? &*chars : nullptr, l, rt));
    });
  }
  if (name == "replace") {
    return m([s](CallArgs& a) {
      Args p(a, "replace", {"old", "new", "count"});
      int64_t count = p.has(2) ? p.integer(2) : -1;
      return Value::string(py_replace(s, need_str(p.req(0), "replace() argument 1"),
                                      need_str(p.req(1), "replace() argument 2"), count));
    });
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    return m([s, name](CallArgs& a) {
      Args p(a, name, {});
      if (name == "upper") return Value::string(py_upper(s));
      if (name == "lower") return Value::string(py_lower(s));
      if (name == "title") return Value::string(py_title(s));
      return Value::string(py_capitalize(s));
    });
  }
  if (name == "find" || name == "rfind") {
    bool r = name == "rfind";
    return m([s, r, name](CallArgs& a) {
      Args p(a, name, {"sub"});
      const std::string& sub = need_str(p.req(0), "must be str");
      size_t f = r ? s.rfind(sub) : s.find(sub);
      return Value::integer(f == std::string::npos ? -1 : cp_index(s, f));
    });
  }
  if (name == "count") {
    return m([s](CallArgs& a) {
      Args p(a, "count", {"sub"});
      const std::string& sub = need_str(p.req(0), "must be str");
      if (sub.empty()) return Value::integer(static_cast<int64_t>(codepoint_count(s)) + 1);
      int64_t n = 0;
      for (size_t f = s.find(sub); f != std::string::npos; f = s.find(sub, f + sub.size())) ++n;
      return Value::integer(n);
    });
  }
  if (name == "join") {
    return m([s](CallArgs& a) {
      Args p(a, "join", {"iterable"});
      std::string out;
      bool first = true;
      for (const Value& v : iterate(p.req(0))) {
        if (!first) out += s;
        first = false;
        out += need_str(v, "sequence item");
      }
      return Value::string(std::move(out));
    });
  }
  if (name == "splitlines") {
    return m([s](CallArgs& a) {
      Args p(a, "splitlines", {"keepends"});
      return str_list(splitlines(s, p.has(0) && truthy(p.get(0))));
    });
  }
  if (name == "removeprefix" || name == "removesuffix") {
    bool suf = name == "removesuffix";
    return m([s, suf, name](CallArgs& a) {
      Args p(a, name, {"affix"});
      const std::string& x = need_str(p.req(0), name + " arg");
      if (!suf && s.compare(0, x.size(), x) == 0 && x.size() <= s.size())
        return Value::string(s.substr(x.size()));
      if (suf && !x.empty() && x.size() <= s.size() && s.compare(s.size() - x.size(), x.size(), x) == 0)
        return Value::string(s.substr(0, s.size() - x.size()));
      return Value::string(s);
    });
  }
  // is* predicates
  return m([s, name](CallArgs& a) {
    Args p(a, name, {});
    if (name == "isspace") return Value::boolean(all_cps(s, py_isspace));
    if (name == "isdigit") return Value::boolean(all_cps(s, [](char32_t c) { return c >= '0' && c <= '9'; }));
    if (name == "islower" || name == "isupper") return Value::boolean(py_is_case(s, name == "isupper"));
    if (!is_ascii(s)) fail_unsupported("str." + name + "() on non-ASCII text");
    auto alpha = [](char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
    if (name == "isalpha") return Value::boolean(all_cps(s, alpha));
    return Value::boolean(all_cps(s, [&](char32_t c) { return alpha(c) || (c >= '0' && c <= '9'); }));
  });
}

std::optional<Value> dict_method(const Value& obj, const std::string& name) {
  if (!kDictMethods.count(name)) return std::nullopt;
  std::shared_ptr<DictData> d = obj.dict;
  if (name == "get") {
    return bound(name, [d](CallArgs& a) {
      Args p(a, "get", {"key", "default"});
      const Value* v = d->find(p.req(0));
      if (v) return *v;
      return p.has(1) ? p.get(1) : Value::none();
    });
  }
  return bound(name, [d, name](CallArgs& a) {
    Args p(a, name, {});
    std::vector<Value> items;
    for (const auto& [k, v] : d->entries) {
      if (name == "keys")
        items.push_back(k);
      else if (name == "values")
        items.push_back(v);
      else
        items.push_back(Value::make_list({k, v}, ListKind::Tuple));
    }
    Value view = Value::make_list(std::move(items), ListKind::View);
    view.s = std::make_shared<const std::string>("dict_" + name);  // repr: dict_items([...])
    return view;
  });
}

std::optional<Value> loop_attribute(const Value& obj, const std::string& name) {
  std::shared_ptr<LoopState> st = obj.loop;
  int64_t i0 = static_cast<int64_t>(st->index0);
  int64_t n = static_cast<int64_t>(st->items.size());
  if (name == "index0") return Value::integer(i0);
  if (name == "index") return Value::integer(i0 + 1);
  if (name == "revindex0") return Value::integer(n - i0 - 1);
  if (name == "revindex") return Value::integer(n - i0);
  if (name == "first") return Value::boolean(i0 == 0);
  if (name == "last") return Value::boolean(i0 == n - 1);
  if (name == "length") return Value::integer(n);
  if (name == "depth") return Value::integer(st->depth0 + 1);
  if (name == "depth0") return Value::integer(st->depth0);
  if (name == "previtem")
    return i0 > 0 ? st->items[static_cast<size_t>(i0 - 1)] : Value::undefined("there is no previous item");
  if (name == "nextitem")
    return i0 + 1 < n ? st->items[static_cast<size_t>(i0 + 1)] : Value::undefined("there is no next item");
  if (name == "cycle") {
    size_t idx = st->index0;
    return bound(name, [idx](CallArgs& a) {
      if (a.pos.empty()) fail("no items for cycling given");
      return a.pos[idx % a.pos.size()];
    });
  }
  if (name == "changed") {
    return bound(name, [st](CallArgs& a) {
      Value now = Value::make_list(a.pos, ListKind::Tuple);
      if (!st->last_changed || !py_eq(*st->last_changed, now)) {
        st->last_changed = now;
        return Value::boolean(true);
      }
      return Value::boolean(false);
    });
  }
  return std::nullopt;
}

}  // namespace

bool is_known_test(const std::string& name) {
  return kTests.count(name) > 0;
}
bool is_known_global(const std::string& name) {
  return kGlobals.count(name) > 0;
}
bool is_known_method(const std::string& name) {
  static const std::set<std::string> other_methods = {"cycle", "changed", "index"};  // loop, list
  return kStrMethods.count(name) || kDictMethods.count(name) || other_methods.count(name);
}

std::optional<Value> builtin_attribute(const Value& obj, const std::string& name) {
  switch (obj.kind) {
    case Kind::String:
      if (auto m = str_method(obj, name)) return m;
      if (kStrAttrs.count(name)) fail_unsupported("str attribute '" + name + "'");
      return std::nullopt;
    case Kind::Dict:
      if (auto m = dict_method(obj, name)) return m;
      if (kDictAttrs.count(name)) fail_unsupported("dict attribute '" + name + "'");
      return std::nullopt;
    case Kind::List:
      if ((name == "count" || name == "index") &&
          (obj.list->kind == ListKind::List || obj.list->kind == ListKind::Tuple)) {
        std::shared_ptr<ListData> l = obj.list;
        return bound(name, [l, name](CallArgs& a) {
          Args p(a, name, {"value"});
          int64_t n = 0;
          for (size_t k = 0; k < l->items.size(); ++k) {
            if (!py_eq(l->items[k], p.req(0))) continue;
            if (name == "index") return Value::integer(static_cast<int64_t>(k));
            ++n;
          }
          if (name == "index") fail("value is not in list");
          return Value::integer(n);
        });
      }
      if (kListAttrs.count(name)) fail_unsupported(type_name(obj) + " attribute '" + name + "'");
      return std::nullopt;
    case Kind::Loop:
      return loop_attribute(obj, name);
    case Kind::Int:
    case Kind::Bool:
      if (name == "real" || name == "numerator") return Value::integer(obj.i);
      if (name == "imag") return Value::integer(0);
      if (name == "denominator") return Value::integer(1);
      return std::nullopt;
    case Kind::Float:
      if (name == "real") return obj;
      if (name == "imag") return Value::number(0.0);
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

Value get_attribute(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail("'" + *obj.s + "' is undefined");
  if (auto v = builtin_attribute(obj, name)) return *v;
  if (obj.kind == Kind::Dict || obj.kind == Kind::Namespace) {
    if (const Value* v = obj.dict->find(name)) return *v;
  }
  return Value::undefined(name);
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail("'" + *obj.s + "' is undefined");
  auto by_attr = [&]() -> Value {
    if (key.kind == Kind::String) {
      if (obj.kind == Kind::Namespace) {
        if (const Value* v = obj.dict->find(*key.s)) return *v;
      }
      if (auto v = builtin_attribute(obj, *key.s)) return *v;
      return Value::undefined(*key.s);
    }
    return Value::undefined(key.kind == Kind::Int ? std::to_string(key.i) : "item");
  };
  bool int_key = key.kind == Kind::Int || key.kind == Kind::Bool;
  if (obj.kind == Kind::List && (obj.list->kind == ListKind::List || obj.list->kind == ListKind::Tuple ||
                                 obj.list->kind == ListKind::Range)) {
    if (!int_key) return by_attr();
    int64_t n = static_cast<int64_t>(obj.list->items.size());
    int64_t k = key.i < 0 ? key.i + n : key.i;
    if (k < 0 || k >= n) return Value::undefined(std::to_string(key.i));
    return obj.list->items[static_cast<size_t>(k)];
  }
  if (obj.kind == Kind::String) {
    if (!int_key) return by_attr();
    std::vector<char32_t> cps = decode_utf8(*obj.s);
    int64_t n = static_cast<int64_t>(cps.size());
    int64_t k = key.i < 0 ? key.i + n : key.i;
    if (k < 0 || k >= n) return Value::undefined(std::to_string(key.i));
    std::string one;
    append_utf8(one, cps[static_cast<size_t>(k)]);
    return Value::string(std::move(one), obj.markup);
  }
  if (obj.kind == Kind::Dict) {
    if (key.kind != Kind::List && key.kind != Kind::Dict) {
      if (const Value* v = obj.dict->find(key)) return *v;
    }
    return by_attr();
  }
  if (obj.kind == Kind::Loop && key.kind == Kind::String) {
    if (auto v = loop_attribute(obj, *key.s)) return *v;
  }
  return by_attr();
}

bool apply_test(Interpreter& in, const std::string& name, const Value& v, CallArgs& a) {
  auto cmp = [&](const char* op) {
    Args p(a, name, {"other"});
    return compare_op(op, v, p.req(0));
  };
  static const std::set<std::string> nullary = {
      "defined",  "undefined", "none",   "boolean", "false",    "true",    "integer",
      "float",    "number",    "string", "mapping", "callable", "escaped", "iterable",
      "sequence", "lower",     "upper",  "odd",     "even",     "filter",  "test"};
  if (nullary.count(name)) Args(a, name, {});  // Python would reject an argument to these
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.kind == Kind::Bool;
  if (name == "false") return v.kind == Kind::Bool && !v.b;
  if (name == "true") return v.kind == Kind::Bool && v.b;
  if (name == "integer") return v.kind == Kind::Int;
  if (name == "float") return v.kind == Kind::Float;
  if (name == "number") return v.is_number();
  if (name == "string") return v.kind == Kind::String;
  if (name == "mapping") return v.kind == Kind::Dict;
  // Undefined defines __call__ (it raises), so Python's callable() says True.
  if (name == "callable")
    return v.kind == Kind::Callable || v.kind == Kind::Loop || v.kind == Kind::Undefined;
  if (name == "escaped") return v.kind == Kind::String && v.markup;
  if (name == "iterable")
    return v.kind == Kind::String || v.kind == Kind::List || v.kind == Kind::Dict ||
           v.kind == Kind::Undefined || v.kind == Kind::Loop;
  if (name == "sequence")
    return v.kind == Kind::String || v.kind == Kind::Dict || v.kind == Kind::Undefined ||
           (v.kind == Kind::List && v.list->kind != ListKind::Generator && v.list->kind != ListKind::View);
  if (name == "lower" || name == "upper") return py_is_case(to_str(v), name == "upper");
  if (name == "odd" || name == "even" || name == "divisibleby") {
    Value d = Value::integer(2);
    if (name == "divisibleby") d = Args(a, name, {"num"}).req(0);
    Value r = binary_op("%", v, d);
    return py_eq(r, Value::integer(name == "odd" ? 1 : 0));
  }
  if (name == "eq" || name == "equalto" || name == "==") return cmp("==");
  if (name == "ne" || name == "!=") return cmp("!=");
  if (name == "lt" || name == "lessthan" || name == "<") return cmp("<");
  if (name == "le" || name == "<=") return cmp("<=");
  if (name == "gt" || name == "greaterthan" || name == ">") return cmp(">");
  if (name == "ge" || name == ">=") return cmp(">=");
  if (name == "in") {
    Args p(a, name, {"seq"});
    return contains(p.req(0), v);
  }
  if (name == "sameas") {
    Value o = Args(a, name, {"other"}).req(0);
    if (v.kind != o.kind) return false;
    switch (v.kind) {
      case Kind::None:
      case Kind::Undefined:
        return v.kind == Kind::None;
      case Kind::Bool:
        return v.b == o.b;
      case Kind::List:
        return v.list == o.list;
      case Kind::Dict:
      case Kind::Namespace:
        return v.dict == o.dict;
      default:
        fail_unsupported("'sameas' on " + type_name(v) + " (Python object identity)");
    }
  }
  if (name == "filter") return v.kind == Kind::String && is_known_filter(*v.s);
  if (name == "test") return v.kind == Kind::String && is_known_test(*v.s);
  (void)in;
  fail_unsupported("test '" + name + "'");
}

Value global_function(const std::string& name) {
  if (name == "range") {
    return bound(name, [](CallArgs& a) {
      Args p(a, "range", {"a", "b", "c"});
      int64_t start = 0, stop, step = 1;
      if (p.has(1)) {
        start = p.integer(0);
        stop = p.integer(1);
        if (p.has(2)) step = p.integer(2);
      } else {
        stop = p.integer(0);
      }
      if (step == 0) fail("range() arg 3 must not be zero");
      std::vector<Value> items;
      for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
        if (items.size() >= 100000)
          fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        items.push_back(Value::integer(k));
      }
      Value r = Value::make_list(std::move(items), ListKind::Range);
      r.s = std::make_shared<const std::string>(
          "range(" + std::to_string(start) + ", " + std::to_string(stop) +
          (step != 1 ? ", " + std::to_string(step) : std::string()) + ")");
      return r;
    });
  }
  if (name == "namespace" || name == "dict") {
    bool ns = name == "namespace";
    return bound(name, [ns](CallArgs& a) {
      Value out = ns ? Value::make_namespace() : Value::make_dict();
      if (a.pos.size() > 1) fail("expected at most 1 positional argument");
      if (!a.pos.empty()) {
        if (a.pos[0].kind != Kind::Dict) fail_unsupported("namespace()/dict() from a " + type_name(a.pos[0]));
        for (const auto& [k, v] : a.pos[0].dict->entries) out.dict->set(k, v);
      }
      for (const auto& [k, v] : a.kw) out.dict->set(Value::string(k), v);
      return out;
    });
  }
  if (name == "raise_exception") {
    return bound(name, [](CallArgs& a) -> Value {
      Args p(a, "raise_exception", {"message"});
      throw EvalError("E_TPL_RAISE", to_str(p.req(0)));
    });
  }
  if (name == "strftime_now") {
    return bound(name, [](CallArgs& a) {
      Args p(a, "strftime_now", {"format"});
      const std::string& fmt = need_str(p.req(0), "strftime format");
      std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[512];
      size_t n = std::strftime(buf, sizeof(buf), fmt.c_str(), &tm);
      if (n == 0 && !fmt.empty()) fail_unsupported("strftime format longer than 512 bytes of output");
      return Value::string(std::string(buf, n));
    });
  }
  fail_unsupported("global function '" + name + "'");
}

}  // namespace bloomery::jinja
