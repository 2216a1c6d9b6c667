#include "tokenizer/jinja_interp.h"

#include <set>

#include "core/error.h"
#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_lexer.h"
#include "tokenizer/jinja_ops.h"

namespace bloomery::jinja {

Value* Scope::find_local(const std::string& name) {
  for (auto& [k, v] : vars)
    if (k == name) return &v;
  return nullptr;
}

void Scope::set(const std::string& name, Value v) {
  if (Value* slot = find_local(name)) {
    *slot = std::move(v);
    return;
  }
  vars.emplace_back(name, std::move(v));
}

namespace {

template <typename T>
void locate(EvalError& err, const T& node) {
  if (err.line == 0) {
    err.line = node.line;
    err.col = node.col;
  }
}

// An expression Jinja2 can evaluate at compile time: literals, operators, tests, filters that do not need
// the render context, and method calls on such values.
bool is_literal(const Expr& e) {
  static const std::set<std::string> context_filters = {"map", "select", "reject", "selectattr",
                                                        "rejectattr"};
  switch (e.kind) {
    case ExprKind::Name:
      return false;
    case ExprKind::Call:
      if (e.args[0]->kind != ExprKind::Getattr) return false;
      break;
    case ExprKind::Filter:
      if (context_filters.count(e.name) || !e.args[0]) return false;
      break;
    default:
      break;
  }
  for (const auto& a : e.args)
    if (a && !is_literal(*a)) return false;
  for (const auto& kw : e.kwargs)
    if (!is_literal(*kw.second)) return false;
  return true;
}

void prebind(Scope& sc, const std::vector<std::string>& names) {
  for (const auto& n : names) sc.set(n, Value::undefined(n));
}

}  // namespace

std::string Interpreter::render(const Template& tpl, const Value& context, const std::string& origin) {
  Interpreter in;
  auto root = std::make_shared<Scope>();
  if (context.kind == Kind::Dict)
    for (const auto& [k, v] : context.dict->entries)
      if (k.kind == Kind::String) root->set(*k.s, v);
  prebind(*root, tpl.prebind);
  std::string out;
  in.out_ = &out;
  try {
    in.exec_body(tpl.body, root);
  } catch (const EvalError& err) {
    std::string where = where_text(origin, err.line, err.col);
    if (err.id == "E_TPL_RAISE")
      raise(err.id, Where{where, "", ""}, "", "", std::string("raise_exception: ") + err.what());
    raise(err.id, Where{where, "", ""}, "", "", err.what());
  }
  return out;
}

Value Interpreter::lookup(const std::string& name, const ScopePtr& scope) {
  for (Scope* s = scope.get(); s; s = s->parent.get())
    if (Value* v = s->find_local(name)) return *v;
  if (is_known_global(name)) return global_function(name);
  return Value::undefined(name);
}

Interpreter::Flow Interpreter::exec_body(const Body& body, const ScopePtr& scope) {
  for (const auto& s : body) {
    Flow f = exec(*s, scope);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

std::string Interpreter::capture(const Body& body, const ScopePtr& scope) {
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  try {
    exec_body(body, scope);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buf;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, const ScopePtr& scope) {
  try {
    switch (s.kind) {
      case StmtKind::Output:
        *out_ += s.text;
        return Flow::Normal;
      case StmtKind::Print: {
        const_print_ = is_literal(*s.expr);
        Value v = eval(*s.expr, scope);
        const_print_ = false;
        *out_ += to_str(v);
        return Flow::Normal;
      }
      case StmtKind::If:
        for (size_t k = 0; k < s.conds.size(); ++k)
          if (truthy(eval(*s.conds[k], scope))) return exec_body(s.bodies[k], scope);
        return exec_body(s.else_body, scope);
      case StmtKind::For:
        return exec_for(s, scope);
      case StmtKind::Set:
        assign(s, scope, eval(*s.expr, scope));
        return Flow::Normal;
      case StmtKind::SetBlock: {
        auto inner = std::make_shared<Scope>();
        inner->parent = scope;
        prebind(*inner, s.prebind);
        Value text = Value::string(capture(s.body, inner));
        if (s.expr) text = eval_filter(*s.expr, scope, &text);
        assign(s, scope, text);
        return Flow::Normal;
      }
      case StmtKind::Macro:
        scope->set(s.text, make_macro(s, scope));
        return Flow::Normal;
      case StmtKind::With: {
        auto inner = std::make_shared<Scope>();
        inner->parent = scope;
        prebind(*inner, s.prebind);
        for (size_t k = 0; k < s.targets.size(); ++k)
          inner->set(s.targets[k], eval(*s.with_values[k], scope));
        return exec_body(s.body, inner);
      }
      case StmtKind::FilterBlock: {
        auto inner = std::make_shared<Scope>();
        inner->parent = scope;
        prebind(*inner, s.prebind);
        Value text = Value::string(capture(s.body, inner));
        *out_ += to_str(eval_filter(*s.expr, scope, &text));
        return Flow::Normal;
      }
      case StmtKind::Generation: {
        auto inner = std::make_shared<Scope>();
        inner->parent = scope;
        prebind(*inner, s.prebind);
        exec_body(s.body, inner);
        return Flow::Normal;
      }
      case StmtKind::Break:
        return Flow::Break;
      case StmtKind::Continue:
        return Flow::Continue;
    }
  } catch (EvalError& err) {
    locate(err, s);
    throw;
  }
  return Flow::Normal;
}

void Interpreter::assign(const Stmt& s, const ScopePtr& scope, const Value& v) {
  if (!s.text.empty() && s.kind == StmtKind::Set) {  // {% set ns.attr = v %}
    Value ns = lookup(s.targets[0], scope);
    if (ns.kind != Kind::Namespace) fail("cannot assign attribute on non-namespace object");
    ns.dict->set(Value::string(s.text), v);
    return;
  }
  if (!s.target_tuple) {
    scope->set(s.targets[0], v);
    return;
  }
  std::vector<Value> items = iterate(v);
  if (items.size() != s.targets.size())
    fail(items.size() > s.targets.size()
             ? "too many values to unpack (expected " + std::to_string(s.targets.size()) + ")"
             : "not enough values to unpack (expected " + std::to_string(s.targets.size()) + ", got " +
                   std::to_string(items.size()) + ")");
  for (size_t k = 0; k < items.size(); ++k) scope->set(s.targets[k], items[k]);
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s, const ScopePtr& scope) {
  Value iterable = eval(*s.expr, scope);
  std::vector<Value> items = iterate(iterable);
  if (s.cond) {
    // The inline filter sees the loop target but no `loop` variable.
    std::vector<Value> kept;
    for (const Value& item : items) {
      auto probe = std::make_shared<Scope>();
      probe->parent = scope;
      Stmt bind;
      bind.kind = StmtKind::For;
      bind.targets = s.targets;
      bind.target_tuple = s.target_tuple;
      assign(bind, probe, item);
      if (truthy(eval(*s.cond, probe))) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    auto inner = std::make_shared<Scope>();
    inner->parent = scope;
    exec_body(s.else_body, inner);
    return Flow::Normal;
  }
  auto state = std::make_shared<LoopState>();
  state->items = std::move(items);
  Value loop;
  loop.kind = Kind::Loop;
  loop.loop = state;
  for (size_t k = 0; k < state->items.size(); ++k) {
    state->index0 = k;
    auto inner = std::make_shared<Scope>();  // Jinja2 starts every iteration with fresh locals
    inner->parent = scope;
    inner->set("loop", loop);
    prebind(*inner, s.prebind);
    assign(s, inner, state->items[k]);
    Flow f = exec_body(s.body, inner);
    if (f == Flow::Break) break;
  }
  return Flow::Normal;
}

Value Interpreter::make_macro(const Stmt& s, const ScopePtr& scope) {
  auto fn = std::make_shared<Callable>();
  fn->name = s.text;
  const Stmt* def = &s;
  std::weak_ptr<Scope> weak = scope;  // the defining scope owns the macro; avoid a reference cycle
  fn->fn = [def, weak](Interpreter& in, CallArgs& args) -> Value {
    ScopePtr parent = weak.lock();
    auto local = std::make_shared<Scope>();
    local->parent = parent;
    prebind(*local, def->prebind);
    if (args.pos.size() > def->params.size())
      fail("macro '" + def->text + "' takes not more than " + std::to_string(def->params.size()) +
           " argument(s)");
    for (const auto& [key, v] : args.kw) {
      bool found = false;
      for (const Param& p : def->params) found = found || p.name == key;
      if (!found) fail("macro '" + def->text + "' takes no keyword argument '" + key + "'");
    }
    for (size_t k = 0; k < def->params.size(); ++k) {
      const Param& p = def->params[k];
      std::optional<Value> v;
      if (k < args.pos.size()) v = args.pos[k];
      for (const auto& [key, kv] : args.kw)
        if (key == p.name) {
          if (v) fail("macro '" + def->text + "' got multiple values for argument '" + key + "'");
          v = kv;
        }
      if (!v) v = p.default_value ? in.eval(*p.default_value, local) : Value::undefined(p.name);
      local->set(p.name, *v);
    }
    return Value::string(in.capture(def->body, local));
  };
  Value v;
  v.kind = Kind::Callable;
  v.fn = fn;
  return v;
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.kind == Kind::Undefined) fail("'" + *callee.s + "' is undefined");
  if (callee.kind != Kind::Callable) fail("'" + type_name(callee) + "' object is not callable");
  if (call_depth_ >= 200) fail("maximum macro recursion depth (200) exceeded");
  ++call_depth_;
  struct Leave {
    int& depth;
    ~Leave() { --depth; }
  } leave{call_depth_};
  return callee.fn->fn(*this, args);
}

CallArgs Interpreter::eval_args(const Expr& e, const ScopePtr& scope, size_t first) {
  CallArgs a;
  for (size_t k = first; k < e.args.size(); ++k) a.pos.push_back(eval(*e.args[k], scope));
  for (const auto& [key, ex] : e.kwargs) a.kw.emplace_back(key, eval(*ex, scope));
  return a;
}

Value Interpreter::eval_filter(const Expr& e, const ScopePtr& scope, const Value* block_input) {
  Value operand;
  if (!e.args[0])
    operand = *block_input;
  else if (e.args[0]->kind == ExprKind::Filter && block_input)
    operand = eval_filter(*e.args[0], scope, block_input);
  else
    operand = eval(*e.args[0], scope);
  CallArgs a = eval_args(e, scope, 1);
  try {
    return apply_filter(*this, e.name, operand, a);
  } catch (EvalError& err) {
    locate(err, e);
    throw;
  }
}

Value Interpreter::eval(const Expr& e, const ScopePtr& scope) {
  try {
    return eval_inner(e, scope);
  } catch (EvalError& err) {
    locate(err, e);
    throw;
  }
}

Value Interpreter::eval_inner(const Expr& e, const ScopePtr& scope) {
  switch (e.kind) {
    case ExprKind::Const:
      return e.value;
    case ExprKind::Name:
      return lookup(e.name, scope);
    case ExprKind::List:
    case ExprKind::Tuple: {
      std::vector<Value> items;
      for (const auto& a : e.args) items.push_back(eval(*a, scope));
      return Value::make_list(std::move(items), e.kind == ExprKind::List ? ListKind::List : ListKind::Tuple);
    }
    case ExprKind::Dict: {
      Value d = Value::make_dict();
      for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
        Value key = eval(*e.args[k], scope);
        if (key.kind == Kind::List || key.kind == Kind::Dict || key.kind == Kind::Undefined)
          fail("unhashable type: '" + type_name(key) + "'");
        d.dict->set(key, eval(*e.args[k + 1], scope));
      }
      return d;
    }
    case ExprKind::Getattr:
      return get_attribute(eval(*e.args[0], scope), e.name);
    case ExprKind::Getitem:
      return get_item(eval(*e.args[0], scope), eval(*e.args[1], scope));
    case ExprKind::Slice: {
      Value obj = eval(*e.args[0], scope);
      std::optional<Value> part[3];
      for (int k = 0; k < 3; ++k)
        if (e.args[1 + k]) part[k] = eval(*e.args[1 + k], scope);
      if (obj.is_undefined()) fail("'" + *obj.s + "' is undefined");
      if (obj.kind == Kind::List && obj.list->kind == ListKind::Range) fail_unsupported("slicing a range()");
      bool sliceable =
          obj.kind == Kind::String ||
          (obj.kind == Kind::List && (obj.list->kind == ListKind::List || obj.list->kind == ListKind::Tuple));
      if (!sliceable) {
        // Jinja2 evaluates an all-literal {{ }} expression at compile time, where a failed slice becomes
        // Undefined; anywhere else the same slice raises at render.
        if (const_print_) return Value::undefined("slice");
        if (obj.kind == Kind::Dict) fail("unhashable type: 'slice'");
        fail("'" + type_name(obj) + "' object is not subscriptable");
      }
      return slice(obj, part[0] ? &*part[0] : nullptr, part[1] ? &*part[1] : nullptr,
                   part[2] ? &*part[2] : nullptr);
    }
    case ExprKind::Call: {
      Value callee = eval(*e.args[0], scope);
      CallArgs a = eval_args(e, scope, 1);
      return call(callee, a);
    }
    case ExprKind::Filter:
      return eval_filter(e, scope, nullptr);
    case ExprKind::Test: {
      Value operand = eval(*e.args[0], scope);
      CallArgs a = eval_args(e, scope, 1);
      bool r = apply_test(*this, e.name, operand, a);
      return Value::boolean(e.negated ? !r : r);
    }
    case ExprKind::Not:
      return Value::boolean(!truthy(eval(*e.args[0], scope)));
    case ExprKind::Neg:
      return negate(eval(*e.args[0], scope));
    case ExprKind::Pos: {
      Value v = eval(*e.args[0], scope);
      if (!v.is_number()) fail("bad operand type for unary +: '" + type_name(v) + "'");
      return v.kind == Kind::Bool ? Value::integer(v.i) : v;
    }
    case ExprKind::Binary: {
      if (e.name == "and") {
        Value l = eval(*e.args[0], scope);
        return truthy(l) ? eval(*e.args[1], scope) : l;
      }
      if (e.name == "or") {
        Value l = eval(*e.args[0], scope);
        return truthy(l) ? l : eval(*e.args[1], scope);
      }
      Value l = eval(*e.args[0], scope);
      Value r = eval(*e.args[1], scope);
      return binary_op(e.name, l, r);
    }
    case ExprKind::Compare: {
      Value left = eval(*e.args[0], scope);
      for (size_t k = 0; k < e.ops.size(); ++k) {
        Value right = eval(*e.args[k + 1], scope);
        if (!compare_op(e.ops[k], left, right)) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case ExprKind::CondExpr:
      if (truthy(eval(*e.args[0], scope))) return eval(*e.args[1], scope);
      if (e.args[2]) return eval(*e.args[2], scope);
      return Value::undefined("inline if-expression without else");
  }
  fail_unsupported("expression kind");
}

}  // namespace bloomery::jinja
