// Jinja2 parser: turns lexer tokens into a Template tree, refusing at load (with origin:line:column) every
// construct the interpreter does not implement, so nothing is silently rendered differently from Jinja2.
#pragma once

#include <string>

#include "tokenizer/jinja_ast.h"

namespace bloomery::jinja {

// Throws bloomery::Error E_TPL_SYNTAX (Jinja2 would refuse it too) or E_TPL_UNSUPPORTED (valid Jinja2 that
// bloomery does not implement).
Template parse_template(const std::string& source, const std::string& origin);

}  // namespace bloomery::jinja
