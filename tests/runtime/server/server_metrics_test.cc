#include "runtime/server/server_metrics.h"

#include <gtest/gtest.h>

#include <string>

namespace kinfer {
namespace {

std::string Label(FinishReason f, const Status& s = Status::Ok()) { return RequestStatusLabel(f, s); }

TEST(RequestStatusLabelTest, EndsCountByWhoseFaultTheyAre) {
  EXPECT_EQ(Label(FinishReason::kStop), kStatusOk);
  EXPECT_EQ(Label(FinishReason::kLength), kStatusOk);
  EXPECT_EQ(Label(FinishReason::kCancelled), kStatusCancelled);
  // The engine's queue refusing a request it already took is load shedding, as the same refusal
  // at submission is: a 503, not an engine failure.
  EXPECT_EQ(Label(FinishReason::kError, ResourceExhausted("too many waiting requests (256)")), kStatusRejected);
  EXPECT_EQ(Label(FinishReason::kError, Unavailable("the engine is shutting down")), kStatusRejected);
  // The request's own fault, found once queued (the KV cache cannot hold it): a 4xx.
  EXPECT_EQ(Label(FinishReason::kError, OutOfRange("the request needs up to 9000 KV cache positions")),
            kStatusInvalid);
  EXPECT_EQ(Label(FinishReason::kError, InvalidArgument("bad")), kStatusInvalid);
  // Only what fails inside the engine is an error.
  EXPECT_EQ(Label(FinishReason::kError, Internal("the backend failed a step")), kStatusError);
  EXPECT_EQ(Label(FinishReason::kError), kStatusError);  // no reason given
}

}  // namespace
}  // namespace kinfer
