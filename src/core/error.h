// Named errors and warnings: every refusal says what (E_ id), where (file, tensor or field), expected and
// found.
#pragma once

#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

namespace bloomery {

// Where a problem was found. Any part may be empty; the message names the parts that are set.
struct Where {
  std::string file;    // file path (relative to the model folder where possible)
  std::string tensor;  // tensor or logical weight name
  std::string field;   // JSON field, config key or tensor part ("weight_scale", "data_offsets")
};

struct ErrorInfo {
  std::string id;  // E_<AREA>_<WHAT>, the spec's normative identifier
  Where where;
  std::string expected;
  std::string found;
  std::string note;  // optional extra explanation
};

// "file: tensor 'x': field 'y'" (only the parts that are set).
std::string format_where(const Where& where);

// "ID: file: tensor 'x': field 'y': expected A, found B (note)".
std::string format_error(const ErrorInfo& info);

class Error : public std::runtime_error {
 public:
  explicit Error(ErrorInfo info) : std::runtime_error(format_error(info)), info_(std::move(info)) {}
  const ErrorInfo& info() const { return info_; }
  const std::string& id() const { return info_.id; }

 private:
  ErrorInfo info_;
};

[[noreturn]] inline void raise(std::string id, Where where, std::string expected, std::string found,
                               std::string note = {}) {
  throw Error(
      ErrorInfo{std::move(id), std::move(where), std::move(expected), std::move(found), std::move(note)});
}

// Warnings (W_ ids) are collected per folder and reported once with a count, so a checkpoint with
// 30,000 expert tensors does not print 30,000 lines.
class Warnings {
 public:
  void add(std::string id, Where where, std::string message);
  // One line per id: "W_X (N times), first: file: tensor: message".
  std::vector<std::string> summary() const;
  size_t count(std::string_view id) const;
  size_t total() const;
  bool empty() const { return total() == 0; }

 private:
  struct Entry {
    size_t count = 0;
    Where first_where;
    std::string first_message;
  };
  mutable std::mutex mu_;
  std::map<std::string, Entry, std::less<>> entries_;
};

}  // namespace bloomery
