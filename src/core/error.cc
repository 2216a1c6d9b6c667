#include "core/error.h"

namespace bloomery {

std::string format_where(const Where& where) {
  std::string s;
  auto part = [&s](const std::string& text) { s += (s.empty() ? "" : ": ") + text; };
  if (!where.file.empty()) part(where.file);
  if (!where.tensor.empty()) part("tensor '" + where.tensor + "'");
  if (!where.field.empty()) part("field '" + where.field + "'");
  return s;
}

std::string format_error(const ErrorInfo& info) {
  std::string s = info.id;
  std::string where = format_where(info.where);
  if (!where.empty()) s += ": " + where;
  if (!info.expected.empty() || !info.found.empty()) {
    s += ": expected " + (info.expected.empty() ? std::string("(unspecified)") : info.expected);
    s += ", found " + (info.found.empty() ? std::string("(nothing)") : info.found);
  }
  if (!info.note.empty()) s += " (" + info.note + ")";
  return s;
}

void Warnings::add(std::string id, Where where, std::string message) {
  std::lock_guard lock(mu_);
  Entry& e = entries_[id];
  if (e.count++ == 0) {
    e.first_where = std::move(where);
    e.first_message = std::move(message);
  }
}

std::vector<std::string> Warnings::summary() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto& [id, e] : entries_) {
    out.push_back(fmt::format("{} ({} time{}), first: {}: {}", id, e.count, e.count == 1 ? "" : "s",
                              format_where(e.first_where), e.first_message));
  }
  return out;
}

size_t Warnings::count(std::string_view id) const {
  std::lock_guard lock(mu_);
  auto it = entries_.find(id);
  return it == entries_.end() ? 0 : it->second.count;
}

size_t Warnings::total() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& [id, e] : entries_) n += e.count;
  return n;
}

}  // namespace bloomery
