// Python's arithmetic, concatenation, membership and comparison operators on Jinja values.
#pragma once

#include <string>

#include "tokenizer/jinja_value.h"

namespace bloomery::jinja {

// op: + - * / // % ** ~
Value binary_op(const std::string& op, const Value& a, const Value& b);
// op: == != < <= > >= in notin
bool compare_op(const std::string& op, const Value& a, const Value& b);
// Python's `item in container`.
bool contains(const Value& container, const Value& item);
Value negate(const Value& v);
// Python slicing obj[start:stop:step] for lists, tuples and strings (null parts are None).
Value slice(const Value& obj, const Value* start, const Value* stop, const Value* step);

}  // namespace bloomery::jinja
