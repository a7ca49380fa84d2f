// Status and StatusOr<T>: errors as values (leveldb/absl style), used on every hot path.
//
// Thread safety: plain values; a const Status may be read from any thread.
//
// The error kind decides the behaviour at the edges, once (see HttpStatusFor in the servers):
//   kInvalidArgument, kNotFound, kOutOfRange, kFailedPrecondition -> client error (HTTP 4xx)
//   kResourceExhausted, kUnavailable                                -> retryable (429/503 + Retry-After)
//   kDataLoss, kInternal                                            -> fatal for the request (5xx)
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace kinfer {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the caller sent something malformed
  kNotFound,            // a named thing does not exist
  kOutOfRange,          // a value or a length is beyond a limit (context window, body size)
  kFailedPrecondition,  // the system is not in a state to do this (model not loaded)
  kResourceExhausted,   // a quota or a queue is full; retry later
  kUnavailable,         // transiently unavailable; retry later
  kCancelled,           // the caller went away
  kDeadlineExceeded,    // ran out of time
  kDataLoss,            // a file is truncated or corrupt
  kUnimplemented,       // a valid request for something not supported
  kInternal,            // a bug
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message", or "OK".
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context + ": "`.
  Status WithContext(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status ResourceExhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
inline Status DeadlineExceeded(std::string m) {
  return {StatusCode::kDeadlineExceeded, std::move(m)};
}
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Either a T or a non-OK Status. REQUIRES: constructed from a non-OK status when not a value.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : rep_(std::move(status)) {  // NOLINT: implicit by design
    assert(!std::get<Status>(rep_).ok());
  }
  StatusOr(T value) : rep_(std::move(value)) {}  // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(rep_); }
  // OK when holding a value.
  Status status() const { return ok() ? Status() : std::get<Status>(rep_); }

  // REQUIRES: ok().
  T& value() & { return std::get<T>(rep_); }
  const T& value() const& { return std::get<T>(rep_); }
  T&& value() && { return std::get<T>(std::move(rep_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<Status, T> rep_;
};

}  // namespace kinfer

// Propagates a non-OK Status to the caller.
#define KINFER_RETURN_IF_ERROR(expr)            \
  do {                                          \
    ::kinfer::Status _kinfer_st = (expr);       \
    if (!_kinfer_st.ok()) return _kinfer_st;    \
  } while (0)

#define KINFER_CONCAT_INNER(a, b) a##b
#define KINFER_CONCAT(a, b) KINFER_CONCAT_INNER(a, b)
// KINFER_ASSIGN_OR_RETURN(auto x, MakeX()); returns the error status when MakeX() fails.
#define KINFER_ASSIGN_OR_RETURN(lhs, expr) \
  KINFER_ASSIGN_OR_RETURN_IMPL(KINFER_CONCAT(_kinfer_sor_, __LINE__), lhs, expr)
#define KINFER_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
