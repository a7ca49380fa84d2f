// Limits on JSON request bodies that a parser does not enforce itself, shared by the runtime and
// the sidecar.
//
// nlohmann::json parses any nesting depth, but dump() (the sidecar's cache key and body rewrite)
// recurses once per level: a ~200 KB body of 100,000 nested arrays overflowed the sidecar's stack.
// Both HTTP edges therefore refuse bodies nested deeper than kMaxJsonNesting with a 400 before
// parsing. OpenAI request bodies nest a few levels (a tool's JSON schema a few dozen at most).
//
// Pure; thread-safe.
#pragma once

#include <string_view>

namespace kinfer {

inline constexpr int kMaxJsonNesting = 256;

// True when no array or object in `text` lies more than `max_depth` levels deep. Brackets inside
// strings do not count (escapes honoured). Linear in the text; the text need not be valid JSON
// (the parser that follows judges that).
bool JsonNestingWithin(std::string_view text, int max_depth = kMaxJsonNesting);

}  // namespace kinfer
