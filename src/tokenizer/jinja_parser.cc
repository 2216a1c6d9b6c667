#include "tokenizer/jinja_parser.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"
#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_frames.h"
#include "tokenizer/jinja_lexer.h"

namespace bloomery::jinja {

namespace {

const std::set<std::string> kUnsupportedTags = {"block", "extends",    "include", "import", "from",
                                                "call",  "autoescape", "do",      "trans",  "pluralize"};
const std::set<std::string> kReservedNames = {"varargs", "kwargs", "caller"};

class Parser {
 public:
  Parser(std::vector<Token> tokens, std::string origin) : t_(std::move(tokens)), origin_(std::move(origin)) {}

  Template run() {
    Template tpl;
    tpl.body = subparse({});
    check_calls();
    return tpl;
  }

 private:
  // ---- token helpers ----
  const Token& cur() const { return t_[i_]; }
  const Token& look(size_t n = 1) const { return t_[std::min(i_ + n, t_.size() - 1)]; }
  Token next() {
    Token tok = t_[i_];
    if (i_ + 1 < t_.size()) ++i_;
    return tok;
  }
  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::Name && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  static std::string describe(const Token& tok) {
    switch (tok.type) {
      case Tok::Data:
        return "template data";
      case Tok::BlockBegin:
        return "'{%'";
      case Tok::BlockEnd:
        return "end of statement block";
      case Tok::VarBegin:
        return "'{{'";
      case Tok::VarEnd:
        return "end of print statement";
      case Tok::Name:
        return "'" + tok.text + "'";
      case Tok::String:
        return "string";
      case Tok::Int:
      case Tok::Float:
        return "number";
      case Tok::Op:
        return "'" + tok.text + "'";
      case Tok::Eof:
        return "end of template";
    }
    return "token";
  }
  [[noreturn]] void fail_at(const Token& tok, const std::string& expected, const std::string& found,
                            const char* id = "E_TPL_SYNTAX") {
    raise(id, Where{where_text(origin_, tok.line, tok.col), "", ""}, expected, found);
  }
  [[noreturn]] void fail_here(const std::string& expected) { fail_at(cur(), expected, describe(cur())); }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail_here(std::string("'") + op + "'");
  }
  void expect_name(const char* n) {
    if (!skip_name(n)) fail_here(std::string("'") + n + "'");
  }
  void expect(Tok type, const char* what) {
    if (cur().type != type) fail_here(what);
    next();
  }
  ExprPtr node(ExprKind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->col = at.col;
    return e;
  }
  StmtPtr stmt(StmtKind kind, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = at.line;
    s->col = at.col;
    return s;
  }

  // ---- statements ----
  Body subparse(const std::set<std::string>& end_tags) {
    Body body;
    while (true) {
      const Token& tok = cur();
      if (tok.type == Tok::Eof) {
        if (!end_tags.empty()) {
          std::string want;
          for (const auto& e : end_tags) want += (want.empty() ? "" : " or ") + ("'" + e + "'");
          fail_at(tok, "a closing tag " + want, "end of template");
        }
        return body;
      }
      if (tok.type == Tok::Data) {
        auto s = stmt(StmtKind::Output, tok);
        s->text = tok.text;
        body.push_back(std::move(s));
        next();
      } else if (tok.type == Tok::VarBegin) {
        auto s = stmt(StmtKind::Print, tok);
        next();
        s->expr = parse_tuple(true);
        expect(Tok::VarEnd, "end of print statement '}}'");
        body.push_back(std::move(s));
      } else if (tok.type == Tok::BlockBegin) {
        next();
        if (cur().type == Tok::Name && end_tags.count(cur().text)) return body;
        body.push_back(parse_statement());
        expect(Tok::BlockEnd, "end of statement block '%}'");
      } else {
        fail_here("template data or a tag");
      }
    }
  }

  // Jinja2's parse_statements: optional ':' and the block end, then the body up to one of end_tags.
  Body parse_statements(const std::set<std::string>& end_tags, bool drop_needle) {
    skip_op(":");
    expect(Tok::BlockEnd, "end of statement block '%}'");
    Body body = subparse(end_tags);
    if (drop_needle) next();
    return body;
  }

  StmtPtr parse_statement() {
    const Token& tok = cur();
    if (tok.type != Tok::Name) fail_here("a tag name");
    const std::string& n = tok.text;
    if (n == "for") return parse_for();
    if (n == "if") return parse_if();
    if (n == "set") return parse_set();
    if (n == "macro") return parse_macro();
    if (n == "with") return parse_with();
    if (n == "filter") return parse_filter_block();
    if (n == "print") {
      auto s = stmt(StmtKind::Print, tok);
      next();
      s->expr = parse_tuple(true);
      return s;
    }
    if (n == "break" || n == "continue") {
      if (loop_depth_ == 0) fail_at(tok, "'" + n + "' inside a for loop", "'" + n + "' outside any loop");
      auto s = stmt(n == "break" ? StmtKind::Break : StmtKind::Continue, tok);
      next();
      return s;
    }
    if (n == "generation") {
      auto s = stmt(StmtKind::Generation, tok);
      next();
      s->body = parse_statements({"endgeneration"}, true);
      return s;
    }
    if (kUnsupportedTags.count(n)) fail_at(tok, "a supported tag", "'{% " + n + " %}'", "E_TPL_UNSUPPORTED");
    fail_at(tok, "a known tag", "unknown tag '" + n + "'");
  }

  // Names as assignment targets: name, or a, b (tuple), or ns.attr when allowed.
  void parse_assign_target(Stmt& s, bool with_namespace, bool name_only, const char* end_name) {
    if (with_namespace && look().type == Tok::Op && look().text == ".") {
      if (cur().type != Tok::Name) fail_here("a name");
      s.targets.push_back(next().text);
      next();  // '.'
      if (cur().type != Tok::Name) fail_here("an attribute name");
      s.text = next().text;
      return;
    }
    if (name_only) {
      if (cur().type != Tok::Name) fail_here("a name");
      s.targets.push_back(check_target(next()));
      return;
    }
    // parse_tuple(simplified=True): names separated by commas, optionally in parentheses
    bool paren = skip_op("(");
    while (true) {
      if (!s.targets.empty()) {
        if (!skip_op(",")) break;
        s.target_tuple = true;
        if ((end_name && is_name(end_name)) || is_op("=") || is_op(")") || cur().type == Tok::BlockEnd) break;
      }
      if (cur().type != Tok::Name) fail_here("a name to assign to");
      s.targets.push_back(check_target(next()));
    }
    if (paren) {
      expect_op(")");
      s.target_tuple = true;
    }
  }
  std::string check_target(const Token& tok) {
    static const std::set<std::string> bad = {"true", "false", "none", "True", "False", "None"};
    if (bad.count(tok.text)) fail_at(tok, "a name to assign to", "'" + tok.text + "'");
    assigned_.insert(tok.text);
    return tok.text;
  }

  StmtPtr parse_for() {
    auto s = stmt(StmtKind::For, cur());
    next();
    parse_assign_target(*s, false, false, "in");
    expect_name("in");
    s->expr = parse_tuple(false, "recursive");
    if (skip_name("if")) s->cond = parse_expression(true);
    if (is_name("recursive")) fail_at(cur(), "a supported for loop", "'recursive' loop", "E_TPL_UNSUPPORTED");
    ++loop_depth_;
    s->body = parse_statements({"endfor", "else"}, false);
    --loop_depth_;
    if (next().text == "else") s->else_body = parse_statements({"endfor"}, true);
    return s;
  }

  StmtPtr parse_if() {
    auto s = stmt(StmtKind::If, cur());
    next();
    while (true) {
      s->conds.push_back(parse_tuple(false));
      s->bodies.push_back(parse_statements({"elif", "else", "endif"}, false));
      Token tok = next();
      if (tok.text == "elif") continue;
      if (tok.text == "else") s->else_body = parse_statements({"endif"}, true);
      break;
    }
    return s;
  }

  StmtPtr parse_set() {
    const Token& at = cur();
    next();
    auto s = stmt(StmtKind::Set, at);
    parse_assign_target(*s, true, false, nullptr);
    if (skip_op("=")) {
      s->expr = parse_tuple(true);
      return s;
    }
    if (!s->text.empty() || s->target_tuple) fail_here("'=' (block assignment takes one plain name)");
    s->kind = StmtKind::SetBlock;
    if (is_op("|")) s->expr = parse_filter_chain(nullptr, false);
    s->body = parse_statements({"endset"}, true);
    return s;
  }

  StmtPtr parse_macro() {
    auto s = stmt(StmtKind::Macro, cur());
    next();
    if (cur().type != Tok::Name) fail_here("a macro name");
    s->text = check_target(next());
    macros_.insert(s->text);
    expect_op("(");
    bool have_default = false;
    while (!is_op(")")) {
      if (!s->params.empty()) expect_op(",");
      if (cur().type != Tok::Name) fail_here("a parameter name");
      Param p;
      p.name = check_target(next());
      if (skip_op("=")) {
        p.default_value = parse_expression(true);
        have_default = true;
      } else if (have_default) {
        fail_here("a default value (non-default argument follows default argument)");
      }
      s->params.push_back(std::move(p));
    }
    expect_op(")");
    size_t first_token = i_;
    int saved_depth = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_statements({"endmacro"}, true);
    loop_depth_ = saved_depth;
    // Jinja2 gives a macro extra powers when its body names varargs, kwargs or caller; not implemented here.
    for (size_t k = first_token; k < i_; ++k)
      if (t_[k].type == Tok::Name && kReservedNames.count(t_[k].text))
        fail_at(t_[k], "a macro without varargs/kwargs/caller", "'" + t_[k].text + "'", "E_TPL_UNSUPPORTED");
    return s;
  }

  StmtPtr parse_with() {
    auto s = stmt(StmtKind::With, cur());
    next();
    while (cur().type != Tok::BlockEnd) {
      if (!s->targets.empty()) expect_op(",");
      if (cur().type != Tok::Name) fail_here("a name");
      s->targets.push_back(check_target(next()));
      expect_op("=");
      s->with_values.push_back(parse_expression(true));
    }
    s->body = parse_statements({"endwith"}, true);
    return s;
  }

  StmtPtr parse_filter_block() {
    auto s = stmt(StmtKind::FilterBlock, cur());
    next();
    s->expr = parse_filter_chain(nullptr, true);
    s->body = parse_statements({"endfilter"}, true);
    return s;
  }

  // ---- expressions (Jinja2's precedence, lowest first) ----
  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

  // Comma-separated expressions form a tuple (Jinja2's parse_tuple).
  ExprPtr parse_tuple(bool with_condexpr, const char* extra_end = nullptr, bool explicit_parens = false) {
    const Token at = cur();
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (cur().type == Tok::VarEnd || cur().type == Tok::BlockEnd || is_op(")") ||
          (extra_end && is_name(extra_end)))
        break;
      items.push_back(parse_expression(with_condexpr));
      if (is_op(","))
        is_tuple = true;
      else
        break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail_here("an expression");
    }
    auto e = node(ExprKind::Tuple, at);
    e->args = std::move(items);
    return e;
  }

  ExprPtr parse_condexpr() {
    ExprPtr expr1 = parse_or();
    while (is_name("if")) {
      auto e = node(ExprKind::CondExpr, cur());
      next();
      ExprPtr cond = parse_or();
      ExprPtr other = skip_name("else") ? parse_condexpr() : nullptr;
      e->args.push_back(std::move(cond));
      e->args.push_back(std::move(expr1));
      e->args.push_back(std::move(other));
      expr1 = std::move(e);
    }
    return expr1;
  }

  ExprPtr binary(const Token& at, const std::string& op, ExprPtr l, ExprPtr r) {
    auto e = node(ExprKind::Binary, at);
    e->name = op;
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      Token at = next();
      left = binary(at, "or", std::move(left), parse_and());
    }
    return left;
  }
  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      Token at = next();
      left = binary(at, "and", std::move(left), parse_not());
    }
    return left;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      auto e = node(ExprKind::Not, cur());
      next();
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    const Token at = cur();
    ExprPtr expr = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == Tok::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                    cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && look().type == Tok::Name && look().text == "in") {
        next();
        next();
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(ExprKind::Compare, at);
        cmp->args.push_back(std::move(expr));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(expr);
  }
  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      Token at = next();
      left = binary(at, at.text, std::move(left), parse_concat());
    }
    return left;
  }
  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      Token at = next();
      left = binary(at, "~", std::move(left), parse_math2());
    }
    return left;
  }
  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      Token at = next();
      left = binary(at, at.text, std::move(left), parse_pow());
    }
    return left;
  }
  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      Token at = next();
      left = binary(at, "**", std::move(left), parse_unary(true));
    }
    return left;
  }
  ExprPtr parse_unary(bool with_filter) {
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = node(is_op("-") ? ExprKind::Neg : ExprKind::Pos, cur());
      next();
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token tok = cur();
    if (tok.type == Tok::Name) {
      next();
      auto e = node(ExprKind::Const, tok);
      if (tok.text == "true" || tok.text == "True") {
        e->value = Value::boolean(true);
      } else if (tok.text == "false" || tok.text == "False") {
        e->value = Value::boolean(false);
      } else if (tok.text == "none" || tok.text == "None") {
        e->value = Value::none();
      } else {
        e->kind = ExprKind::Name;
        e->name = tok.text;
      }
      return e;
    }
    if (tok.type == Tok::String) {
      std::string s;
      while (cur().type == Tok::String) s += next().text;  // adjacent literals concatenate
      auto e = node(ExprKind::Const, tok);
      e->value = Value::string(std::move(s));
      return e;
    }
    if (tok.type == Tok::Int || tok.type == Tok::Float) {
      next();
      auto e = node(ExprKind::Const, tok);
      e->value = tok.type == Tok::Int ? Value::integer(tok.ival) : Value::number(tok.fval);
      return e;
    }
    if (is_op("(")) {
      next();
      ExprPtr e = parse_tuple(true, nullptr, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      auto e = node(ExprKind::List, tok);
      next();
      while (!is_op("]")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("]")) break;
        e->args.push_back(parse_expression(true));
      }
      expect_op("]");
      return e;
    }
    if (is_op("{")) {
      auto e = node(ExprKind::Dict, tok);
      next();
      while (!is_op("}")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("}")) break;
        e->args.push_back(parse_expression(true));
        expect_op(":");
        e->args.push_back(parse_expression(true));
      }
      expect_op("}");
      return e;
    }
    fail_here("an expression");
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".") || is_op("["))
        e = parse_subscript(std::move(e));
      else if (is_op("("))
        e = parse_call(std::move(e));
      else
        return e;
    }
  }
  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|"))
        e = parse_filter_chain(std::move(e), false);
      else if (is_name("is"))
        e = parse_test(std::move(e));
      else if (is_op("("))
        e = parse_call(std::move(e));
      else
        return e;
    }
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    Token tok = next();
    if (tok.text == ".") {
      Token attr = next();
      if (attr.type == Tok::Name) {
        auto e = node(ExprKind::Getattr, tok);
        e->name = attr.text;
        e->args.push_back(std::move(obj));
        return e;
      }
      if (attr.type != Tok::Int) fail_at(attr, "a name or number after '.'", describe(attr));
      auto e = node(ExprKind::Getitem, tok);
      auto idx = node(ExprKind::Const, attr);
      idx->value = Value::integer(attr.ival);
      e->args.push_back(std::move(obj));
      e->args.push_back(std::move(idx));
      return e;
    }
    // '['
    std::vector<ExprPtr> subs;
    while (!is_op("]")) {
      if (!subs.empty()) expect_op(",");
      subs.push_back(parse_subscribed());
    }
    expect_op("]");
    if (subs.size() != 1) fail_at(tok, "one subscript", "a tuple subscript", "E_TPL_UNSUPPORTED");
    ExprPtr sub = std::move(subs[0]);
    if (sub->kind == ExprKind::Slice) {
      sub->args[0] = std::move(obj);
      return sub;
    }
    auto e = node(ExprKind::Getitem, tok);
    e->args.push_back(std::move(obj));
    e->args.push_back(std::move(sub));
    return e;
  }

  // One subscript: an expression or a slice a:b:c (Slice's args[0] is filled in by the caller).
  ExprPtr parse_subscribed() {
    const Token at = cur();
    std::vector<ExprPtr> parts;
    if (is_op(":")) {
      next();
      parts.push_back(nullptr);
    } else {
      ExprPtr e = parse_expression(true);
      if (!is_op(":")) return e;
      next();
      parts.push_back(std::move(e));
    }
    if (is_op(":"))
      parts.push_back(nullptr);
    else if (!is_op("]") && !is_op(","))
      parts.push_back(parse_expression(true));
    else
      parts.push_back(nullptr);
    if (is_op(":")) {
      next();
      if (!is_op("]") && !is_op(","))
        parts.push_back(parse_expression(true));
      else
        parts.push_back(nullptr);
    } else {
      parts.push_back(nullptr);
    }
    auto s = node(ExprKind::Slice, at);
    s->args.push_back(nullptr);
    for (auto& p : parts) s->args.push_back(std::move(p));
    return s;
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    bool require_comma = false;
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*") || is_op("**"))
        fail_at(cur(), "plain arguments", "*args or **kwargs", "E_TPL_UNSUPPORTED");
      if (cur().type == Tok::Name && look().type == Tok::Op && look().text == "=") {
        std::string key = next().text;
        next();
        e.kwargs.emplace_back(key, parse_expression(true));
      } else {
        if (!e.kwargs.empty()) fail_here("a keyword argument (positional argument follows keyword argument)");
        e.args.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = node(ExprKind::Call, cur());
    e->args.push_back(std::move(callee));
    parse_call_args(*e);
    calls_.push_back(e.get());
    return e;
  }

  // "| name(args)" repeated; operand may be null for {% filter %} and {% set x | f %} blocks.
  ExprPtr parse_filter_chain(ExprPtr operand, bool start_inline) {
    while (start_inline || is_op("|")) {
      if (!start_inline) next();
      start_inline = false;
      const Token at = cur();
      if (at.type != Tok::Name) fail_here("a filter name");
      std::string name = next().text;
      while (is_op(".")) {
        next();
        name += "." + next().text;
      }
      if (!is_known_filter(name))
        fail_at(at, "a supported filter", "filter '" + name + "'", "E_TPL_UNSUPPORTED");
      auto e = node(ExprKind::Filter, at);
      e->name = name;
      e->args.push_back(std::move(operand));
      if (is_op("(")) parse_call_args(*e);
      operand = std::move(e);
    }
    return operand;
  }

  ExprPtr parse_test(ExprPtr operand) {
    next();  // 'is'
    bool negated = skip_name("not");
    const Token at = cur();
    if (at.type != Tok::Name) fail_here("a test name");
    std::string name = next().text;
    while (is_op(".")) {
      next();
      name += "." + next().text;
    }
    if (!is_known_test(name)) fail_at(at, "a supported test", "test '" + name + "'", "E_TPL_UNSUPPORTED");
    auto e = node(ExprKind::Test, at);
    e->name = name;
    e->negated = negated;
    e->args.push_back(std::move(operand));
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((cur().type == Tok::Name || cur().type == Tok::String || cur().type == Tok::Int ||
                cur().type == Tok::Float || is_op("(") || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail_here("one test (tests cannot be chained with 'is')");
      e->args.push_back(parse_postfix(parse_primary()));
    }
    return e;
  }

  // Calls of Jinja2 globals that bloomery lacks, and of methods no supported type has, are refused at load.
  // A call of a plain unknown name is left to render time, where Jinja2 raises too (if it is reached).
  void check_calls() {
    static const std::set<std::string> missing_globals = {"cycler", "joiner", "lipsum"};
    for (Expr* c : calls_) {
      const Expr& callee = *c->args[0];
      if (callee.kind == ExprKind::Name) {
        if (!missing_globals.count(callee.name) || macros_.count(callee.name) || assigned_.count(callee.name))
          continue;
        raise("E_TPL_UNSUPPORTED", Where{where_text(origin_, callee.line, callee.col), "", ""},
              "a macro or supported global function", "call of '" + callee.name + "'");
      }
      if (callee.kind == ExprKind::Getattr) {
        if (is_known_method(callee.name)) continue;
        raise("E_TPL_UNSUPPORTED", Where{where_text(origin_, callee.line, callee.col), "", ""},
              "a supported method", "method '" + callee.name + "'");
      }
      // Calling the result of a filter, subscript or call: allowed; the callee is checked at render.
    }
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  std::string origin_;
  int loop_depth_ = 0;
  std::set<std::string> macros_;
  std::set<std::string> assigned_;
  std::vector<Expr*> calls_;
};

}  // namespace

Template parse_template(const std::string& source, const std::string& origin) {
  Template tpl = Parser(lex(source, origin), origin).run();
  analyze_frames(tpl);
  return tpl;
}

}  // namespace bloomery::jinja
