#include "tokenizer/jinja_lexer.h"

#include <cstring>
#include <string_view>

#include "core/error.h"
#include "tokenizer/jinja_text.h"

namespace bloomery::jinja {

std::string where_text(const std::string& origin, int line, int col) {
  return origin + ":" + std::to_string(line) + ":" + std::to_string(col);
}

namespace {

class Lexer {
 public:
  Lexer(std::string src, std::string origin, LexOptions opt)
      : src_(std::move(src)), origin_(std::move(origin)), opt_(opt) {
    line_starts_.push_back(0);
    for (size_t k = 0; k < src_.size(); ++k)
      if (src_[k] == '\n') line_starts_.push_back(k + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t tag = find_tag(pos);
      if (tag == std::string::npos) {
        emit_data(pos, src_.substr(pos));
        break;
      }
      char kind = src_[tag + 1];  // '%', '#', '{'
      char sign = tag + 2 < src_.size() ? src_[tag + 2] : 0;
      if (sign != '-' && sign != '+') sign = 0;
      std::string text = src_.substr(pos, tag - pos);
      size_t after = tag + 2 + (sign ? 1 : 0);
      size_t raw_end = kind == '%' ? match_raw_begin(after) : std::string::npos;
      bool is_variable = kind == '{' && raw_end == std::string::npos;
      if (sign == '-') {
        text = py_strip(text, nullptr, false, true);
      } else if (sign != '+' && opt_.lstrip_blocks && !is_variable) {
        size_t nl = text.rfind('\n');
        size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() && all_space(text.substr(l_pos)))
          text.resize(l_pos);
      }
      emit_data(pos, text);
      if (raw_end != std::string::npos) {
        pos = lex_raw(raw_end, line_starting);
      } else if (kind == '#') {
        pos = lex_comment(after, tag, line_starting);
      } else {
        pos = lex_tag(kind == '%', tag, after, line_starting);
      }
    }
    Token eof;
    eof.type = Tok::Eof;
    set_pos(eof, src_.size());
    tokens_.push_back(eof);
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void error(size_t off, const std::string& what, const std::string& found,
                          const char* id = "E_TPL_SYNTAX") {
    auto [line, col] = line_col(off);
    raise(id, Where{where_text(origin_, line, col), "", ""}, what, found);
  }

  std::pair<int, int> line_col(size_t off) const {
    size_t lo = 0, hi = line_starts_.size();
    while (hi - lo > 1) {
      size_t mid = (lo + hi) / 2;
      if (line_starts_[mid] <= off)
        lo = mid;
      else
        hi = mid;
    }
    return {static_cast<int>(lo + 1), static_cast<int>(off - line_starts_[lo] + 1)};
  }
  void set_pos(Token& t, size_t off) {
    auto [line, col] = line_col(off);
    t.line = line;
    t.col = col;
  }

  static bool all_space(std::string_view s) {
    for (char32_t c : decode_utf8(s))
      if (!py_isspace(c)) return false;
    return true;
  }

  // Length of the Python-whitespace run (\s) starting at pos.
  size_t space_run(size_t pos) const {
    size_t p = pos;
    while (p < src_.size()) {
      unsigned char c = static_cast<unsigned char>(src_[p]);
      if (c < 0x80) {
        if (!py_isspace(c)) break;
        ++p;
        continue;
      }
      std::vector<char32_t> one = decode_utf8(std::string_view(src_).substr(p, 4));
      if (one.empty() || !py_isspace(one[0])) break;
      std::string enc;
      append_utf8(enc, one[0]);
      p += enc.size();
    }
    return p - pos;
  }

  size_t find_tag(size_t pos) const {
    for (size_t p = src_.find('{', pos); p != std::string::npos; p = src_.find('{', p + 1)) {
      if (p + 1 < src_.size() && (src_[p + 1] == '%' || src_[p + 1] == '#' || src_[p + 1] == '{')) return p;
    }
    return std::string::npos;
  }

  bool starts(size_t pos, const char* lit) const { return src_.compare(pos, std::strlen(lit), lit) == 0; }

  // After "{%" and its sign: "\s*raw\s*" then "-%}\s*" or "%}". Returns the offset after it, or npos.
  size_t match_raw_begin(size_t pos) const {
    size_t p = pos + space_run(pos);
    if (!starts(p, "raw")) return std::string::npos;
    p += 3;
    p += space_run(p);
    if (starts(p, "-%}")) return p + 3 + space_run(p + 3);
    if (starts(p, "%}")) return p + 2;
    return std::string::npos;
  }

  void emit_data(size_t off, const std::string& text) {
    if (text.empty()) return;
    Token t;
    t.type = Tok::Data;
    t.text = text;
    set_pos(t, off);
    tokens_.push_back(std::move(t));
  }

  size_t lex_raw(size_t pos, bool& line_starting) {
    // Jinja2 yields no begin/end tokens for raw; the body is data with the endraw tag's whitespace rules.
    for (size_t p = src_.find("{%", pos); p != std::string::npos; p = src_.find("{%", p + 1)) {
      size_t q = p + 2;
      char sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q] : 0;
      if (sign) ++q;
      q += space_run(q);
      if (!starts(q, "endraw")) continue;
      q += 6;
      q += space_run(q);
      size_t end;
      if (starts(q, "+%}")) {
        end = q + 3;
      } else if (starts(q, "-%}")) {
        end = q + 3 + space_run(q + 3);
      } else if (starts(q, "%}")) {
        end = q + 2 + ((opt_.trim_blocks && q + 2 < src_.size() && src_[q + 2] == '\n') ? 1 : 0);
      } else {
        continue;
      }
      std::string text = src_.substr(pos, p - pos);
      if (sign == '-') {
        text = py_strip(text, nullptr, false, true);
      } else if (sign != '+' && opt_.lstrip_blocks) {
        size_t nl = text.rfind('\n');
        size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() && all_space(text.substr(l_pos)))
          text.resize(l_pos);
      }
      emit_data(pos, text);
      line_starting = src_[end - 1] == '\n';
      return end;
    }
    error(pos, "{% endraw %}", "end of template (missing end of raw directive)");
  }

  size_t lex_comment(size_t pos, size_t begin, bool& line_starting) {
    for (size_t p = pos; p < src_.size(); ++p) {
      size_t end = std::string::npos;
      if (starts(p, "+#}"))
        end = p + 3;
      else if (starts(p, "-#}"))
        end = p + 3 + space_run(p + 3);
      else if (starts(p, "#}"))
        end = p + 2 + ((opt_.trim_blocks && p + 2 < src_.size() && src_[p + 2] == '\n') ? 1 : 0);
      if (end == std::string::npos) continue;
      line_starting = src_[end - 1] == '\n';
      return end;
    }
    error(begin, "#} closing the comment", "end of template (missing end of comment tag)");
  }

  size_t lex_tag(bool block, size_t begin, size_t pos, bool& line_starting) {
    Token open;
    open.type = block ? Tok::BlockBegin : Tok::VarBegin;
    set_pos(open, begin);
    tokens_.push_back(open);
    std::vector<char> balance;
    size_t p = pos;
    while (true) {
      if (p >= src_.size())
        error(begin, block ? "%} closing the tag" : "}} closing the tag", "end of template");
      if (balance.empty()) {
        size_t end = std::string::npos;
        if (block) {
          if (starts(p, "+%}"))
            end = p + 3;
          else if (starts(p, "-%}"))
            end = p + 3 + space_run(p + 3);
          else if (starts(p, "%}"))
            end = p + 2 + ((opt_.trim_blocks && p + 2 < src_.size() && src_[p + 2] == '\n') ? 1 : 0);
        } else {
          if (starts(p, "-}}"))
            end = p + 3 + space_run(p + 3);
          else if (starts(p, "}}"))
            end = p + 2;
        }
        if (end != std::string::npos) {
          Token close;
          close.type = block ? Tok::BlockEnd : Tok::VarEnd;
          set_pos(close, p);
          tokens_.push_back(close);
          line_starting = src_[end - 1] == '\n';
          return end;
        }
      }
      size_t ws = space_run(p);
      if (ws) {
        p += ws;
        continue;
      }
      p = lex_expr_token(p, balance);
    }
  }

  static bool is_digit(char c) { return c >= '0' && c <= '9'; }
  static bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
  static bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

  // Digits with single '_' separators: (\d+_)*\d+ . Returns end or npos.
  size_t digits(size_t p) const {
    if (p >= src_.size() || !is_digit(src_[p])) return std::string::npos;
    while (true) {
      while (p < src_.size() && is_digit(src_[p])) ++p;
      if (p + 1 < src_.size() && src_[p] == '_' && is_digit(src_[p + 1])) {
        ++p;
        continue;
      }
      return p;
    }
  }

  size_t match_float(size_t p) const {
    if (p > 0 && src_[p - 1] == '.') return std::string::npos;
    size_t q = digits(p);
    if (q == std::string::npos) return q;
    size_t frac_end = std::string::npos;
    if (q < src_.size() && src_[q] == '.') frac_end = digits(q + 1);
    size_t base = frac_end != std::string::npos ? frac_end : q;
    if (base < src_.size() && (src_[base] == 'e' || src_[base] == 'E')) {
      size_t e = base + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      size_t ee = digits(e);
      if (ee != std::string::npos) return ee;
    }
    return frac_end;
  }

  size_t lex_expr_token(size_t p, std::vector<char>& balance) {
    Token t;
    set_pos(t, p);
    char c = src_[p];
    if (size_t fe = match_float(p); fe != std::string::npos) {
      std::string text;
      for (size_t k = p; k < fe; ++k)
        if (src_[k] != '_') text.push_back(src_[k]);
      t.type = Tok::Float;
      t.fval = std::strtod(text.c_str(), nullptr);  // strtod: denormals are fine, stod would throw
      tokens_.push_back(std::move(t));
      return fe;
    }
    if (is_digit(c)) {
      size_t q = p;
      int base = 10;
      std::string digits_text;
      char x = p + 1 < src_.size() ? static_cast<char>(tolower(static_cast<unsigned char>(src_[p + 1]))) : 0;
      if (c == '0' && (x == 'b' || x == 'o' || x == 'x')) {
        base = x == 'b' ? 2 : (x == 'o' ? 8 : 16);
        q = p + 2;
        auto ok = [&](char d) {
          d = static_cast<char>(tolower(static_cast<unsigned char>(d)));
          if (base == 2) return d == '0' || d == '1';
          if (base == 8) return d >= '0' && d <= '7';
          return is_digit(d) || (d >= 'a' && d <= 'f');
        };
        while (q < src_.size()) {
          if (src_[q] == '_' && q + 1 < src_.size() && ok(src_[q + 1])) {
            ++q;
            continue;
          }
          if (!ok(src_[q])) break;
          digits_text.push_back(src_[q++]);
        }
        if (digits_text.empty()) error(p, "digits after the base prefix", src_.substr(p, 2));
      } else if (c == '0') {
        q = p + 1;
        digits_text = "0";
        while (q + 1 < src_.size() && src_[q] == '_' && src_[q + 1] == '0') q += 2;
        while (q < src_.size() && src_[q] == '0') ++q;
      } else {
        q = digits(p);
        for (size_t k = p; k < q; ++k)
          if (src_[k] != '_') digits_text.push_back(src_[k]);
      }
      t.type = Tok::Int;
      try {
        size_t used = 0;
        t.ival = static_cast<int64_t>(std::stoll(digits_text, &used, base));
      } catch (const std::exception&) {
        error(p, "an integer that fits 64 bits", digits_text, "E_TPL_UNSUPPORTED");
      }
      tokens_.push_back(std::move(t));
      return q;
    }
    if (is_name_start(c)) {
      size_t q = p;
      while (q < src_.size() && is_name_char(src_[q])) ++q;
      if (q < src_.size() && static_cast<unsigned char>(src_[q]) >= 0x80)
        error(q, "an ASCII identifier", "a non-ASCII identifier character", "E_TPL_UNSUPPORTED");
      t.type = Tok::Name;
      t.text = src_.substr(p, q - p);
      tokens_.push_back(std::move(t));
      return q;
    }
    if (c == '\'' || c == '"') return lex_string(p, std::move(t));
    static const char* two[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : two) {
      if (starts(p, op)) {
        t.type = Tok::Op;
        t.text = op;
        tokens_.push_back(std::move(t));
        return p + 2;
      }
    }
    if (std::strchr("+-/*%~[](){}<>=.:|,;", c) && c != 0) {
      if (c == '(' || c == '[' || c == '{') {
        balance.push_back(c == '(' ? ')' : (c == '[' ? ']' : '}'));
      } else if (c == ')' || c == ']' || c == '}') {
        if (balance.empty()) error(p, "a matching opening bracket", std::string("unexpected '") + c + "'");
        if (balance.back() != c)
          error(p, std::string("'") + balance.back() + "'", std::string("unexpected '") + c + "'");
        balance.pop_back();
      }
      t.type = Tok::Op;
      t.text = std::string(1, c);
      tokens_.push_back(std::move(t));
      return p + 1;
    }
    error(p, "an expression token", std::string("unexpected char '") + c + "'");
  }

  size_t lex_string(size_t p, Token t) {
    char q = src_[p];
    size_t k = p + 1;
    std::string raw;
    while (true) {
      if (k >= src_.size()) error(p, "a closing quote", "end of template");
      char c = src_[k];
      if (c == '\\' && k + 1 < src_.size()) {
        raw.push_back(c);
        raw.push_back(src_[k + 1]);
        k += 2;
        continue;
      }
      if (c == q) break;
      raw.push_back(c);
      ++k;
    }
    t.type = Tok::String;
    t.text = unescape(raw, p);
    tokens_.push_back(std::move(t));
    return k + 1;
  }

  // Python's unicode-escape decoding of a Jinja string literal body.
  std::string unescape(const std::string& raw, size_t off) {
    std::string out;
    for (size_t k = 0; k < raw.size(); ++k) {
      char c = raw[k];
      if (c != '\\' || k + 1 >= raw.size()) {
        out.push_back(c);
        continue;
      }
      char e = raw[++k];
      auto hex = [&](size_t n) {
        uint32_t v = 0;
        for (size_t m = 1; m <= n; ++m) {
          if (k + m >= raw.size() || !isxdigit(static_cast<unsigned char>(raw[k + m])))
            error(off, std::to_string(n) + " hex digits in the escape", "truncated escape");
          v = v * 16 + static_cast<uint32_t>(std::stoi(std::string(1, raw[k + m]), nullptr, 16));
        }
        k += n;
        return v;
      };
      switch (e) {
        case '\n':
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '\'':
          out.push_back('\'');
          break;
        case '"':
          out.push_back('"');
          break;
        case 'a':
          out.push_back('\a');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case 'x':
          append_utf8(out, hex(2));
          break;
        case 'u':
          append_utf8(out, hex(4));
          break;
        case 'U':
          append_utf8(out, hex(8));
          break;
        case 'N':
          error(off, "a supported string escape", "\\N{...}", "E_TPL_UNSUPPORTED");
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = static_cast<uint32_t>(e - '0');
            for (int m = 0; m < 2 && k + 1 < raw.size() && raw[k + 1] >= '0' && raw[k + 1] <= '7'; ++m)
              v = v * 8 + static_cast<uint32_t>(raw[++k] - '0');
            append_utf8(out, v);
          } else if (static_cast<unsigned char>(e) >= 0x80) {
            error(off, "a supported string escape", "a backslash before a non-ASCII character",
                  "E_TPL_UNSUPPORTED");
          } else {
            out.push_back('\\');  // unknown escapes stay as written
            out.push_back(e);
          }
      }
    }
    return out;
  }

  std::string src_;
  std::string origin_;
  LexOptions opt_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

// Jinja2 reads \r\n, \r and \n as line breaks, joins lines with \n and drops one trailing newline.
std::string normalize_newlines(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] == '\r') {
      out.push_back('\n');
      if (k + 1 < s.size() && s[k + 1] == '\n') ++k;
    } else {
      out.push_back(s[k]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

std::vector<Token> lex(const std::string& source, const std::string& origin, const LexOptions& opt) {
  return Lexer(normalize_newlines(source), origin, opt).run();
}

}  // namespace bloomery::jinja
