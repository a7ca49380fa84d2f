#include "runtime/server/tool_answer_stream.h"

#include <utility>

#include "common/utf8.h"

namespace kinfer {
namespace {

constexpr uint32_t kReplacement = 0xFFFD;

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The length of the longest prefix of `s` that does not end inside a UTF-8 sequence.
size_t WholeUtf8Prefix(const std::string& s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto b = static_cast<unsigned char>(s[n - back]);
    if ((b & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    size_t len = 1;
    if ((b & 0xE0) == 0xC0)
      len = 2;
    else if ((b & 0xF0) == 0xE0)
      len = 3;
    else if ((b & 0xF8) == 0xF0)
      len = 4;
    return len > back ? n - back : n;
  }
  return n;
}

}  // namespace

void ToolAnswerStream::Feed(std::string_view bytes, std::vector<Delta>* out) {
  raw_.append(bytes);
  for (char c : bytes) {
    if (complete_ || answer_ == Answer::kNotToolFormat) break;
    Byte(c, out);
  }
  FlushContent(out);
}

bool ToolAnswerStream::AtTopMember(std::string_view key) const {
  return !stack_.empty() && !stack_[0].expect_key && stack_[0].key == key;
}

bool ToolAnswerStream::AtCallMember(std::string_view key) const {
  return stack_.size() >= 3 && AtTopMember("tool_calls") && stack_[1].type == '[' &&
         stack_[2].type == '{' && !stack_[2].expect_key && stack_[2].key == key;
}

void ToolAnswerStream::Emit(Delta::Kind kind, std::string_view text, std::vector<Delta>* out) {
  // Calls are numbered as their names come (a call with none never starts: the indices a
  // stream sends stay 0, 1, ...); the arguments belong to the named call being read.
  const int index =
      kind == Delta::Kind::kContent ? 0 : named_calls_ - (kind == Delta::Kind::kCallStart ? 0 : 1);
  if (kind == Delta::Kind::kArguments && !name_sent_) {
    pending_args_.append(text);
    return;
  }
  if (kind != Delta::Kind::kCallStart && !out->empty() && out->back().kind == kind &&
      out->back().index == index) {
    out->back().text.append(text);
    return;
  }
  out->push_back(Delta{kind, index, std::string(text)});
}

void ToolAnswerStream::FlushContent(std::vector<Delta>* out) {
  if (!response_string_ || string_is_key_ || decoded_.empty()) return;
  // A string's bytes may stop inside a UTF-8 sequence: the rest comes with the next piece.
  const size_t whole = in_string_ ? WholeUtf8Prefix(decoded_) : decoded_.size();
  if (whole == 0) return;
  Emit(Delta::Kind::kContent, std::string_view(decoded_).substr(0, whole), out);
  decoded_.erase(0, whole);
}

void ToolAnswerStream::Decoded(uint32_t cp) {
  if (high_surrogate_ != 0) {
    if (cp >= 0xDC00 && cp <= 0xDFFF) {
      utf8::Append(0x10000 + ((high_surrogate_ - 0xD800) << 10) + (cp - 0xDC00), &decoded_);
      high_surrogate_ = 0;
      return;
    }
    utf8::Append(kReplacement, &decoded_);
    high_surrogate_ = 0;
  }
  if (cp >= 0xD800 && cp <= 0xDBFF) {
    high_surrogate_ = cp;
  } else {
    utf8::Append(cp >= 0xDC00 && cp <= 0xDFFF ? kReplacement : cp, &decoded_);
  }
}

void ToolAnswerStream::EndString(std::vector<Delta>* out) {
  in_string_ = false;
  if (high_surrogate_ != 0) {
    utf8::Append(kReplacement, &decoded_);
    high_surrogate_ = 0;
  }
  if (capturing_ && stack_.size() == capture_depth_) capturing_ = false;  // a string value
  if (string_is_key_) {
    stack_.back().key = std::move(decoded_);
    decoded_.clear();
    return;
  }
  if (response_string_) {
    FlushContent(out);
    response_string_ = false;
    return;
  }
  if (stack_.size() == 3 && AtCallMember("name") && !name_sent_) {
    Emit(Delta::Kind::kCallStart, decoded_, out);
    ++named_calls_;
    name_sent_ = true;
    if (!pending_args_.empty()) {
      std::string args = std::move(pending_args_);
      pending_args_.clear();
      Emit(Delta::Kind::kArguments, args, out);
    }
  }
  decoded_.clear();
}

void ToolAnswerStream::StringByte(char c, std::vector<Delta>* out) {
  if (hex_left_ > 0) {
    const int v = HexValue(c);
    hex_ = hex_ * 16 + static_cast<uint32_t>(v < 0 ? 0 : v);
    if (--hex_left_ == 0) Decoded(hex_);
    return;
  }
  if (escape_) {
    escape_ = false;
    switch (c) {
      case 'b':
        Decoded('\b');
        return;
      case 'f':
        Decoded('\f');
        return;
      case 'n':
        Decoded('\n');
        return;
      case 'r':
        Decoded('\r');
        return;
      case 't':
        Decoded('\t');
        return;
      case 'u':
        hex_left_ = 4;
        hex_ = 0;
        return;
      default:
        Decoded(static_cast<unsigned char>(c));
        return;  // \" \\ \/
    }
  }
  if (c == '\\') {
    escape_ = true;
    return;
  }
  if (c == '"') {
    EndString(out);
    return;
  }
  if (high_surrogate_ != 0) {
    utf8::Append(kReplacement, &decoded_);
    high_surrogate_ = 0;
  }
  decoded_.push_back(c);
}

void ToolAnswerStream::Byte(char c, std::vector<Delta>* out) {
  if (in_string_) {
    if (capturing_) Emit(capture_kind_, std::string_view(&c, 1), out);
    StringByte(c, out);
    return;
  }
  if (IsSpace(c)) return;
  if (stack_.empty()) {
    if (c != '{') {
      answer_ = Answer::kNotToolFormat;
      return;
    }
    stack_.push_back(Level{'{', true, {}});
    return;
  }
  const bool delimiter = c == ',' || c == '}' || c == ']' || c == ':';
  // A number or literal ends at the delimiter after it.
  if (capturing_ && stack_.size() == capture_depth_ && delimiter) capturing_ = false;
  // A delimiter where the value should be: there is none (not JSON; nothing to stream).
  if (pending_ != Pending::kNone && delimiter) pending_ = Pending::kNone;
  if (pending_ != Pending::kNone) {
    // The first byte of the value of "arguments" or "response".
    if (pending_ == Pending::kResponse && c == '"') {
      response_string_ = true;
    } else {
      capturing_ = true;
      capture_depth_ = stack_.size();
      capture_kind_ =
          pending_ == Pending::kArguments ? Delta::Kind::kArguments : Delta::Kind::kContent;
    }
    pending_ = Pending::kNone;
  }
  if (capturing_) Emit(capture_kind_, std::string_view(&c, 1), out);
  Level& top = stack_.back();
  switch (c) {
    case '{':
    case '[':
      stack_.push_back(Level{c, true, {}});
      if (c == '{' && stack_.size() == 3 && stack_[1].type == '[' && AtTopMember("tool_calls")) {
        ++calls_;
        name_sent_ = false;
        pending_args_.clear();
      }
      return;
    case '}':
    case ']':
      stack_.pop_back();
      if (stack_.empty()) {
        complete_ = true;
        return;
      }
      if (capturing_ && stack_.size() == capture_depth_) capturing_ = false;  // a container value
      return;
    case ':':
      if (top.type != '{' || !top.expect_key) return;
      top.expect_key = false;
      if (stack_.size() == 1) {
        if (top.key == "tool_calls") {
          answer_ = Answer::kCalls;
        } else if (top.key == "response") {
          answer_ = Answer::kResponse;
          pending_ = Pending::kResponse;
        } else {
          answer_ = Answer::kNotToolFormat;
        }
      } else if (stack_.size() == 3 && AtCallMember("arguments")) {
        pending_ = Pending::kArguments;
      }
      return;
    case ',':
      if (top.type == '{') {
        top.expect_key = true;
        top.key.clear();
      }
      return;
    case '"':
      in_string_ = true;
      escape_ = false;
      hex_left_ = 0;
      high_surrogate_ = 0;
      decoded_.clear();
      string_is_key_ = top.type == '{' && top.expect_key;
      return;
    default:
      return;
  }
}

}  // namespace kinfer
