#include "common/request_path.h"

namespace kinfer {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::optional<std::string> RoutedPath(std::string_view raw_path) {
  std::string out;
  out.reserve(raw_path.size());
  for (size_t i = 0; i < raw_path.size(); ++i) {
    if (raw_path[i] != '%') {
      out.push_back(raw_path[i]);
      continue;
    }
    if (i + 2 >= raw_path.size()) return std::nullopt;
    const int hi = HexValue(raw_path[i + 1]);
    const int lo = HexValue(raw_path[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

}  // namespace kinfer
