// Small helpers the request parsers share (openai_protocol.cc, tool_calls.cc, responses_api.cc):
// a 400 that names its field, and a body field read as absent when null.
#pragma once

#include <string>
#include <utility>

#include "common/status.h"
#include "runtime/server/openai_protocol.h"

namespace kinfer::request_fields {

// INVALID_ARGUMENT with `message`, naming `param` in *d (the JSON error's "param").
inline Status Invalid(ErrorDetail* d, std::string param, std::string message) {
  d->param = std::move(param);
  return InvalidArgument(std::move(message));
}

// obj[name], or nullptr when absent or null (OpenAI's clients send null for "not set"). `Json`:
// nlohmann::json or nlohmann::ordered_json. REQUIRES: obj is an object.
template <typename Json>
const Json* Field(const Json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

}  // namespace kinfer::request_fields
