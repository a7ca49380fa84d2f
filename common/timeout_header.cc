#include "common/timeout_header.h"

#include <charconv>
#include <cmath>
#include <cstdint>

namespace kinfer {

std::optional<std::chrono::milliseconds> ParseTimeoutHeader(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  double scale_ms = 1000;  // plain seconds
  std::string_view num = text;
  if (num.size() > 2 && num.substr(num.size() - 2) == "ms") {
    scale_ms = 1;
    num.remove_suffix(2);
  } else if (!num.empty() && num.back() == 's') {
    num.remove_suffix(1);
  } else if (!num.empty() && num.back() == 'm') {
    scale_ms = 60000;
    num.remove_suffix(1);
  }
  if (num.empty()) return std::nullopt;
  double v = 0;
  auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), v);
  if (ec != std::errc() || end != num.data() + num.size() || !(v > 0) || v * scale_ms > 864e5) {
    return std::nullopt;
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(v * scale_ms)));
}

}  // namespace kinfer
