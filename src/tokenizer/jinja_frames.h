// Jinja2's compile-time scoping: finds, for every frame (template body, loop body, macro, with, set and
// filter blocks), the names that start out undefined there, so the interpreter binds them at frame entry.
#pragma once

#include "tokenizer/jinja_ast.h"

namespace bloomery::jinja {

// Fills Template::prebind and Stmt::prebind.
void analyze_frames(Template& tpl);

}  // namespace bloomery::jinja
