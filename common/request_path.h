// The path of an HTTP request target as kinfer's servers route it. The runtime routes on it, and
// the sidecar decides on it which requests its policies (rate limits, admission, the breaker,
// degrading, the cache) cover. The two must agree: if the sidecar matched the raw path, a client
// could write a policy path another way ("/v1/chat/completions/", "/v1/chat/%63ompletions") and
// pass the sidecar unchecked while the runtime still served it.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kinfer {

// `raw_path` (the target up to any '?') with its %XX escapes decoded and trailing slashes dropped
// ("/" stays "/"; "/v1/models/" is "/v1/models"). nullopt where a '%' is not followed by two hex
// digits: answer 400.
std::optional<std::string> RoutedPath(std::string_view raw_path);

}  // namespace kinfer
