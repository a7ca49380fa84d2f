// StopMatcher: streams generated text through a set of stop strings.
//
// Thread safety: none; one per request, used by the thread that decodes that request.
//
// Push() returns only text that can never become part of a stop string: a suffix of what has been
// pushed that could still grow into a stop string is held back, and so is an incomplete UTF-8
// sequence at the end (tokens often end in the middle of a multi-byte character), so the returned
// text never splits a character. When a stop string completes, the text before it is returned,
// *stopped is set, and the stop string and everything after it are dropped.
//
//   pushed:   "Hello, Wor"  "ld!\nUser:"  ...          stops = {"\nUser:"}
//   returned: "Hello, Wor"  "ld!"         (stopped)
//
// When several stop strings match, the one that starts earliest wins (everything from the first
// stop string on is dropped). Empty stop strings are ignored. Matching is on bytes: no
// normalisation.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace kinfer {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends `text` and returns what is now safe to emit (possibly empty). Sets *stopped to true
  // when a stop string has completed (now or earlier), false otherwise. After a stop, returns ""
  // for every further push. With `may_stop` false (vLLM's min_tokens not yet reached) no stop
  // string ends the text now; a stop's beginning is still held, so one that completes in a later
  // push (with may_stop) does. REQUIRES: stopped != nullptr.
  std::string Push(std::string_view text, bool* stopped, bool may_stop = true);

  // End of generation: returns the held-back text (which may end in an incomplete UTF-8 sequence if
  // the model produced one) and empties the buffer. Returns "" after a stop.
  std::string Flush();

  bool stopped() const { return stopped_; }

 private:
  // Length of the longest suffix of held_ that is a proper prefix of some stop string.
  size_t HeldPrefixLength() const;

  std::vector<std::string> stops_;
  size_t max_stop_len_ = 0;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace kinfer
