// Reads a tool-format answer (tool_calls.h) as it is generated, so that a streamed response can
// send each call's name as soon as it is known and its arguments piece by piece, and a direct
// answer's text as it comes, instead of holding the whole answer until it ends:
//   {"tool_calls": [{"name": "f", "arguments": {...}}, ...]}  -> CallStart(0, "f"), Arguments(0,
//   ..)
//   {"response": "text"}                                      -> Content("te"), Content("xt")
//   {"response": {...}}   (tools with response_format)        -> Content("{..."), Content("...}")
//
// The texts it gives are the ones the whole answer reads to (ReadToolAnswer uses this class too):
//   - a call's arguments and a JSON response: the model's JSON value with the whitespace outside
//     strings left out (escapes as the model wrote them);
//   - a string response: the string decoded (escapes resolved; a lone surrogate becomes U+FFFD).
//
// Not a validator: the grammar holds the model to the format, and ReadToolAnswer also parses the
// whole text. Bytes before the answer's kind is known (`{"tool_` ...) are held; text that turns
// out not to be a tool answer gives no deltas (raw() keeps it).
//
// Pure. Thread safety: one instance per choice, used from one thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kinfer {

class ToolAnswerStream {
 public:
  struct Delta {
    enum class Kind { kContent, kCallStart, kArguments };
    Kind kind = Kind::kContent;
    int index = 0;     // the call's index among the named ones (kCallStart, kArguments)
    std::string text;  // kContent: text; kCallStart: the tool's name; kArguments: JSON text
  };
  enum class Answer { kUnknown, kCalls, kResponse, kNotToolFormat };

  // Appends to `out` what `bytes` adds (consecutive deltas of one kind and call merged).
  void Feed(std::string_view bytes, std::vector<Delta>* out);

  Answer answer() const { return answer_; }
  // Calls opened (tool_calls entries), and those that got a name (the deltas' indices).
  int calls() const { return calls_; }
  int named_calls() const { return named_calls_; }
  // True once the top-level object has closed (a whole answer).
  bool complete() const { return complete_; }
  // Everything fed.
  const std::string& raw() const { return raw_; }

 private:
  struct Level {
    char type = '{';         // '{' or '['
    bool expect_key = true;  // '{': the next string is a key
    std::string key;         // '{': the key of the member being read
  };
  enum class Pending { kNone, kArguments, kResponse };
  void Byte(char c, std::vector<Delta>* out);
  void StringByte(char c, std::vector<Delta>* out);
  void EndString(std::vector<Delta>* out);
  void Decoded(uint32_t cp);
  void FlushContent(std::vector<Delta>* out);
  void Emit(Delta::Kind kind, std::string_view text, std::vector<Delta>* out);
  // The member whose value is being read: the top level's or a call's (levels 0..2).
  bool AtTopMember(std::string_view key) const;
  bool AtCallMember(std::string_view key) const;

  std::string raw_;
  std::vector<Level> stack_;
  Answer answer_ = Answer::kUnknown;
  bool complete_ = false;
  int calls_ = 0;        // calls started (tool_calls entries opened)
  int named_calls_ = 0;  // of them, those whose name was read
  bool name_sent_ = false;
  std::string pending_args_;  // arguments read before their call's name (not the grammar's order)

  // The value after the ':' of an "arguments" or "response" member, until its first byte.
  Pending pending_ = Pending::kNone;
  // A captured value (arguments, a JSON response): its bytes are passed on, whitespace outside
  // strings left out, until it ends at capture_depth_.
  bool capturing_ = false;
  Delta::Kind capture_kind_ = Delta::Kind::kArguments;
  size_t capture_depth_ = 0;
  bool response_string_ = false;  // reading the string of {"response": "..."}

  // Strings.
  bool in_string_ = false;
  bool string_is_key_ = false;
  bool escape_ = false;
  int hex_left_ = 0;  // \uXXXX digits still to read
  uint32_t hex_ = 0;
  uint32_t high_surrogate_ = 0;
  std::string decoded_;  // the string being read, decoded (keys, names, a string response)
};

}  // namespace kinfer
