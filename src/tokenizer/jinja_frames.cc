#include "tokenizer/jinja_frames.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace bloomery::jinja {

namespace {

// Jinja2 compiles each frame (template body, loop body, macro, with, set/filter block) with its own
// symbol table: a name the frame assigns before any read of it is a frame local that starts undefined.
// This pass finds those names so the interpreter can bind them at frame entry.
class FrameAnalysis {
 public:
  enum State { kLoad = 1, kStore = 2 };
  using Table = std::map<std::string, int>;

  // A frame's own symbol table is built first; nested frames are analysed afterwards, knowing every name
  // their ancestors refer to. A nested frame that stores a name first starts it as the ancestor's value
  // when some ancestor refers to that name (anywhere), else undefined; the top-level frame always starts
  // store-first names undefined (the render context does not show through).
  static void analyze(Body& body, const std::vector<std::string>& params,
                      const std::set<std::string>& ancestors, bool root, std::vector<std::string>& prebind) {
    Table t;
    for (const auto& p : params) t[p] = kLoad;  // parameters are bound, never pre-bound
    std::vector<Child> kids;
    visit_body(body, t, kids);
    prebind.clear();
    for (const auto& [name, st] : t) {
      bool param = std::find(params.begin(), params.end(), name) != params.end();
      if (st == kStore && !param && (root || !ancestors.count(name))) prebind.push_back(name);
    }
    std::set<std::string> anc = ancestors;
    for (const auto& kv : t) anc.insert(kv.first);
    for (auto& k : kids) analyze(*k.body, k.params, anc, false, *k.prebind);
  }

 private:
  struct Child {
    Body* body;
    std::vector<std::string> params;
    std::vector<std::string>* prebind;
  };

  static void load(Table& t, const std::string& n) { t.emplace(n, kLoad); }
  static void store(Table& t, const std::string& n) { t.emplace(n, kStore); }

  static void visit_expr(const Expr* e, Table& t) {
    if (!e) return;
    if (e->kind == ExprKind::Name) load(t, e->name);
    for (const auto& a : e->args) visit_expr(a.get(), t);
    for (const auto& kw : e->kwargs) visit_expr(kw.second.get(), t);
  }

  static void visit_body(Body& body, Table& t, std::vector<Child>& kids) {
    for (auto& s : body) visit_stmt(*s, t, kids);
  }

  static void visit_stmt(Stmt& s, Table& t, std::vector<Child>& kids) {
    static std::vector<std::string> unused;
    switch (s.kind) {
      case StmtKind::Print:
        visit_expr(s.expr.get(), t);
        break;
      case StmtKind::If: {
        visit_expr(s.conds[0].get(), t);
        // Branches see copies; a name stored in every branch (body and else, no elif) counts as stored,
        // one stored in only some branches is read from outside (Jinja2's branch_update).
        std::vector<Table> branches;
        for (size_t k = 0; k < s.bodies.size(); ++k) {
          Table c = t;
          if (k > 0) visit_expr(s.conds[k].get(), c);
          visit_body(s.bodies[k], c, kids);
          branches.push_back(std::move(c));
        }
        Table e = t;
        visit_body(s.else_body, e, kids);
        branches.push_back(std::move(e));
        bool has_elif = s.bodies.size() > 1;
        std::set<std::string> names;
        for (const auto& b : branches)
          for (const auto& kv : b) names.insert(kv.first);
        for (const auto& n : names) {
          if (t.count(n)) continue;
          bool loaded = false, stored_all = !has_elif;
          for (const auto& b : branches) {
            auto it = b.find(n);
            if (it == b.end()) {
              stored_all = false;
            } else if (it->second == kLoad) {
              loaded = true;
              stored_all = false;
            }
          }
          if (loaded || !stored_all)
            load(t, n);
          else
            store(t, n);
        }
        break;
      }
      case StmtKind::For: {
        visit_expr(s.expr.get(), t);
        std::vector<std::string> params = s.targets;
        params.push_back("loop");
        kids.push_back({&s.body, params, &s.prebind});
        kids.push_back({&s.else_body, {}, &unused});
        break;
      }
      case StmtKind::Set:
        visit_expr(s.expr.get(), t);
        if (!s.text.empty())
          load(t, s.targets[0]);  // ns.attr = ... reads ns
        else
          for (const auto& n : s.targets) store(t, n);
        break;
      case StmtKind::SetBlock:
        store(t, s.targets[0]);
        kids.push_back({&s.body, {}, &s.prebind});
        break;
      case StmtKind::Macro: {
        store(t, s.text);
        std::vector<std::string> params;
        for (const auto& p : s.params) params.push_back(p.name);
        kids.push_back({&s.body, params, &s.prebind});
        break;
      }
      case StmtKind::With:
        for (const auto& v : s.with_values) visit_expr(v.get(), t);
        kids.push_back({&s.body, s.targets, &s.prebind});
        break;
      case StmtKind::FilterBlock:
        visit_expr(s.expr.get(), t);
        kids.push_back({&s.body, {}, &s.prebind});
        break;
      case StmtKind::Generation:
        kids.push_back({&s.body, {}, &s.prebind});
        break;
      default:
        break;
    }
  }
};

}  // namespace

void analyze_frames(Template& tpl) {
  FrameAnalysis::analyze(tpl.body, {}, {}, true, tpl.prebind);
}

}  // namespace bloomery::jinja
