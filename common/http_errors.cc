#include "common/http_errors.h"

#include <nlohmann/json.hpp>

namespace kinfer {

int HttpStatusFor(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kFailedPrecondition:
      return 400;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kResourceExhausted:
    case StatusCode::kUnavailable:
      return 503;
    case StatusCode::kCancelled:
      return 499;
    case StatusCode::kDeadlineExceeded:
      return 504;
    case StatusCode::kUnimplemented:
      return 501;
    case StatusCode::kDataLoss:
    case StatusCode::kInternal:
      return 500;
  }
  return 500;
}

bool IsRetryable(StatusCode code) {
  return code == StatusCode::kResourceExhausted || code == StatusCode::kUnavailable;
}

std::string_view ErrorTypeForHttpStatus(int http_status) {
  if (http_status == 503) return "overloaded_error";
  if (http_status >= 400 && http_status < 500) return "invalid_request_error";
  return "server_error";
}

std::string ErrorBody(int http_status, std::string_view message, std::string_view param,
                      std::string_view code) {
  nlohmann::json err = {
      {"message", std::string(message)},
      {"type", std::string(ErrorTypeForHttpStatus(http_status))},
      {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(std::string(param))},
      {"code", code.empty() ? nlohmann::json(nullptr) : nlohmann::json(std::string(code))},
  };
  nlohmann::json body = {{"error", std::move(err)}};
  // A message may quote client bytes; replace invalid UTF-8 rather than throw.
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string ErrorBodyFor(const Status& status, std::string_view param, std::string_view code) {
  return ErrorBody(HttpStatusFor(status.code()), status.message(), param, code);
}

}  // namespace kinfer
