// FakeSettings: the behaviour knobs of kinfer-fake-upstream, and their two spellings.
//
// A knob is set globally with `POST /control` (a JSON object, merged into the global settings) and
// per request with an `x-fake-*` header, which takes precedence for that request only. The table in
// fake_settings.cc is the one list of knobs; README.md documents them for test writers.
//
// Contract: the parsers validate everything (type and range) and change nothing on error, so a
// typo in a test fails loudly with a 400 naming the knob instead of being ignored.
//
// Pure values and functions; thread-safe (no shared state).
#pragma once

#include <cstdint>

#include <boost/beast/http/fields.hpp>
#include <nlohmann/json.hpp>

#include "common/status.h"

namespace kinfer::fake {

// Knobs that apply to the model endpoints (/v1/chat/completions, /v1/completions).
struct FakeSettings {
  int64_t latency_ms = 0;                // delay before the response header (while in service)
  int64_t status = 200;                  // != 200: reply this status with a JSON error body
  bool hang = false;                     // never answer; held until the client closes
  int64_t chunks = 4;                    // SSE chunks of a stream, and usage.completion_tokens
  int64_t chunk_interval_ms = 0;         // pause between two SSE chunks
  int64_t disconnect_after_chunks = -1;  // close the socket after this many chunks; -1 = never
  bool reset = false;                    // close the connection without any response
};

// Knobs that exist only globally (POST /control).
struct GlobalKnobs {
  FakeSettings settings;
  int64_t fail_first = 0;  // the next K model requests get 503 (Retry-After: 1), then normal
  int64_t capacity = 0;    // requests in service at once; 0 = unlimited
};

// Merges a `POST /control` body into `knobs`. Accepts every FakeSettings knob plus "fail_first"
// and "capacity". Returns INVALID_ARGUMENT (naming the key) for a body that is not an object, an
// unknown key, a wrong type or a value out of range; `knobs` is then left unchanged.
[[nodiscard]] Status MergeControlJson(const nlohmann::json& body, GlobalKnobs& knobs);

// Applies the `x-fake-*` request headers to `settings`. Integers are decimal; booleans are
// 1/0/true/false/yes/no/on/off. Returns INVALID_ARGUMENT naming the header on a bad value;
// `settings` is then left unchanged.
[[nodiscard]] Status ApplyHeaderOverrides(const boost::beast::http::fields& headers,
                                          FakeSettings& settings);

// The knobs as the JSON object that `POST /control` accepts (GET /control returns it).
nlohmann::json ToJson(const GlobalKnobs& knobs);

}  // namespace kinfer::fake
