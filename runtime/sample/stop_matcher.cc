#include "runtime/sample/stop_matcher.h"

#include <algorithm>

namespace kinfer {
namespace {

// Where the trailing incomplete UTF-8 sequence of s[0, end) begins, or `end` when s[0, end) ends on
// a character boundary. Bytes that are not valid UTF-8 lead bytes are passed through, not held
// forever.
size_t CompleteUtf8Prefix(std::string_view s, size_t end) {
  // Look back at most 3 bytes for a lead byte.
  for (size_t back = 1; back <= 3 && back <= end; ++back) {
    const auto b = static_cast<unsigned char>(s[end - back]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = 0;
    if ((b & 0xE0) == 0xC0) {
      need = 2;
    } else if ((b & 0xF0) == 0xE0) {
      need = 3;
    } else if ((b & 0xF8) == 0xF0) {
      need = 4;
    } else {
      return end;  // ASCII or an invalid byte: nothing to wait for
    }
    return back < need ? end - back : end;
  }
  return end;
}

}  // namespace

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops) {
    if (s.empty()) continue;
    max_stop_len_ = std::max(max_stop_len_, s.size());
    stops_.push_back(std::move(s));
  }
}

size_t StopMatcher::HeldPrefixLength() const {
  const std::string_view h(held_);
  size_t best = 0;
  for (const auto& s : stops_) {
    const size_t longest = std::min(h.size(), s.size() - 1);
    for (size_t len = longest; len > best; --len) {
      if (h.substr(h.size() - len) == std::string_view(s).substr(0, len)) {
        best = len;
        break;
      }
    }
  }
  return best;
}

std::string StopMatcher::Push(std::string_view text, bool* stopped, bool may_stop) {
  if (stopped_) {
    *stopped = true;
    return std::string();
  }
  held_.append(text);

  // Earliest start of any complete stop string. Only the tail can contain a new match (what was
  // held before could not contain a complete one), but held_ is short, so search all of it.
  size_t first = std::string::npos;
  if (may_stop) {
    for (const auto& s : stops_) first = std::min(first, held_.find(s));
  }
  if (first != std::string::npos) {
    stopped_ = true;
    *stopped = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }

  *stopped = false;
  size_t cut = held_.size() - HeldPrefixLength();
  cut = CompleteUtf8Prefix(held_, cut);
  std::string out = held_.substr(0, cut);
  held_.erase(0, cut);
  return out;
}

std::string StopMatcher::Flush() {
  if (stopped_) return std::string();
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace kinfer
