#include "common/http_errors.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace kinfer {
namespace {

TEST(HttpErrorsTest, MapsEveryStatusCodeOnce) {
  EXPECT_EQ(HttpStatusFor(StatusCode::kOk), 200);
  EXPECT_EQ(HttpStatusFor(StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusFor(StatusCode::kOutOfRange), 400);
  EXPECT_EQ(HttpStatusFor(StatusCode::kFailedPrecondition), 400);
  EXPECT_EQ(HttpStatusFor(StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusFor(StatusCode::kResourceExhausted), 503);
  EXPECT_EQ(HttpStatusFor(StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusFor(StatusCode::kCancelled), 499);
  EXPECT_EQ(HttpStatusFor(StatusCode::kDeadlineExceeded), 504);
  EXPECT_EQ(HttpStatusFor(StatusCode::kUnimplemented), 501);
  EXPECT_EQ(HttpStatusFor(StatusCode::kInternal), 500);
  EXPECT_EQ(HttpStatusFor(StatusCode::kDataLoss), 500);
  EXPECT_TRUE(IsRetryable(StatusCode::kResourceExhausted));
  EXPECT_FALSE(IsRetryable(StatusCode::kInvalidArgument));
}

TEST(HttpErrorsTest, BodyHasOpenAiShape) {
  auto j = nlohmann::json::parse(ErrorBody(404, "no such model", "model", "model_not_found"));
  EXPECT_EQ(j["error"]["message"], "no such model");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "model");
  EXPECT_EQ(j["error"]["code"], "model_not_found");

  auto k = nlohmann::json::parse(ErrorBodyFor(ResourceExhausted("queue full")));
  EXPECT_EQ(k["error"]["type"], "overloaded_error");
  EXPECT_TRUE(k["error"]["param"].is_null());
  EXPECT_TRUE(k["error"]["code"].is_null());
}

TEST(HttpErrorsTest, InvalidUtf8InMessageStillGivesValidJson) {
  std::string body = ErrorBody(400, std::string("bad \xff byte"));
  EXPECT_NO_THROW(nlohmann::json::parse(body));
}

}  // namespace
}  // namespace kinfer
