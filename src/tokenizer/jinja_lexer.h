// Jinja2 lexer: splits template source into data and tag tokens with exactly Jinja2's whitespace rules
// (trim_blocks, lstrip_blocks, '-' / '+' markers, one trailing newline dropped, \r\n and \r read as \n).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bloomery::jinja {

enum class Tok : uint8_t { Data, BlockBegin, BlockEnd, VarBegin, VarEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  Tok type = Tok::Eof;
  std::string text;  // Data text, name, decoded string literal, operator
  int64_t ival = 0;
  double fval = 0;
  int line = 1;
  int col = 1;
};

struct LexOptions {
  bool trim_blocks = true;  // HF's environment: trim_blocks=True, lstrip_blocks=True
  bool lstrip_blocks = true;
};

// Throws bloomery::Error E_TPL_SYNTAX / E_TPL_UNSUPPORTED naming origin:line:column.
std::vector<Token> lex(const std::string& source, const std::string& origin, const LexOptions& opt = {});

// "origin:line:column"
std::string where_text(const std::string& origin, int line, int col);

}  // namespace bloomery::jinja
