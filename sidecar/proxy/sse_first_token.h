// SseFirstTokenDetector: finds the first generated token in an OpenAI-style SSE stream fed in
// arbitrary pieces, so the sidecar's time to first token is the first TOKEN, not the first byte
// (runtimes such as vLLM and kinfer-runtime send an empty `role` chunk before any token).
//
// Contract: Feed() the response body as it arrives. found() turns true at the first event that
//  * is `data: [DONE]`, or carries an `error` object, or
//  * has a choice with a non-empty `delta.content`, `delta.reasoning_content` or `text`, any
//    `delta.tool_calls`, or a non-null `finish_reason`, or
//  * is a Responses API event of type response.output_text.delta, response.output_item.added,
//    response.completed / .incomplete / .failed, or error.
// token() then says whether that event was a token (or a generation's end): false for an error,
// `response.failed` or a `[DONE]` before any token, which end the search without a first token
// (an error is not a time to first token).
// Events may be split anywhere (inside a line, inside "\n\n"); "\r\n" line ends are accepted.
// At most kMaxPending bytes of one unfinished event are kept; an event longer than that counts
// as the first token (memory stays bounded whatever the upstream sends). Non-JSON data lines
// are skipped.
//
// Pure; not thread-safe (one per stream).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kinfer {

class SseFirstTokenDetector {
 public:
  static constexpr size_t kMaxPending = 64 * 1024;

  // Returns found().
  bool Feed(std::string_view bytes);
  bool found() const { return found_; }
  bool token() const { return token_; }

 private:
  enum class Event { kNothing, kToken, kEndWithoutToken };
  Event Classify(std::string_view event) const;
  void Decide(bool token);

  std::string pending_;
  size_t scanned_ = 0;  // bytes of pending_ already searched for an event end
  bool found_ = false;
  bool token_ = false;
};

}  // namespace kinfer
