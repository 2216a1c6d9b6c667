// Python-compatible text helpers for the Jinja interpreter: UTF-8 code points, str.isspace, strip/split,
// case mapping, float repr and string repr, so rendered output matches CPython byte for byte.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace bloomery::jinja {

// Decodes UTF-8 into code points. Invalid bytes decode as U+FFFD-free raw values (0xDC80 + byte), the way
// Python's surrogateescape would, so that re-encoding round-trips them.
std::vector<char32_t> decode_utf8(std::string_view s);
std::string encode_utf8(const std::vector<char32_t>& cps);
void append_utf8(std::string& out, char32_t cp);
bool is_ascii(std::string_view s);
size_t codepoint_count(std::string_view s);

// Python str.isspace() for one code point.
bool py_isspace(char32_t c);
// Python str.islower() / str.isupper(): at least one cased character and none of the other case.
bool py_is_case(std::string_view s, bool upper);
// Python str.isprintable() for one code point (used by repr).
bool py_isprintable(char32_t c);

// str.strip / lstrip / rstrip. chars == nullptr strips whitespace; otherwise strips any code point in *chars.
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right);
// str.split(sep=None, maxsplit=-1) and str.rsplit.
std::vector<std::string> py_split(std::string_view s, const std::string* sep, int64_t maxsplit);
std::vector<std::string> py_rsplit(std::string_view s, const std::string* sep, int64_t maxsplit);
std::string py_lower(std::string_view s);
std::string py_upper(std::string_view s);
std::string py_title(std::string_view s);
std::string py_capitalize(std::string_view s);
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);

// repr(float) and repr(str) exactly as CPython 3.11 prints them.
std::string py_float_repr(double v);
std::string py_str_repr(std::string_view s);

}  // namespace bloomery::jinja
