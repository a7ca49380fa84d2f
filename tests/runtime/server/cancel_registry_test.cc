#include "runtime/server/cancel_registry.h"

#include <gtest/gtest.h>

#include <memory>

#include "runtime/engine/engine.h"

namespace kinfer {
namespace {

TEST(CancelRegistryTest, CancelsEveryLiveStreamOfAnIdAndOnlyThose) {
  CancelRegistry r;
  auto a = std::make_shared<RequestStream>();
  auto b = std::make_shared<RequestStream>();
  auto c = std::make_shared<RequestStream>();
  auto ha = r.Register("req-1", a);
  auto hb = r.Register("req-1", b);
  auto hc = r.Register("req-2", c);
  EXPECT_EQ(r.size(), 2u);
  EXPECT_EQ(r.Cancel("req-1"), 2);
  EXPECT_TRUE(a->cancelled());
  EXPECT_TRUE(b->cancelled());
  EXPECT_FALSE(c->cancelled());
  EXPECT_EQ(r.Cancel("nobody"), 0);
  EXPECT_EQ(r.Cancel("req-1"), 2);  // idempotent while registered
}

TEST(CancelRegistryTest, AReleasedHandleUnregistersAndAnEmptyIdRegistersNothing) {
  CancelRegistry r;
  auto a = std::make_shared<RequestStream>();
  EXPECT_EQ(r.Register("", a), nullptr);
  EXPECT_EQ(r.size(), 0u);
  auto h1 = r.Register("x", a);
  auto h2 = r.Register("x", std::make_shared<RequestStream>());
  h1.reset();
  EXPECT_EQ(r.size(), 1u);
  EXPECT_EQ(r.Cancel("x"), 0);  // h2's stream is gone already: nothing live to cancel
  EXPECT_FALSE(a->cancelled());
  h2.reset();
  EXPECT_EQ(r.size(), 0u);
}

}  // namespace
}  // namespace kinfer
