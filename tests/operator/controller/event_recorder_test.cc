// EventCorrelator (pure): repeats aggregate into one Event, windows and the LRU bound.
#include "operator/controller/event_recorder.h"

#include <gtest/gtest.h>

namespace kinfer::controller {
namespace {

using std::chrono::seconds;

TEST(EventCorrelatorTest, RepeatsPatchTheFirstEvent) {
  EventCorrelator c;
  SteadyTime t0{};
  EventCorrelator::Decision d = c.Observe("k", "a.1", t0);
  EXPECT_TRUE(d.create);
  EXPECT_EQ(d.name, "a.1");
  EXPECT_EQ(d.count, 1);
  d = c.Observe("k", "a.2", t0 + seconds(5));
  EXPECT_FALSE(d.create);
  EXPECT_EQ(d.name, "a.1");
  EXPECT_EQ(d.count, 2);
  d = c.Observe("other", "a.3", t0 + seconds(6));
  EXPECT_TRUE(d.create);
  EXPECT_EQ(d.name, "a.3");
}

TEST(EventCorrelatorTest, ARepeatAfterTheWindowStartsANewEvent) {
  EventCorrelator::Options o;
  o.window = seconds(10);
  EventCorrelator c(o);
  SteadyTime t0{};
  c.Observe("k", "a.1", t0);
  c.Observe("k", "a.2", t0 + seconds(9));  // within: count 2, last seen at 9 s
  EventCorrelator::Decision d = c.Observe("k", "a.3", t0 + seconds(18));
  EXPECT_FALSE(d.create) << "the window runs from the last occurrence";
  d = c.Observe("k", "a.4", t0 + seconds(40));
  EXPECT_TRUE(d.create);
  EXPECT_EQ(d.name, "a.4");
  EXPECT_EQ(d.count, 1);
}

TEST(EventCorrelatorTest, ForgetAndTheLruBound) {
  EventCorrelator::Options o;
  o.max_entries = 2;
  EventCorrelator c(o);
  SteadyTime t0{};
  c.Observe("a", "a.1", t0);
  c.Observe("b", "b.1", t0);
  c.Observe("a", "a.2", t0);  // a is now the most recent
  c.Observe("c", "c.1", t0);  // evicts b
  EXPECT_EQ(c.size(), 2u);
  EXPECT_TRUE(c.Observe("b", "b.2", t0).create);
  EXPECT_FALSE(c.Observe("b", "b.3", t0).create);
  c.Forget("b");
  EXPECT_TRUE(c.Observe("b", "b.4", t0).create);
}

}  // namespace
}  // namespace kinfer::controller
