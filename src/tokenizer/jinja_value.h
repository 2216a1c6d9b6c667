// Values of the Jinja interpreter, modelled on the Python objects Jinja2 sees (str, int, float, bool, None,
// list, tuple, dict, generator, Undefined, namespace, loop), with Python's str()/repr(), truthiness, equality
// and ordering, and HF's tojson (json.dumps) so output is byte-identical to Python Jinja2.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace bloomery::jinja {

// A failure while evaluating (Python would raise TypeError, UndefinedError, ...). The interpreter adds the
// template position and turns it into a bloomery::Error with `id`.
struct EvalError : std::runtime_error {
  EvalError(std::string id_, const std::string& msg) : std::runtime_error(msg), id(std::move(id_)) {}
  std::string id;         // E_TPL_RENDER, E_TPL_UNSUPPORTED or E_TPL_RAISE
  int line = 0, col = 0;  // set by the innermost expression or statement that saw it
};
[[noreturn]] void fail(const std::string& msg);              // E_TPL_RENDER
[[noreturn]] void fail_unsupported(const std::string& msg);  // E_TPL_UNSUPPORTED

enum class Kind : uint8_t {
  Undefined,
  None,
  Bool,
  Int,
  Float,
  String,
  List,
  Dict,
  Namespace,
  Callable,
  Loop
};
// Python list, tuple, one-shot generator (map/select/... results), dict view (dict.items()) and range
// (items materialised; Value::s holds its repr "range(a, b)").
enum class ListKind : uint8_t { List, Tuple, Generator, View, Range };

struct Value;
struct ListData;
struct DictData;
struct Callable;
struct LoopState;
class Interpreter;

struct Value {
  Kind kind = Kind::Undefined;
  bool markup = false;  // a Markup string (|safe, |escape): '+' escapes the other operand
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::shared_ptr<const std::string> s;  // String text, or Undefined's name hint for error messages
  std::shared_ptr<ListData> list;
  std::shared_ptr<DictData> dict;  // Dict and Namespace
  std::shared_ptr<Callable> fn;
  std::shared_ptr<LoopState> loop;

  static Value undefined(std::string hint = {});
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value number(double v);
  static Value string(std::string v, bool markup = false);
  static Value make_list(std::vector<Value> items, ListKind kind = ListKind::List);
  static Value make_dict();
  static Value make_namespace();

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_none() const { return kind == Kind::None; }
  bool is_string() const { return kind == Kind::String; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  bool is_list() const { return kind == Kind::List; }
  bool is_dict() const { return kind == Kind::Dict; }
  const std::string& str() const { return *s; }
};

struct ListData {
  ListKind kind = ListKind::List;
  std::vector<Value> items;
  size_t pos = 0;      // generators: items before pos were already consumed
  std::string poison;  // generators over a non-iterable: Python raises this only when they are consumed
};

// Insertion-ordered mapping with Python key equality (1 == 1.0 == True).
struct DictData {
  std::vector<std::pair<Value, Value>> entries;
  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;
  void set(const Value& key, Value value);
};

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

struct Callable {
  std::string name;
  std::function<Value(Interpreter&, CallArgs&)> fn;
};

struct LoopState {
  std::vector<Value> items;
  size_t index0 = 0;
  int depth0 = 0;
  std::optional<Value> last_changed;
};

bool truthy(const Value& v);
std::string type_name(const Value& v);
// Python str(v) as Jinja2 prints it ({{ v }}); refuses values whose text Python leaves to memory addresses.
std::string to_str(const Value& v);
std::string repr(const Value& v);
bool py_eq(const Value& a, const Value& b);
// -1, 0, 1 like Python's <, ==, > for orderable pairs; EvalError otherwise.
int py_cmp(const Value& a, const Value& b);
double as_double(const Value& v);  // bool/int/float

// Python iteration: list items, remaining generator items (consuming them), dict keys, string characters.
std::vector<Value> iterate(const Value& v);
// Python len(); EvalError for values without one.
int64_t py_len(const Value& v);

Value from_json(const nlohmann::ordered_json& j);

struct JsonOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // None, or the per-level indent text
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};
// json.dumps(v, ...) as Python does it.
std::string to_json(const Value& v, const JsonOptions& opt);

std::string html_escape(const std::string& s);  // markupsafe.escape

}  // namespace bloomery::jinja
