// Syntax tree of a parsed Jinja template: expressions and statements, each with its source line and column.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace bloomery::jinja {

enum class ExprKind {
  Const,     // value
  Name,      // name
  List,      // args
  Tuple,     // args
  Dict,      // args = k0, v0, k1, v1, ...
  Getattr,   // args[0].name
  Getitem,   // args[0][args[1]]
  Slice,     // args[0][args[1]:args[2]:args[3]] (null parts allowed)
  Call,      // args[0](args[1..], kwargs)
  Filter,    // args[0] | name(args[1..], kwargs)
  Test,      // args[0] is [not] name(args[1..], kwargs)
  Not,       // not args[0]
  Neg,       // -args[0]
  Pos,       // +args[0]
  Binary,    // args[0] op args[1]: + - * / // % ** ~ and or
  Compare,   // args[0] ops[0] args[1] ops[1] args[2] ... (== != < <= > >= in notin)
  CondExpr,  // args[1] if args[0] else args[2] (args[2] may be null)
};

struct Expr {
  ExprKind kind = ExprKind::Const;
  int line = 0, col = 0;
  Value value;
  std::string name;  // Name, Getattr attribute, Filter/Test name, Binary operator
  bool negated = false;
  std::vector<std::unique_ptr<Expr>> args;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
  std::vector<std::string> ops;  // Compare
};
using ExprPtr = std::unique_ptr<Expr>;

enum class StmtKind {
  Output,       // text
  Print,        // {{ expr }}
  If,           // conds[k] -> bodies[k]; else_body
  For,          // for targets in expr [if cond] ... else
  Set,          // set targets = expr   or   set ns.attr = expr
  SetBlock,     // set name [| filters] ... endset
  Macro,        // macro name(params) body
  With,         // with a = x, b = y: body
  FilterBlock,  // filter f ... endfilter (expr is the filter chain applied to a placeholder)
  Break,
  Continue,
  Generation,  // HF's {% generation %} ... {% endgeneration %}: renders its body
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Param {
  std::string name;
  ExprPtr default_value;  // null when required
};

struct Stmt {
  StmtKind kind = StmtKind::Output;
  int line = 0, col = 0;
  std::string text;                  // Output text; Macro name; Set attribute (ns.attr) name
  ExprPtr expr;                      // Print / For iterable / Set value / FilterBlock / SetBlock filter chain
  ExprPtr cond;                      // For's inline filter
  std::vector<std::string> targets;  // For / Set / SetBlock / With names
  bool target_tuple = false;         // for a, b in ... / set a, b = ...
  std::vector<ExprPtr> conds;        // If: one per branch
  std::vector<Body> bodies;          // If: one per branch
  Body body;                         // For / Macro / SetBlock / With / FilterBlock / Generation body
  Body else_body;                    // If / For
  std::vector<Param> params;         // Macro
  std::vector<ExprPtr> with_values;  // With: one per target
  // Names this statement's body frame assigns before reading them (Jinja2's idtracking): they start out
  // undefined in the frame, hiding outer values, even from nested loops and macros that run earlier.
  std::vector<std::string> prebind;
};

struct Template {
  Body body;
  std::vector<std::string> prebind;  // as Stmt::prebind, for the top-level frame
};

}  // namespace bloomery::jinja
