#include "runtime/sample/json_recognizer.h"

namespace kinfer {
namespace {

constexpr std::string_view kLiterals[] = {"true", "false", "null"};

bool IsWhitespace(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool IsDigit(uint8_t c) { return c >= '0' && c <= '9'; }
bool IsHex(uint8_t c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

}  // namespace

bool JsonRecognizer::Feed(uint8_t c) {
  switch (lex_) {
    case Lex::kString:
      if (c == '"') {
        lex_ = Lex::kNone;
        if (key_) {
          expect_ = Expect::kColon;
        } else {
          EndValue();
        }
        return true;
      }
      if (c == '\\') {
        lex_ = Lex::kEscape;
        return true;
      }
      return c >= 0x20;  // control characters must be escaped
    case Lex::kEscape:
      if (c == 'u') {
        lex_ = Lex::kUnicode;
        hex_left_ = 4;
        return true;
      }
      lex_ = Lex::kString;
      return c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' ||
             c == 't';
    case Lex::kUnicode:
      if (!IsHex(c)) return false;
      if (--hex_left_ == 0) lex_ = Lex::kString;
      return true;
    case Lex::kLiteral: {
      const std::string_view lit = kLiterals[literal_];
      if (c != static_cast<uint8_t>(lit[lit_pos_])) return false;
      if (++lit_pos_ == lit.size()) {
        lex_ = Lex::kNone;
        EndValue();
      }
      return true;
    }
    case Lex::kNumber:
      return FeedNumber(c);
    case Lex::kNone:
      break;
  }
  return FeedStructural(c);
}

bool JsonRecognizer::FeedNumber(uint8_t c) {
  switch (num_) {
    case Num::kMinus:
      if (c == '0') {
        num_ = Num::kZero;
        return true;
      }
      if (IsDigit(c)) {
        num_ = Num::kInt;
        return true;
      }
      return false;
    case Num::kZero:
    case Num::kInt:
      if (num_ == Num::kInt && IsDigit(c)) return true;
      if (c == '.') {
        num_ = Num::kDot;
        return true;
      }
      if (c == 'e' || c == 'E') {
        num_ = Num::kExpMark;
        return true;
      }
      break;  // the number may end here
    case Num::kDot:
      if (!IsDigit(c)) return false;
      num_ = Num::kFrac;
      return true;
    case Num::kFrac:
      if (IsDigit(c)) return true;
      if (c == 'e' || c == 'E') {
        num_ = Num::kExpMark;
        return true;
      }
      break;
    case Num::kExpMark:
      if (c == '+' || c == '-') {
        num_ = Num::kExpSign;
        return true;
      }
      if (!IsDigit(c)) return false;
      num_ = Num::kExpDigits;
      return true;
    case Num::kExpSign:
      if (!IsDigit(c)) return false;
      num_ = Num::kExpDigits;
      return true;
    case Num::kExpDigits:
      if (IsDigit(c)) return true;
      break;
  }
  // A complete number followed by something else: it ended; `c` belongs to the container.
  lex_ = Lex::kNone;
  EndValue();
  return FeedStructural(c);
}

bool JsonRecognizer::FeedStructural(uint8_t c) {
  if (expect_ == Expect::kDone) return false;
  if (IsWhitespace(c)) {
    if (ws_run_ >= kMaxWhitespaceRun) return false;
    ++ws_run_;
    return true;
  }
  ws_run_ = 0;
  switch (expect_) {
    case Expect::kRoot:
      return c == '{' && Open(true);
    case Expect::kKeyOrObjectEnd:
      if (c == '}') return Close(true);
      [[fallthrough]];
    case Expect::kKey:
      if (c != '"') return false;
      lex_ = Lex::kString;
      key_ = true;
      return true;
    case Expect::kColon:
      if (c != ':') return false;
      expect_ = Expect::kValue;
      return true;
    case Expect::kValueOrArrayEnd:
      if (c == ']') return Close(false);
      [[fallthrough]];
    case Expect::kValue:
      return StartValue(c);
    case Expect::kCommaOrEnd:
      if (c == ',') {
        expect_ = InObject() ? Expect::kKey : Expect::kValue;
        return true;
      }
      if (c == '}' || c == ']') return Close(c == '}');
      return false;
    case Expect::kDone:
      return false;
  }
  return false;
}

bool JsonRecognizer::StartValue(uint8_t c) {
  switch (c) {
    case '{':
      return Open(true);
    case '[':
      return Open(false);
    case '"':
      lex_ = Lex::kString;
      key_ = false;
      return true;
    case '-':
      lex_ = Lex::kNumber;
      num_ = Num::kMinus;
      return true;
    case 't':
    case 'f':
    case 'n':
      lex_ = Lex::kLiteral;
      literal_ = c == 't' ? 0 : c == 'f' ? 1 : 2;
      lit_pos_ = 1;
      return true;
    default:
      if (!IsDigit(c)) return false;
      lex_ = Lex::kNumber;
      num_ = c == '0' ? Num::kZero : Num::kInt;
      return true;
  }
}

bool JsonRecognizer::Open(bool object) {
  if (depth_ >= kMaxDepth) return false;
  const uint64_t bit = uint64_t{1} << depth_;
  stack_ = object ? (stack_ | bit) : (stack_ & ~bit);
  ++depth_;
  expect_ = object ? Expect::kKeyOrObjectEnd : Expect::kValueOrArrayEnd;
  return true;
}

bool JsonRecognizer::Close(bool object) {
  if (depth_ == 0 || InObject() != object) return false;
  --depth_;
  EndValue();
  return true;
}

void JsonRecognizer::EndValue() { expect_ = depth_ == 0 ? Expect::kDone : Expect::kCommaOrEnd; }

}  // namespace kinfer
