// Tree-walking interpreter for parsed Jinja templates with Jinja2's scoping: a fresh scope per for-loop
// iteration, macros that see their defining scope at call time, namespace() objects for state that must
// outlive a loop iteration.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_value.h"

namespace bloomery::jinja {

struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;
  Value* find_local(const std::string& name);
  void set(const std::string& name, Value v);
};

class Interpreter {
 public:
  // context: a Dict value whose entries become the template's top-level variables.
  // Throws bloomery::Error (E_TPL_RENDER, E_TPL_RAISE, E_TPL_UNSUPPORTED) naming origin:line:column.
  static std::string render(const Template& tpl, const Value& context, const std::string& origin);

  // Calls a callable value (macro, global, bound method) with evaluated arguments.
  Value call(const Value& callee, CallArgs& args);

 private:
  enum class Flow { Normal, Break, Continue };
  using ScopePtr = std::shared_ptr<Scope>;

  Value lookup(const std::string& name, const ScopePtr& scope);
  Flow exec_body(const Body& body, const ScopePtr& scope);
  Flow exec(const Stmt& s, const ScopePtr& scope);
  Flow exec_for(const Stmt& s, const ScopePtr& scope);
  std::string capture(const Body& body, const ScopePtr& scope);
  Value eval(const Expr& e, const ScopePtr& scope);
  Value eval_inner(const Expr& e, const ScopePtr& scope);
  Value eval_filter(const Expr& e, const ScopePtr& scope, const Value* block_input);
  CallArgs eval_args(const Expr& e, const ScopePtr& scope, size_t first);
  void assign(const Stmt& s, const ScopePtr& scope, const Value& v);
  Value make_macro(const Stmt& s, const ScopePtr& scope);

  std::string* out_ = nullptr;
  int call_depth_ = 0;
  bool const_print_ = false;  // evaluating an all-literal {{ }} expression (see the Slice case)  // macro
                              // nesting; Python stops runaway recursion too (RecursionError)
};

}  // namespace bloomery::jinja
