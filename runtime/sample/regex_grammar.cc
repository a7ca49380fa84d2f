#include "runtime/sample/regex_grammar.h"

#include "common/utf8.h"

#include <bitset>
#include <cctype>
#include <string>

namespace kinfer {
namespace {

using Seq = GrammarBuilder::Sequence;
using Sym = GrammarBuilder::Symbol;

// A set of characters: ASCII members one by one, and whether every non-ASCII one is in.
struct CharSet {
  std::bitset<128> ascii;
  bool non_ascii = false;

  void Add(int c) { ascii.set(static_cast<size_t>(c)); }
  void AddRange(int lo, int hi) {
    for (int c = lo; c <= hi; ++c) Add(c);
  }
  void Negate() {
    ascii.flip();
    non_ascii = !non_ascii;
  }
  void Merge(const CharSet& o) {
    ascii |= o.ascii;
    non_ascii |= o.non_ascii;
  }
};

CharSet Digits() {
  CharSet s;
  s.AddRange('0', '9');
  return s;
}
CharSet Word() {
  CharSet s = Digits();
  s.AddRange('a', 'z');
  s.AddRange('A', 'Z');
  s.Add('_');
  return s;
}
CharSet Space() {
  CharSet s;
  for (int c : {' ', '\t', '\n', '\r', '\f', '\v'}) s.Add(c);
  return s;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class RegexCompiler {
 public:
  RegexCompiler(std::string_view p, RegexText mode, GrammarBuilder* b)
      : p_(p), mode_(mode), b_(*b) {}

  StatusOr<int32_t> Run(bool anchored) {
    bool from_start = anchored, to_end = anchored;
    if (!p_.empty() && p_.front() == '^') {
      from_start = true;
      p_.remove_prefix(1);
    }
    if (!p_.empty() && p_.back() == '$' && (p_.size() < 2 || p_[p_.size() - 2] != '\\')) {
      to_end = true;
      p_.remove_suffix(1);
    }
    int32_t body = -1;
    KINFER_RETURN_IF_ERROR(Alternation(&body));
    if (pos_ != p_.size()) return Error("unbalanced ')'");
    Seq s;
    if (!from_start) s.push_back(AnyText());
    s.push_back(GrammarBuilder::Ref(body));
    if (!to_end) s.push_back(AnyText());
    return b_.Rule({s});
  }

 private:
  Status Error(const std::string& what) const {
    return InvalidArgument("regex: " + what + " (at offset " + std::to_string(pos_) + ")");
  }
  bool AtEnd() const { return pos_ >= p_.size(); }
  char Peek() const { return p_[pos_]; }

  Status Alternation(int32_t* rule) {
    std::vector<Seq> alts;
    for (;;) {
      Seq s;
      KINFER_RETURN_IF_ERROR(Concatenation(&s));
      alts.push_back(std::move(s));
      if (AtEnd() || Peek() != '|') break;
      ++pos_;
    }
    *rule = b_.Rule(alts);
    return Status::Ok();
  }

  Status Concatenation(Seq* out) {
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      Sym atom;
      KINFER_RETURN_IF_ERROR(Atom(&atom));
      KINFER_RETURN_IF_ERROR(Quantified(atom, out));
    }
    return Status::Ok();
  }

  Status ReadCount(int* n) {
    if (AtEnd() || !std::isdigit(static_cast<unsigned char>(Peek()))) return Error("a count");
    long v = 0;
    while (!AtEnd() && std::isdigit(static_cast<unsigned char>(Peek()))) {
      v = v * 10 + (Peek() - '0');
      if (v > kMaxRegexRepeat) {
        return Error("a count above " + std::to_string(kMaxRegexRepeat) + " is not supported");
      }
      ++pos_;
    }
    *n = static_cast<int>(v);
    return Status::Ok();
  }

  Status Quantified(const Sym& atom, Seq* out) {
    int min = 1, max = 1;  // max -1: unbounded
    if (!AtEnd()) {
      const char q = Peek();
      if (q == '*' || q == '+' || q == '?') {
        ++pos_;
        min = q == '+' ? 1 : 0;
        max = q == '?' ? 1 : -1;
      } else if (q == '{') {
        ++pos_;
        KINFER_RETURN_IF_ERROR(ReadCount(&min));
        max = min;
        if (!AtEnd() && Peek() == ',') {
          ++pos_;
          max = -1;
          if (!AtEnd() && Peek() != '}') KINFER_RETURN_IF_ERROR(ReadCount(&max));
        }
        if (AtEnd() || Peek() != '}') return Error("'{' without its '}'");
        ++pos_;
        if (max >= 0 && max < min) return Error("{n,m} with m below n");
      }
      if (min != 1 || max != 1) {
        if (!AtEnd() && Peek() == '?') ++pos_;  // lazy: the same texts
        if (!AtEnd() && (Peek() == '*' || Peek() == '+' || Peek() == '?')) {
          return Error("a quantifier after a quantifier");
        }
      }
    }
    for (int i = 0; i < min; ++i) out->push_back(atom);
    if (max < 0) {
      const int32_t loop = b_.NewRule();
      b_.AddAlternative(loop, {});
      b_.AddAlternative(loop, {atom, GrammarBuilder::Ref(loop)});
      out->push_back(GrammarBuilder::Ref(loop));
    } else if (max > min) {
      int32_t next = b_.Rule({{}});
      for (int k = min; k < max; ++k) next = b_.Rule({{}, {atom, GrammarBuilder::Ref(next)}});
      out->push_back(GrammarBuilder::Ref(next));
    }
    return Status::Ok();
  }

  Status Atom(Sym* out) {
    const char c = Peek();
    switch (c) {
      case '(': {
        ++pos_;
        if (!AtEnd() && Peek() == '?') {
          ++pos_;
          if (!AtEnd() && Peek() == ':') {
            ++pos_;
          } else if (!AtEnd() && Peek() == '<' && pos_ + 1 < p_.size() && p_[pos_ + 1] != '=' &&
                     p_[pos_ + 1] != '!') {
            const size_t close = p_.find('>', pos_);
            if (close == std::string_view::npos) return Error("a group name without its '>'");
            pos_ = close + 1;  // a named group: a group
          } else {
            return Error("lookaround is not supported");
          }
        }
        int32_t r = -1;
        KINFER_RETURN_IF_ERROR(Alternation(&r));
        if (AtEnd() || Peek() != ')') return Error("'(' without its ')'");
        ++pos_;
        *out = GrammarBuilder::Ref(r);
        return Status::Ok();
      }
      case '[': {
        CharSet set;
        KINFER_RETURN_IF_ERROR(Class(&set));
        *out = CharSetSym(set);
        return Status::Ok();
      }
      case '.': {
        ++pos_;
        CharSet set;
        set.AddRange(0, 127);
        set.ascii.reset('\n');
        set.ascii.reset('\r');
        set.non_ascii = true;
        *out = CharSetSym(set);
        return Status::Ok();
      }
      case '^':
      case '$':
        return Error(c == '^' ? "'^' is supported only at the pattern's start"
                              : "'$' is supported only at the pattern's end");
      case '*':
      case '+':
      case '?':
      case '{':
        return Error("a quantifier with nothing before it");
      case '\\': {
        ++pos_;
        CharSet set;
        std::string literal;
        KINFER_RETURN_IF_ERROR(Escape(&set, &literal));
        *out = literal.empty() ? CharSetSym(set) : LiteralSym(literal);
        return Status::Ok();
      }
      default: {
        // One character: its whole UTF-8 sequence.
        size_t len = 1;
        const auto u = static_cast<unsigned char>(c);
        if (u >= 0xF0) {
          len = 4;
        } else if (u >= 0xE0) {
          len = 3;
        } else if (u >= 0xC0) {
          len = 2;
        }
        if (pos_ + len > p_.size()) return Error("a broken UTF-8 character");
        const std::string literal(p_.substr(pos_, len));
        pos_ += len;
        *out = LiteralSym(literal);
        return Status::Ok();
      }
    }
  }

  // After a backslash: a class (\d ...) into *set, or one character's UTF-8 into *literal.
  Status Escape(CharSet* set, std::string* literal) {
    if (AtEnd()) return Error("a '\\' at the end");
    const char e = p_[pos_++];
    switch (e) {
      case 'd':
        *set = Digits();
        return Status::Ok();
      case 'D':
        *set = Digits();
        set->Negate();
        return Status::Ok();
      case 'w':
        *set = Word();
        return Status::Ok();
      case 'W':
        *set = Word();
        set->Negate();
        return Status::Ok();
      case 's':
        *set = Space();
        return Status::Ok();
      case 'S':
        *set = Space();
        set->Negate();
        return Status::Ok();
      case 'n':
        literal->assign(1, '\n');
        return Status::Ok();
      case 't':
        literal->assign(1, '\t');
        return Status::Ok();
      case 'r':
        literal->assign(1, '\r');
        return Status::Ok();
      case 'f':
        literal->assign(1, '\f');
        return Status::Ok();
      case 'v':
        literal->assign(1, '\v');
        return Status::Ok();
      case '0':
        literal->assign(1, '\0');
        return Status::Ok();
      case 'x':
      case 'u': {
        const size_t n = e == 'x' ? 2 : 4;
        if (pos_ + n > p_.size()) return Error("a short \\" + std::string(1, e) + " escape");
        uint32_t cp = 0;
        for (size_t i = 0; i < n; ++i) {
          const int h = HexValue(p_[pos_ + i]);
          if (h < 0) return Error("a bad \\" + std::string(1, e) + " escape");
          cp = cp * 16 + static_cast<uint32_t>(h);
        }
        pos_ += n;
        if (cp >= 0xD800 && cp <= 0xDFFF) return Error("a surrogate escape is not supported");
        utf8::Append(cp, literal);
        return Status::Ok();
      }
      case 'b':
      case 'B':
        return Error("word boundaries are not supported");
      default:
        if (std::isdigit(static_cast<unsigned char>(e))) {
          return Error("backreferences are not supported");
        }
        if (std::isalnum(static_cast<unsigned char>(e))) {
          return Error("unknown escape '\\" + std::string(1, e) + "'");
        }
        *literal = std::string(1, e);  // escaped punctuation: itself
        return Status::Ok();
    }
  }

  // [...] after the '['.
  Status Class(CharSet* out) {
    ++pos_;
    bool negate = false;
    if (!AtEnd() && Peek() == '^') {
      negate = true;
      ++pos_;
    }
    bool first = true;
    for (;;) {
      if (AtEnd()) return Error("'[' without its ']'");
      if (Peek() == ']' && !first) {
        ++pos_;
        break;
      }
      first = false;
      int lo = -1;
      KINFER_RETURN_IF_ERROR(ClassMember(out, &lo));
      if (lo < 0) continue;  // a class escape such as \d
      if (pos_ + 1 < p_.size() && Peek() == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        int hi = -1;
        CharSet ignored;
        KINFER_RETURN_IF_ERROR(ClassMember(&ignored, &hi));
        if (hi < 0) return Error("a range ending in a class");
        if (hi < lo) return Error("a range out of order");
        out->AddRange(lo, hi);
      } else {
        out->Add(lo);
      }
    }
    if (negate) out->Negate();
    return Status::Ok();
  }

  // One member of a class: an ASCII character into *c, or a class escape merged into *set.
  Status ClassMember(CharSet* set, int* c) {
    const char ch = Peek();
    if (static_cast<unsigned char>(ch) >= 0x80) {
      return Error("non-ASCII characters in a class are not supported");
    }
    if (ch != '\\') {
      ++pos_;
      *c = static_cast<unsigned char>(ch);
      return Status::Ok();
    }
    ++pos_;
    CharSet esc;
    std::string literal;
    if (!AtEnd() && Peek() == 'b') {  // [\b] is backspace
      ++pos_;
      *c = '\b';
      return Status::Ok();
    }
    KINFER_RETURN_IF_ERROR(Escape(&esc, &literal));
    if (literal.empty()) {
      set->Merge(esc);
      return Status::Ok();
    }
    if (literal.size() != 1 || static_cast<unsigned char>(literal[0]) >= 0x80) {
      return Error("non-ASCII characters in a class are not supported");
    }
    *c = static_cast<unsigned char>(literal[0]);
    return Status::Ok();
  }

  // The characters of `text` as the output writes them.
  Sym LiteralSym(const std::string& text) {
    Seq s;
    for (size_t i = 0; i < text.size(); ++i) {
      const auto c = static_cast<unsigned char>(text[i]);
      if (c < 0x80) {
        AppendChar(c, &s);
      } else {
        s.push_back(b_.Byte(c));
      }
    }
    return GrammarBuilder::Ref(b_.Rule({s}));
  }

  // One ASCII character as the output writes it: itself, or (in a JSON string) its escape.
  void AppendChar(unsigned char c, Seq* s) {
    if (mode_ == RegexText::kRaw || (c >= 0x20 && c != '"' && c != '\\')) {
      s->push_back(b_.Byte(c));
      return;
    }
    b_.AppendLiteral(JsonEscape(c), s);
  }

  static std::string JsonEscape(unsigned char c) {
    switch (c) {
      case '"':
        return "\\\"";
      case '\\':
        return "\\\\";
      case '\n':
        return "\\n";
      case '\t':
        return "\\t";
      case '\r':
        return "\\r";
      case '\b':
        return "\\b";
      case '\f':
        return "\\f";
      default: {
        static constexpr char kHex[] = "0123456789abcdef";
        return std::string("\\u00") + kHex[c >> 4] + kHex[c & 15];
      }
    }
  }

  Sym CharSetSym(const CharSet& set) {
    std::vector<Seq> alts;
    Grammar::ByteSet plain{};
    bool any_plain = false;
    for (int c = 0; c < 128; ++c) {
      if (!set.ascii.test(static_cast<size_t>(c))) continue;
      const bool raw = mode_ == RegexText::kRaw || (c >= 0x20 && c != '"' && c != '\\');
      if (raw) {
        plain[static_cast<size_t>(c) >> 6] |= uint64_t{1} << (c & 63);
        any_plain = true;
      } else {
        alts.push_back(b_.Literal(JsonEscape(static_cast<unsigned char>(c))));
      }
    }
    if (any_plain) alts.push_back({b_.Class(plain)});
    if (set.non_ascii) {
      const Sym cont = b_.Range({{0x80, 0xBF}});
      alts.push_back({b_.Range({{0xC2, 0xDF}}), cont});
      alts.push_back({b_.Byte(0xE0), b_.Range({{0xA0, 0xBF}}), cont});
      alts.push_back({b_.Range({{0xE1, 0xEC}, {0xEE, 0xEF}}), cont, cont});
      alts.push_back({b_.Byte(0xED), b_.Range({{0x80, 0x9F}}), cont});
      alts.push_back({b_.Byte(0xF0), b_.Range({{0x90, 0xBF}}), cont, cont});
      alts.push_back({b_.Range({{0xF1, 0xF3}}), cont, cont, cont});
      alts.push_back({b_.Byte(0xF4), b_.Range({{0x80, 0x8F}}), cont, cont});
    }
    return GrammarBuilder::Ref(b_.Rule(alts));  // an empty set: a rule that matches nothing
  }

  // Any text (the unanchored ends of a search pattern).
  Sym AnyText() {
    CharSet all;
    all.AddRange(0, 127);
    all.non_ascii = true;
    const Sym ch = CharSetSym(all);
    const int32_t loop = b_.NewRule();
    b_.AddAlternative(loop, {});
    b_.AddAlternative(loop, {ch, GrammarBuilder::Ref(loop)});
    return GrammarBuilder::Ref(loop);
  }

  std::string_view p_;
  size_t pos_ = 0;
  RegexText mode_;
  GrammarBuilder& b_;
};

}  // namespace

StatusOr<int32_t> RegexRule(std::string_view pattern, RegexText mode, bool anchored,
                            GrammarBuilder* b) {
  return RegexCompiler(pattern, mode, b).Run(anchored);
}

}  // namespace kinfer
