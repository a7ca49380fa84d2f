#include "runtime/tokenizer/unicode.h"

#include <algorithm>
#include <array>
#include <memory>

#include "common/utf8.h"

namespace kinfer {
namespace unicode {
namespace {

using unicode_internal::kCategoryRangeCount;
using unicode_internal::kCategoryRanges;
using unicode_internal::kWhitespaceRangeCount;
using unicode_internal::kWhitespaceRanges;

constexpr uint32_t kMaxCodepoint = 0x110000;
constexpr uint32_t kBmpSize = 0x10000;

uint16_t LookupFlagsSlow(uint32_t cp) {
  if (cp >= kMaxCodepoint) return 0;
  const auto* begin = kCategoryRanges;
  const auto* end = kCategoryRanges + kCategoryRangeCount;
  // Last range whose start is <= cp.
  const auto* it = std::upper_bound(
      begin, end, cp,
      [](uint32_t v, const unicode_internal::CategoryRange& r) { return v < r.first; });
  uint16_t flags = (it == begin) ? uint16_t{kUndefined} : (it - 1)->flags;
  for (size_t i = 0; i < kWhitespaceRangeCount; ++i) {
    if (cp >= kWhitespaceRanges[i].first && cp <= kWhitespaceRanges[i].last) {
      flags |= kWhitespace;
      break;
    }
  }
  return flags;
}

// Flat table for the Basic Multilingual Plane, where almost all text lives.
const uint16_t* BmpTable() {
  static const std::unique_ptr<uint16_t[]> table = [] {
    auto t = std::make_unique<uint16_t[]>(kBmpSize);
    for (uint32_t cp = 0; cp < kBmpSize; ++cp) t[cp] = LookupFlagsSlow(cp);
    return t;
  }();
  return table.get();
}

struct ByteMap {
  std::array<std::string, 256> byte_to_utf8;
  std::array<uint32_t, 256> byte_to_cp{};
};

const ByteMap& GetByteMap() {
  static const ByteMap map = [] {
    ByteMap m;
    std::array<bool, 256> direct{};
    for (int b = '!'; b <= '~'; ++b) direct[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      m.byte_to_cp[b] = direct[b] ? static_cast<uint32_t>(b) : next++;
      AppendUtf8(m.byte_to_cp[b], &m.byte_to_utf8[b]);
    }
    return m;
  }();
  return map;
}

bool InRange(uint8_t b, uint8_t lo, uint8_t hi) { return b >= lo && b <= hi; }

}  // namespace

uint16_t CodepointFlags(uint32_t cp) {
  if (cp < kBmpSize) return BmpTable()[cp];
  return LookupFlagsSlow(cp);
}

const char* TableVersion() { return unicode_internal::kUnicodeVersion; }

void AppendUtf8(uint32_t cp, std::string* out) { utf8::Append(cp, out); }

namespace {

// Examines the sequence starting at s[i]. Returns its status: 1 = complete (len set),
// 0 = truncated by the end of input (len = bytes present), -1 = ill-formed (len = maximal
// ill-formed subpart). `cp` is set for complete sequences.
int ExamineSequence(std::string_view s, size_t i, size_t* len, uint32_t* cp) {
  const uint8_t b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    *len = 1;
    *cp = b0;
    return 1;
  }
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (InRange(b0, 0xC2, 0xDF)) {
    need = 2;
  } else if (InRange(b0, 0xE0, 0xEF)) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (InRange(b0, 0xF0, 0xF4)) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    *len = 1;
    return -1;
  }
  uint32_t value = b0 & (need == 2 ? 0x1F : need == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < need; ++k) {
    if (i + k >= s.size()) {
      *len = k;
      return 0;
    }
    const uint8_t b = static_cast<uint8_t>(s[i + k]);
    const bool ok = (k == 1) ? InRange(b, lo, hi) : InRange(b, 0x80, 0xBF);
    if (!ok) {
      *len = k;
      return -1;
    }
    value = (value << 6) | (b & 0x3F);
  }
  *len = need;
  *cp = value;
  return 1;
}

}  // namespace

void DecodeUtf8(std::string_view s, std::vector<uint32_t>* cpts,
                std::vector<uint32_t>* byte_offsets) {
  cpts->clear();
  byte_offsets->clear();
  cpts->reserve(s.size());
  byte_offsets->reserve(s.size() + 1);
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 0;
    uint32_t cp = 0;
    if (ExamineSequence(s, i, &len, &cp) != 1) {
      cp = 0xFFFD;
      len = 1;
    }
    cpts->push_back(cp);
    byte_offsets->push_back(static_cast<uint32_t>(i));
    i += len;
  }
  byte_offsets->push_back(static_cast<uint32_t>(s.size()));
}

Utf8Scan ScanUtf8(std::string_view s) {
  Utf8Scan scan;
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 0;
    uint32_t cp = 0;
    const int status = ExamineSequence(s, i, &len, &cp);
    if (status == 1) {
      i += len;
      continue;
    }
    scan.valid_len = i;
    if (status == 0) {
      scan.pending_len = len;
    } else {
      scan.invalid_len = len;
    }
    return scan;
  }
  scan.valid_len = s.size();
  return scan;
}

std::string SanitizeUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  while (!s.empty()) {
    const Utf8Scan scan = ScanUtf8(s);
    out.append(s.substr(0, scan.valid_len));
    const size_t bad = scan.invalid_len + scan.pending_len;
    if (bad == 0) break;
    out.append("\xEF\xBF\xBD");
    s.remove_prefix(scan.valid_len + bad);
  }
  return out;
}

const std::string& ByteToUnicode(uint8_t b) { return GetByteMap().byte_to_utf8[b]; }

int UnicodeToByte(uint32_t cp) {
  // The mapping is the identity for printable Latin-1 and 256.. for the rest.
  static const std::array<int16_t, 324> inverse = [] {
    std::array<int16_t, 324> inv;
    inv.fill(-1);
    const ByteMap& m = GetByteMap();
    for (int b = 0; b < 256; ++b) inv[m.byte_to_cp[b]] = static_cast<int16_t>(b);
    return inv;
  }();
  return cp < inverse.size() ? inverse[cp] : -1;
}

}  // namespace unicode

bool IsValidUtf8(std::string_view s) {
  const unicode::Utf8Scan scan = unicode::ScanUtf8(s);
  return scan.valid_len == s.size();
}

}  // namespace kinfer
