#include "tokenizer/jinja_ops.h"

#include <cmath>

#include "tokenizer/jinja_text.h"

namespace bloomery::jinja {

namespace {

[[noreturn]] void type_error(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined() || b.is_undefined()) fail("'" + (a.is_undefined() ? *a.s : *b.s) + "' is undefined");
  fail("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
}

bool is_int(const Value& v) {
  return v.kind == Kind::Int || v.kind == Kind::Bool;
}

void check_overflow(bool overflow) {
  if (overflow) fail_unsupported("integer arithmetic beyond 64 bits");
}

int64_t floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t int_pow(int64_t base, int64_t exp) {
  int64_t r = 1;
  while (exp > 0) {
    if (exp & 1) check_overflow(__builtin_mul_overflow(r, base, &r));
    exp >>= 1;
    if (exp) check_overflow(__builtin_mul_overflow(base, base, &base));
  }
  return r;
}

// Like range()'s MAX_RANGE, a bound on what one `*` may build: a template (or a fuzzer) asking for a
// gigabyte string must get a named render error, not exhaust the server's memory.
constexpr int64_t kMaxRepeatSize = 1 << 24;

Value repeat(const Value& seq, int64_t n) {
  const int64_t unit = seq.kind == Kind::String ? static_cast<int64_t>(seq.s->size())
                                                : static_cast<int64_t>(seq.list->items.size());
  if (n > 0 && unit > 0 && n > kMaxRepeatSize / unit)
    fail("repetition too big: the result would exceed " + std::to_string(kMaxRepeatSize) + " elements");
  if (seq.kind == Kind::String) {
    std::string out;
    for (int64_t k = 0; k < n; ++k) out += *seq.s;
    return Value::string(std::move(out), seq.markup);
  }
  std::vector<Value> items;
  for (int64_t k = 0; k < n; ++k) items.insert(items.end(), seq.list->items.begin(), seq.list->items.end());
  return Value::make_list(std::move(items), seq.list->kind);
}

bool is_seq(const Value& v) {
  return v.kind == Kind::List && (v.list->kind == ListKind::List || v.list->kind == ListKind::Tuple);
}

}  // namespace

Value negate(const Value& v) {
  if (is_int(v)) {
    check_overflow(v.i == INT64_MIN);
    return Value::integer(-v.i);
  }
  if (v.kind == Kind::Float) return Value::number(-v.f);
  if (v.is_undefined()) fail("'" + *v.s + "' is undefined");
  fail("bad operand type for unary -: '" + type_name(v) + "'");
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value::string(to_str(a) + to_str(b));
  if (op == "+") {
    if (a.kind == Kind::String && b.kind == Kind::String) {
      // Markup + str escapes the plain side (markupsafe), str + str stays plain.
      if (a.markup || b.markup) {
        std::string l = a.markup ? *a.s : html_escape(*a.s);
        std::string r = b.markup ? *b.s : html_escape(*b.s);
        return Value::string(l + r, true);
      }
      return Value::string(*a.s + *b.s);
    }
    if (is_seq(a) && is_seq(b) && a.list->kind == b.list->kind) {
      std::vector<Value> items = a.list->items;
      items.insert(items.end(), b.list->items.begin(), b.list->items.end());
      return Value::make_list(std::move(items), a.list->kind);
    }
  }
  if (op == "*") {
    if ((a.kind == Kind::String || is_seq(a)) && is_int(b)) return repeat(a, b.i);
    if (is_int(a) && (b.kind == Kind::String || is_seq(b))) return repeat(b, a.i);
  }
  if (op == "%" && a.kind == Kind::String) fail_unsupported("printf-style string formatting with '%'");
  if (!a.is_number() || !b.is_number()) type_error(op, a, b);
  bool ints = is_int(a) && is_int(b);
  if (ints) {
    int64_t x = a.i, y = b.i, r = 0;
    if (op == "+") {
      check_overflow(__builtin_add_overflow(x, y, &r));
      return Value::integer(r);
    }
    if (op == "-") {
      check_overflow(__builtin_sub_overflow(x, y, &r));
      return Value::integer(r);
    }
    if (op == "*") {
      check_overflow(__builtin_mul_overflow(x, y, &r));
      return Value::integer(r);
    }
    if (op == "/") {
      if (y == 0) fail("division by zero");
      return Value::number(static_cast<double>(x) / static_cast<double>(y));
    }
    if (op == "//") {
      if (y == 0) fail("integer division or modulo by zero");
      return Value::integer(floordiv(x, y));
    }
    if (op == "%") {
      if (y == 0) fail("integer division or modulo by zero");
      return Value::integer(x - floordiv(x, y) * y);
    }
    if (op == "**") {
      if (y < 0) {
        if (x == 0) fail("0.0 cannot be raised to a negative power");
        return Value::number(std::pow(static_cast<double>(x), static_cast<double>(y)));
      }
      return Value::integer(int_pow(x, y));
    }
  }
  double x = as_double(a), y = as_double(b);
  if (op == "+") return Value::number(x + y);
  if (op == "-") return Value::number(x - y);
  if (op == "*") return Value::number(x * y);
  if (op == "/") {
    if (y == 0) fail("float division by zero");
    return Value::number(x / y);
  }
  if (op == "//" || op == "%") {
    if (y == 0) fail("float modulo");
    double mod = std::fmod(x, y);
    double div = (x - mod) / y;
    if (mod != 0 && ((y < 0) != (mod < 0))) {
      mod += y;
      div -= 1.0;
    }
    if (op == "%") return Value::number(mod != 0 ? mod : std::copysign(0.0, y));
    double floordiv_v = div != 0 ? std::floor(div) : std::copysign(0.0, x / y);
    if (div != 0 && div - floordiv_v > 0.5) floordiv_v += 1.0;
    return Value::number(floordiv_v);
  }
  if (op == "**") {
    if (x == 0 && y < 0) fail("0.0 cannot be raised to a negative power");
    if (x < 0 && y != std::floor(y)) fail_unsupported("complex result of '**'");
    return Value::number(std::pow(x, y));
  }
  fail_unsupported("operator '" + op + "'");
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Kind::Undefined:
      return false;
    case Kind::String:
      if (item.kind != Kind::String)
        fail("'in <string>' requires string as left operand, not " + type_name(item));
      return container.s->find(*item.s) != std::string::npos;
    case Kind::List: {
      ListData& l = *container.list;
      if (l.kind == ListKind::Generator) {
        if (!l.poison.empty()) fail(l.poison);
        while (l.pos < l.items.size()) {
          if (py_eq(l.items[l.pos++], item)) return true;
        }
        return false;
      }
      for (const Value& v : l.items)
        if (py_eq(v, item)) return true;
      return false;
    }
    case Kind::Dict:
      if (item.kind == Kind::Dict || item.kind == Kind::Namespace ||
          (item.kind == Kind::List && item.list->kind != ListKind::Tuple))
        fail("unhashable type: '" + type_name(item) + "'");
      return container.dict->find(item) != nullptr;
    default:
      fail("argument of type '" + type_name(container) + "' is not iterable");
  }
}

bool compare_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return py_eq(a, b);
  if (op == "!=") return !py_eq(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  if (a.is_undefined() || b.is_undefined()) fail("'" + (a.is_undefined() ? *a.s : *b.s) + "' is undefined");
  int c = py_cmp(a, b);
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;
}

Value slice(const Value& obj, const Value* start, const Value* stop, const Value* step) {
  auto idx = [](const Value* v, const char* what) -> std::optional<int64_t> {
    if (!v || v->is_none()) return std::nullopt;
    if (v->kind != Kind::Int && v->kind != Kind::Bool)
      fail(std::string("slice ") + what + " must be an integer or None");
    return v->i;
  };
  std::optional<int64_t> a = idx(start, "indices"), b = idx(stop, "indices"), st = idx(step, "indices");
  int64_t s = st.value_or(1);
  if (s == 0) fail("slice step cannot be zero");
  bool is_str = obj.kind == Kind::String;
  std::vector<char32_t> cps;
  if (is_str) cps = decode_utf8(*obj.s);
  int64_t n = is_str ? static_cast<int64_t>(cps.size()) : static_cast<int64_t>(obj.list->items.size());
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) x += n;
    if (s > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  int64_t lo = clamp(a, s > 0 ? 0 : n - 1);
  int64_t hi = clamp(b, s > 0 ? n : -1);
  std::vector<int64_t> picks;
  if (s > 0)
    for (int64_t k = lo; k < hi; k += s) picks.push_back(k);
  else
    for (int64_t k = lo; k > hi; k += s) picks.push_back(k);
  if (is_str) {
    std::string out;
    for (int64_t k : picks) append_utf8(out, cps[static_cast<size_t>(k)]);
    return Value::string(std::move(out), obj.markup);
  }
  std::vector<Value> items;
  for (int64_t k : picks) items.push_back(obj.list->items[static_cast<size_t>(k)]);
  return Value::make_list(std::move(items), obj.list->kind);
}

}  // namespace bloomery::jinja
