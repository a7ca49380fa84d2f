#include "runtime/tokenizer/jinja_lexer.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "runtime/tokenizer/unicode.h"

namespace kinfer::jinja {
namespace {

// Python's str.isspace(): White_Space plus the ASCII information separators.
bool IsPySpace(uint32_t cp) {
  return (cp >= 0x1C && cp <= 0x1F) || (unicode::CodepointFlags(cp) & unicode::kWhitespace);
}

// Length of the whitespace code point starting at s[i], or 0.
size_t SpaceAt(const std::string& s, size_t i) {
  const uint8_t b = static_cast<uint8_t>(s[i]);
  if (b < 0x80) return IsPySpace(b) ? 1 : 0;
  const size_t len = std::min(unicode::Utf8SequenceLength(b), s.size() - i);
  std::vector<uint32_t> cpts;
  std::vector<uint32_t> offs;
  unicode::DecodeUtf8(std::string_view(s).substr(i, len), &cpts, &offs);
  return (cpts.size() == 1 && IsPySpace(cpts[0])) ? len : 0;
}

// Python str.rstrip() on UTF-8.
void RStrip(std::string* s) {
  size_t end = s->size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<uint8_t>((*s)[start]) & 0xC0) == 0x80) --start;
    if (SpaceAt(*s, start) != end - start) break;
    end = start;
  }
  s->resize(end);
}

std::string Normalize(const std::string& src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out.push_back(src[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  Lexer(std::string src, const LexOptions& opt) : s_(std::move(src)), opt_(opt) {}

  StatusOr<std::vector<Token>> Run() {
    bool line_starting = true;  // the previous tag ended a line (or this is the start)
    while (pos_ < s_.size()) {
      const size_t open = FindOpen(pos_);
      std::string text = s_.substr(pos_, open - pos_);
      if (open == s_.size()) {
        Emit(TokenKind::kText, std::move(text), pos_);
        pos_ = open;
        break;
      }
      const char kind = s_[open + 1];  // '{', '%' or '#'
      const char mod = open + 2 < s_.size() ? s_[open + 2] : '\0';
      if (mod == '-') {
        RStrip(&text);
      } else if (mod != '+' && opt_.lstrip_blocks && kind != '{') {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if (l_pos > 0 || line_starting) {
          bool all_space = true;
          for (size_t i = l_pos; i < text.size(); ++i) {
            const uint8_t b = static_cast<uint8_t>(text[i]);
            if (b >= 0x80 || b == '\n' || !IsPySpace(b)) all_space = false;
          }
          if (all_space) text.resize(l_pos);
        }
      }
      Emit(TokenKind::kText, std::move(text), pos_);
      pos_ = open + 2 + ((mod == '-' || mod == '+') ? 1 : 0);

      char end_mod = '\0';
      if (kind == '#') {
        const size_t close = s_.find("#}", pos_);
        if (close == std::string::npos) return Error(open, "unterminated comment");
        end_mod = (close > pos_ && (s_[close - 1] == '-' || s_[close - 1] == '+')) ? s_[close - 1] : '\0';
        pos_ = close + 2;
      } else {
        Emit(kind == '{' ? TokenKind::kVarBegin : TokenKind::kBlockBegin, kind == '{' ? "{{" : "{%", open);
        KINFER_RETURN_IF_ERROR(LexTag(kind == '{' ? '}' : '%', open, &end_mod));
      }
      if (end_mod == '-') {
        while (pos_ < s_.size()) {
          const size_t n = SpaceAt(s_, pos_);
          if (n == 0) break;
          pos_ += n;
        }
      } else if (end_mod != '+' && opt_.trim_blocks && kind != '{' && pos_ < s_.size() && s_[pos_] == '\n') {
        ++pos_;
      }
      line_starting = pos_ > 0 && s_[pos_ - 1] == '\n';
    }
    Emit(TokenKind::kEof, "", s_.size());
    return std::move(tokens_);
  }

 private:
  size_t FindOpen(size_t from) const {
    for (size_t i = from; i + 1 < s_.size(); ++i) {
      if (s_[i] == '{' && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    }
    return s_.size();
  }

  void Emit(TokenKind kind, std::string text, size_t at) {
    if (kind == TokenKind::kText && text.empty()) return;
    Token t{kind, std::move(text), 1, 1};
    LineCol(at, &t.line, &t.col);
    tokens_.push_back(std::move(t));
  }

  void LineCol(size_t at, int* line, int* col) const {
    int l = 1, c = 1;
    for (size_t i = 0; i < at && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++l;
        c = 1;
      } else {
        ++c;
      }
    }
    *line = l;
    *col = c;
  }

  Status Error(size_t at, const std::string& what) const {
    int line, col;
    LineCol(at, &line, &col);
    return InvalidArgument("chat template line " + std::to_string(line) + ", column " + std::to_string(col) +
                           ": " + what);
  }

  // Lexes expression tokens until the closer ("}}" or "%}", optionally preceded by - or +).
  Status LexTag(char closer, size_t open, char* end_mod) {
    static const char* const kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                       ">", "=", "(", ")", "[", "]", "{", "}", ",", ".", ":", "|"};
    while (true) {
      while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
      if (pos_ >= s_.size()) return Error(open, closer == '}' ? "unterminated '{{'" : "unterminated '{%'");
      const char c = s_[pos_];
      // Closer, with an optional whitespace modifier.
      for (char m : {'-', '+', '\0'}) {
        const size_t at = pos_ + (m ? 1 : 0);
        if ((m == '\0' || c == m) && at + 1 < s_.size() + 0 && s_[at] == closer && s_[at + 1] == '}') {
          if (closer == '}' && m == '\0' && !tokens_.empty() && Depth() > 0) break;  // "}}" closing a dict
          Emit(closer == '}' ? TokenKind::kVarEnd : TokenKind::kBlockEnd, closer == '}' ? "}}" : "%}", pos_);
          *end_mod = m;
          pos_ = at + 2;
          return Status::Ok();
        }
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        const size_t start = pos_;
        while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
        Emit(TokenKind::kName, s_.substr(start, pos_ - start), start);
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        const size_t start = pos_;
        bool is_float = false;
        while (pos_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
        if (pos_ + 1 < s_.size() && s_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(s_[pos_ + 1]))) {
          is_float = true;
          ++pos_;
          while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
        }
        // Exponent: "1e20", "2.5E-3".
        if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
          size_t k = pos_ + 1;
          if (k < s_.size() && (s_[k] == '+' || s_[k] == '-')) ++k;
          if (k < s_.size() && std::isdigit(static_cast<unsigned char>(s_[k]))) {
            is_float = true;
            pos_ = k;
            while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
          }
        }
        std::string num = s_.substr(start, pos_ - start);
        num.erase(std::remove(num.begin(), num.end(), '_'), num.end());
        Emit(is_float ? TokenKind::kFloat : TokenKind::kInt, num, start);
        continue;
      }
      if (c == '\'' || c == '"') {
        KINFER_RETURN_IF_ERROR(LexString());
        continue;
      }
      bool matched = false;
      for (const char* op : kOps) {
        const size_t n = std::strlen(op);
        if (s_.compare(pos_, n, op) == 0) {
          if (op[0] == '(' || op[0] == '[' || op[0] == '{') ++depth_;
          if (op[0] == ')' || op[0] == ']' || op[0] == '}') --depth_;
          Emit(TokenKind::kOp, op, pos_);
          pos_ += n;
          matched = true;
          break;
        }
      }
      if (!matched) return Error(pos_, std::string("unexpected character '") + c + "'");
    }
  }

  int Depth() const { return depth_; }

  // Python-style string literal with jinja2's escape decoding.
  Status LexString() {
    const size_t start = pos_;
    const char quote = s_[pos_++];
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) return Error(start, "unterminated string literal");
      const char c = s_[pos_++];
      if (c == quote) break;
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) return Error(start, "unterminated string literal");
      const char e = s_[pos_++];
      auto hex = [&](int digits) -> bool {
        if (pos_ + digits > s_.size()) return false;
        uint32_t v = 0;
        for (int k = 0; k < digits; ++k) {
          const char h = s_[pos_ + k];
          if (!std::isxdigit(static_cast<unsigned char>(h))) return false;
          v = v * 16 + (std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        if (v > 0x10FFFF) return false;
        pos_ += digits;
        unicode::AppendUtf8(v, &out);
        return true;
      };
      switch (e) {
        case 'n': out.push_back('\n'); break;
        case 't': out.push_back('\t'); break;
        case 'r': out.push_back('\r'); break;
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'v': out.push_back('\v'); break;
        case '\n': break;  // line continuation
        case 'x': if (!hex(2)) return Error(pos_ - 2, "bad \\x escape"); break;
        case 'u': if (!hex(4)) return Error(pos_ - 2, "bad \\u escape"); break;
        case 'U': if (!hex(8)) return Error(pos_ - 2, "bad \\U escape"); break;
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = e - '0';
            for (int k = 0; k < 2 && pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '7'; ++k) {
              v = v * 8 + (s_[pos_++] - '0');
            }
            unicode::AppendUtf8(v, &out);
          } else {
            out.push_back('\\');  // unknown escapes stay as written
            out.push_back(e);
          }
      }
    }
    Emit(TokenKind::kString, std::move(out), start);
    return Status::Ok();
  }

  std::string s_;
  LexOptions opt_;
  size_t pos_ = 0;
  int depth_ = 0;
  std::vector<Token> tokens_;
};

}  // namespace

StatusOr<std::vector<Token>> Lex(const std::string& source, const LexOptions& options) {
  return Lexer(Normalize(source), options).Run();
}

}  // namespace kinfer::jinja
