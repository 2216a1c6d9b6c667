// Binds call arguments (positional and keyword) to a built-in's parameter names, the way Python would.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace bloomery::jinja {

class Args {
 public:
  Args(const CallArgs& a, const std::string& fname, std::initializer_list<const char*> names)
      : fname_(fname) {
    std::vector<std::string> n(names.begin(), names.end());
    slots_.resize(n.size());
    if (a.pos.size() > n.size())
      fail(fname + "() takes at most " + std::to_string(n.size()) + " argument(s) (" +
           std::to_string(a.pos.size()) + " given)");
    for (size_t k = 0; k < a.pos.size(); ++k) slots_[k] = a.pos[k];
    for (const auto& [key, v] : a.kw) {
      size_t k = 0;
      while (k < n.size() && n[k] != key) ++k;
      if (k == n.size()) fail(fname + "() got an unexpected keyword argument '" + key + "'");
      if (slots_[k]) fail(fname + "() got multiple values for argument '" + key + "'");
      slots_[k] = v;
    }
    names_ = std::move(n);
  }
  bool has(size_t i) const { return i < slots_.size() && slots_[i].has_value(); }
  const Value& get(size_t i) const { return *slots_[i]; }
  const Value& req(size_t i) const {
    if (!has(i)) fail(fname_ + "() missing required argument '" + names_[i] + "'");
    return *slots_[i];
  }
  int64_t integer(size_t i) const {
    const Value& v = req(i);
    if (v.kind != Kind::Int && v.kind != Kind::Bool)
      fail("'" + type_name(v) + "' object cannot be interpreted as an integer");
    return v.i;
  }

 private:
  std::string fname_;
  std::vector<std::string> names_;
  std::vector<std::optional<Value>> slots_;
};

}  // namespace bloomery::jinja
