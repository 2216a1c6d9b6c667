// Built-in filters, tests, global functions and str/dict/list methods of the Jinja interpreter, with the
// semantics of Jinja2 3.1 and HF's chat-template environment (tojson, raise_exception, strftime_now).
#pragma once

#include <string>

#include "tokenizer/jinja_value.h"

namespace bloomery::jinja {

bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);
bool is_known_global(const std::string& name);
bool is_known_method(const std::string& name);

// value | name(args)
Value apply_filter(Interpreter& in, const std::string& name, const Value& value, CallArgs& args);
// value is name(args)
bool apply_test(Interpreter& in, const std::string& name, const Value& value, CallArgs& args);
// The global function `name` as a callable value (range, namespace, dict, raise_exception, strftime_now).
Value global_function(const std::string& name);
// obj.name as Jinja2's sandbox resolves it for built-in types: a bound method, a loop attribute, or nothing
// (std::nullopt: fall back to item lookup).
std::optional<Value> builtin_attribute(const Value& obj, const std::string& name);

// obj.name and obj[key] with Jinja2's sandbox rules (attribute first for '.', item first for '[]'; a missing
// attribute or item gives Undefined; anything on Undefined is an error).
Value get_attribute(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);

}  // namespace bloomery::jinja
