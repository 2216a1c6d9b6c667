// The request body's JSON parser (see json_body.h).
#include "server/json_body.h"

#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "server/api_error.h"

namespace bloomery::server {

using ojson = nlohmann::ordered_json;

namespace {

// Builds the body's JSON in one pass, linear in its size: nlohmann's own DOM parser inserts each object key
// through ordered_map's linear search, so an object of n keys cost n² (200k keys took 41 s). Here every open
// object keeps a hash index of its keys, and values are appended straight to its storage. It also bounds the
// nesting depth, and names the field whose number overflows a double. Duplicate keys: the last value wins, at
// the first one's position (what ordered_json's parser does).
// The parser's token as shown in a message: ASCII as is, other bytes as \\xNN (a message stays valid UTF-8).
std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f)
      out += static_cast<char>(c);
    else
      out += fmt::format("\\x{:02x}", c);
  }
  return out;
}

class BodyBuilder {
 public:
  using number_integer_t = ojson::number_integer_t;
  using number_unsigned_t = ojson::number_unsigned_t;
  using number_float_t = ojson::number_float_t;
  using string_t = ojson::string_t;
  using binary_t = ojson::binary_t;

  BodyBuilder(ojson& root, size_t max_depth) : root_(root), max_depth_(max_depth) {}
  const std::string& error() const { return error_; }

  bool null() { return put(nullptr) != nullptr; }
  bool boolean(bool v) { return put(v) != nullptr; }
  bool number_integer(number_integer_t v) { return put(v) != nullptr; }
  bool number_unsigned(number_unsigned_t v) { return put(v) != nullptr; }
  bool number_float(number_float_t v, const string_t&) { return put(v) != nullptr; }
  bool string(string_t& v) { return put(std::move(v)) != nullptr; }
  bool binary(binary_t&) { return fail("Invalid JSON in the request body: binary values are not JSON"); }
  bool start_object(size_t) { return open(ojson::object()); }
  bool key(string_t& k) {
    stack_.back().key = std::move(k);
    return true;
  }
  bool end_object() {
    stack_.pop_back();
    return true;
  }
  bool start_array(size_t) { return open(ojson::array()); }
  bool end_array() {
    stack_.pop_back();
    return true;
  }
  bool parse_error(size_t position, const std::string& last_token, const nlohmann::detail::exception& ex) {
    std::string token = printable(last_token.size() > 40 ? last_token.substr(0, 40) + "..." : last_token);
    // 406: a number outside a double's range (1e999); the parser's own words are not passed on.
    if (ex.id == 406)
      return fail(fmt::format("'{}': expected a number a double can hold, found {}", path(), token));
    return fail(
        fmt::format("Invalid JSON in the request body: syntax error at byte {} near '{}'", position, token));
  }

 private:
  struct Frame {
    ojson* value;
    std::unordered_map<std::string, size_t> index;  // objects: key → position
    std::string key;                                // objects: the key of the value coming next
  };

  bool fail(std::string message) {
    if (error_.empty()) error_ = std::move(message);
    return false;
  }

  bool open(ojson empty) {
    if (stack_.size() >= max_depth_)
      return fail(fmt::format("'{}': the request body nests deeper than {} levels", path(), max_depth_));
    ojson* v = put(std::move(empty));
    stack_.push_back(Frame{v, {}, {}});
    return true;
  }

  ojson* put(ojson v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Frame& top = stack_.back();
    if (top.value->is_array()) {
      auto& arr = top.value->get_ref<ojson::array_t&>();
      arr.push_back(std::move(v));
      return &arr.back();
    }
    // ordered_map is a vector of (key, value): appended to as a vector, its own emplace being the slow part.
    auto& items = static_cast<ojson::object_t::Container&>(top.value->get_ref<ojson::object_t&>());
    auto [it, fresh] = top.index.try_emplace(top.key, items.size());
    if (!fresh) {
      items[it->second].second = std::move(v);
      return &items[it->second].second;
    }
    items.emplace_back(std::move(top.key), std::move(v));
    return &items.back().second;
  }

  // Where the parser is: "messages[2].content".
  std::string path() const {
    std::string p;
    for (const Frame& f : stack_) {
      if (f.value->is_array())
        p += fmt::format("[{}]", f.value->size());
      else
        p += (p.empty() ? "" : ".") + f.key;
    }
    return p.empty() ? "(body)" : p;
  }

  ojson& root_;
  size_t max_depth_;
  std::vector<Frame> stack_;
  std::string error_;
};

}  // namespace

ojson parse_json_body(const std::string& body, size_t max_depth) {
  ojson j;
  BodyBuilder builder(j, max_depth);
  if (!ojson::sax_parse(body, &builder)) {
    if (builder.error().empty()) bad_request("Invalid JSON in the request body");
    bad_request(builder.error());
  }
  return j;
}

}  // namespace bloomery::server
