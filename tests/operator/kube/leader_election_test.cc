// Leader election: the pure core on fabricated time (against an in-memory Lease store with
// optimistic concurrency), then two LeaderElectors against the real test API server.
#include "operator/kube/leader_election.h"

#include <gtest/gtest.h>

#include <atomic>
#include <ctime>
#include <thread>

#include "tests/operator/kube/test_apiserver.h"

namespace kinfer::kube {
namespace {

using std::chrono::milliseconds;
using Clock = LeaderElectionCore::Clock;
using WallClock = LeaderElectionCore::WallClock;
using Action = LeaderElectionCore::Plan::Action;

Clock::time_point T(int64_t ms) { return Clock::time_point(milliseconds(ms)); }

WallClock::time_point Wall0() {
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 10;  // November
  tm.tm_mday = 30;
  tm.tm_hour = 5;
  return WallClock::from_time_t(timegm(&tm));
}
WallClock::time_point W(int64_t ms) { return Wall0() + milliseconds(ms); }

LeaderElectionConfig Config(const std::string& identity) {
  LeaderElectionConfig c;
  c.lease_namespace = "kinfer-system";
  c.lease_name = "kinfer-operator-leader";
  c.identity = identity;
  return c;  // 15 s lease, 10 s renew deadline, 2 s retry
}

json Spec(const json& lease) { return lease.at("spec"); }
std::string Rv(const json& lease) { return lease.at("metadata").at("resourceVersion"); }

// The API server's Lease semantics in memory: create fails when present, update when the
// resourceVersion is stale; each stored write bumps the resourceVersion.
class FakeLeaseStore {
 public:
  std::optional<json> Get() const { return lease_; }
  std::optional<json> Create(json body) {
    if (lease_.has_value()) return std::nullopt;  // AlreadyExists
    return Store(std::move(body));
  }
  std::optional<json> Update(json body) {
    if (!lease_.has_value() || Rv(body) != Rv(*lease_)) return std::nullopt;  // Conflict
    return Store(std::move(body));
  }
  // Runs one attempt of `core` at `now` (wall time follows it): read, decide, write.
  void Attempt(LeaderElectionCore& core, int64_t now_ms) {
    LeaderElectionCore::Plan plan = core.Decide(Get(), T(now_ms), W(now_ms));
    if (plan.action == Action::kNone) return;
    std::optional<json> stored =
        plan.action == Action::kCreate ? Create(plan.body) : Update(plan.body);
    core.OnWriteResult(stored, T(now_ms + 5));
  }
  void Put(json lease) { Store(std::move(lease)); }

 private:
  json Store(json body) {
    body["metadata"]["resourceVersion"] = std::to_string(++rv_);
    lease_ = body;
    return body;
  }
  std::optional<json> lease_;
  int rv_ = 100;
};

json ForeignLease(const std::string& holder, const std::string& renew_time, int64_t transitions,
                  int64_t duration_seconds = 15) {
  return {{"apiVersion", "coordination.k8s.io/v1"},
          {"kind", "Lease"},
          {"metadata", {{"name", "kinfer-operator-leader"}, {"namespace", "kinfer-system"}}},
          {"spec",
           {{"holderIdentity", holder},
            {"leaseDurationSeconds", duration_seconds},
            {"acquireTime", "2000-01-01T00:00:00.000000Z"},
            {"renewTime", renew_time},
            {"leaseTransitions", transitions}}}};
}

TEST(FormatMicroTimeTest, WritesRfc3339WithMicroseconds) {
  EXPECT_EQ(FormatMicroTime(W(0) + std::chrono::microseconds(123456)),
            "2026-11-30T05:00:00.123456Z");
  EXPECT_EQ(FormatMicroTime(W(3723004)), "2026-11-30T06:02:03.004000Z");
}

TEST(ValidateLeaderElectionConfigTest, ChecksClientGoOrdering) {
  EXPECT_TRUE(ValidateLeaderElectionConfig(Config("a")).ok());
  LeaderElectionConfig c = Config("");
  EXPECT_FALSE(ValidateLeaderElectionConfig(c).ok());
  c = Config("a");
  c.lease_duration = c.renew_deadline;
  EXPECT_FALSE(ValidateLeaderElectionConfig(c).ok());
  c = Config("a");
  c.renew_deadline = milliseconds(2400);  // == 1.2 * retry_period
  EXPECT_FALSE(ValidateLeaderElectionConfig(c).ok());
  c.renew_deadline = milliseconds(2401);
  EXPECT_TRUE(ValidateLeaderElectionConfig(c).ok());
}

TEST(LeaderElectionCoreTest, CreatesAnAbsentLeaseAndLeadsOnceWritten) {
  LeaderElectionCore core(Config("a"));
  LeaderElectionCore::Plan plan = core.Decide(std::nullopt, T(0), W(0));
  ASSERT_EQ(plan.action, Action::kCreate);
  EXPECT_FALSE(plan.leading);
  EXPECT_FALSE(core.IsLeader(T(0)));
  EXPECT_EQ(plan.body["apiVersion"], "coordination.k8s.io/v1");
  EXPECT_EQ(plan.body["kind"], "Lease");
  EXPECT_EQ(plan.body["metadata"]["name"], "kinfer-operator-leader");
  EXPECT_EQ(plan.body["metadata"]["namespace"], "kinfer-system");
  EXPECT_FALSE(plan.body["metadata"].contains("resourceVersion"));
  EXPECT_EQ(Spec(plan.body)["holderIdentity"], "a");
  EXPECT_EQ(Spec(plan.body)["leaseDurationSeconds"], 15);
  EXPECT_EQ(Spec(plan.body)["acquireTime"], "2026-11-30T05:00:00.000000Z");
  EXPECT_EQ(Spec(plan.body)["renewTime"], "2026-11-30T05:00:00.000000Z");
  EXPECT_EQ(Spec(plan.body)["leaseTransitions"], 0);

  FakeLeaseStore store;
  std::optional<json> stored = store.Create(plan.body);
  core.OnWriteResult(stored, T(5));
  EXPECT_TRUE(core.leading());
  EXPECT_TRUE(core.IsLeader(T(5)));
  EXPECT_EQ(core.observed_holder(), "a");
}

TEST(LeaderElectionCoreTest, TakesAFreeLeaseAtOnce) {
  FakeLeaseStore store;
  store.Put(ForeignLease("", "2026-11-30T05:00:00.000000Z", 3));
  LeaderElectionCore core(Config("a"));
  LeaderElectionCore::Plan plan = core.Decide(store.Get(), T(0), W(0));
  ASSERT_EQ(plan.action, Action::kUpdate);
  EXPECT_EQ(Rv(plan.body), Rv(*store.Get()));  // optimistic concurrency on the read version
  EXPECT_EQ(Spec(plan.body)["holderIdentity"], "a");
  EXPECT_EQ(Spec(plan.body)["leaseTransitions"], 4);
  EXPECT_EQ(Spec(plan.body)["acquireTime"], "2026-11-30T05:00:00.000000Z");
  core.OnWriteResult(store.Update(plan.body), T(5));
  EXPECT_TRUE(core.leading());
}

TEST(LeaderElectionCoreTest, RespectsAnUnexpiredHolderWhateverItsRenewTimeSays) {
  // The holder's renewTime is from 2000 (a skewed clock): only our own clock since we first saw
  // the record counts.
  FakeLeaseStore store;
  store.Put(ForeignLease("other", "2000-01-01T00:00:00.000000Z", 7));
  LeaderElectionCore core(Config("a"));
  EXPECT_EQ(core.Decide(store.Get(), T(1000), W(1000)).action, Action::kNone);
  EXPECT_EQ(core.observed_holder(), "other");
  EXPECT_EQ(core.Decide(store.Get(), T(15999), W(15999)).action, Action::kNone);
  EXPECT_FALSE(core.leading());

  LeaderElectionCore::Plan plan = core.Decide(store.Get(), T(16000), W(16000));
  ASSERT_EQ(plan.action, Action::kUpdate);  // 15 s without a change: expired
  EXPECT_EQ(Rv(plan.body), Rv(*store.Get()));
  EXPECT_EQ(Spec(plan.body)["leaseTransitions"], 8);
  EXPECT_EQ(Spec(plan.body)["acquireTime"], FormatMicroTime(W(16000)));
  core.OnWriteResult(store.Update(plan.body), T(16005));
  EXPECT_TRUE(core.leading());
  EXPECT_EQ(core.observed_holder(), "a");
}

TEST(LeaderElectionCoreTest, AnObservedRenewalRestartsTheExpiry) {
  FakeLeaseStore store;
  store.Put(ForeignLease("other", "2026-11-30T05:00:00.000000Z", 0));
  LeaderElectionCore core(Config("a"));
  EXPECT_EQ(core.Decide(store.Get(), T(0), W(0)).action, Action::kNone);
  store.Put(ForeignLease("other", "2026-11-30T05:00:10.000000Z", 0));  // renewed
  EXPECT_EQ(core.Decide(store.Get(), T(10000), W(10000)).action, Action::kNone);
  EXPECT_EQ(core.Decide(store.Get(), T(20000), W(20000)).action, Action::kNone);
  EXPECT_EQ(core.Decide(store.Get(), T(24999), W(24999)).action, Action::kNone);
  EXPECT_EQ(core.Decide(store.Get(), T(25000), W(25000)).action, Action::kUpdate);
}

TEST(LeaderElectionCoreTest, ExpiryFollowsTheRecordsLeaseDurationSeconds) {
  FakeLeaseStore store;
  store.Put(ForeignLease("other", "2026-11-30T05:00:00.000000Z", 0, /*duration_seconds=*/5));
  LeaderElectionCore core(Config("a"));  // our own lease_duration is 15 s
  EXPECT_EQ(core.Decide(store.Get(), T(0), W(0)).action, Action::kNone);
  EXPECT_EQ(core.Decide(store.Get(), T(4999), W(4999)).action, Action::kNone);
  EXPECT_EQ(core.Decide(store.Get(), T(5000), W(5000)).action, Action::kUpdate);

  LeaderElectionConfig c = Config("b");
  c.lease_duration = milliseconds(600);  // written as whole seconds, at least 1
  EXPECT_EQ(LeaderElectionCore(c).lease_duration_seconds(), 1);
  c.lease_duration = milliseconds(15001);
  EXPECT_EQ(LeaderElectionCore(c).lease_duration_seconds(), 16);
}

TEST(LeaderElectionCoreTest, RenewsKeepingAcquireTimeAndTransitions) {
  FakeLeaseStore store;
  LeaderElectionCore core(Config("a"));
  store.Attempt(core, 0);
  ASSERT_TRUE(core.leading());
  std::string rv0 = Rv(*store.Get());
  LeaderElectionCore::Plan plan = core.Decide(store.Get(), T(2000), W(2000));
  ASSERT_EQ(plan.action, Action::kUpdate);
  EXPECT_TRUE(plan.leading);
  EXPECT_EQ(Rv(plan.body), rv0);
  EXPECT_EQ(Spec(plan.body)["renewTime"], "2026-11-30T05:00:02.000000Z");
  EXPECT_EQ(Spec(plan.body)["acquireTime"], "2026-11-30T05:00:00.000000Z");
  EXPECT_EQ(Spec(plan.body)["leaseTransitions"], 0);
  core.OnWriteResult(store.Update(plan.body), T(2005));
  EXPECT_NE(Rv(*store.Get()), rv0);
  // The renewal at 2 s moves the deadline to 12 s.
  EXPECT_TRUE(core.IsLeader(T(11999)));
  EXPECT_FALSE(core.IsLeader(T(12000)));
}

TEST(LeaderElectionCoreTest, LosesLeadershipAfterRenewDeadlineOfFailures) {
  FakeLeaseStore store;
  LeaderElectionCore core(Config("a"));
  store.Attempt(core, 0);
  ASSERT_TRUE(core.leading());
  for (int64_t t = 2000; t <= 8000; t += 2000) {  // reads work, every write fails (5xx)
    LeaderElectionCore::Plan plan = core.Decide(store.Get(), T(t), W(t));
    ASSERT_EQ(plan.action, Action::kUpdate);
    core.OnWriteResult(std::nullopt, T(t + 100));
    EXPECT_TRUE(core.leading()) << t;
  }
  core.OnReadFailed(T(9999));  // a read failing counts the same
  EXPECT_TRUE(core.leading());
  EXPECT_TRUE(core.IsLeader(T(9999)));
  EXPECT_FALSE(core.IsLeader(T(10000)));  // before any call notices
  EXPECT_FALSE(core.Tick(T(10000)));
  EXPECT_FALSE(core.leading());
  EXPECT_FALSE(core.ReleaseBody(W(10000)).has_value());
}

TEST(LeaderElectionCoreTest, AFailedWriteAfterTheDeadlineLosesAtOnce) {
  FakeLeaseStore store;
  LeaderElectionCore core(Config("a"));
  store.Attempt(core, 0);
  LeaderElectionCore::Plan plan = core.Decide(store.Get(), T(9000), W(9000));
  ASSERT_EQ(plan.action, Action::kUpdate);
  core.OnWriteResult(std::nullopt, T(10500));  // the write hung past the deadline
  EXPECT_FALSE(core.leading());
}

TEST(LeaderElectionCoreTest, LosesAtOnceWhenAnotherHolderOrNoLeaseIsSeen) {
  FakeLeaseStore store;
  LeaderElectionCore core(Config("a"));
  store.Attempt(core, 0);
  ASSERT_TRUE(core.leading());
  store.Put(ForeignLease("b", "2026-11-30T05:00:01.000000Z", 1));
  EXPECT_EQ(core.Decide(store.Get(), T(2000), W(2000)).action, Action::kNone);
  EXPECT_FALSE(core.leading());
  EXPECT_EQ(core.observed_holder(), "b");

  LeaderElectionCore deleted(Config("c"));
  FakeLeaseStore other;
  other.Attempt(deleted, 0);
  ASSERT_TRUE(deleted.leading());
  EXPECT_EQ(deleted.Decide(std::nullopt, T(2000), W(2000)).action, Action::kNone);
  EXPECT_FALSE(deleted.leading());
}

TEST(LeaderElectionCoreTest, RacingCandidatesGetOneWinnerAndOneConflict) {
  FakeLeaseStore store;
  store.Put(ForeignLease("", "2026-11-30T05:00:00.000000Z", 2));
  LeaderElectionCore a(Config("a"));
  LeaderElectionCore b(Config("b"));
  LeaderElectionCore::Plan pa = a.Decide(store.Get(), T(0), W(0));
  LeaderElectionCore::Plan pb = b.Decide(store.Get(), T(0), W(0));
  ASSERT_EQ(pa.action, Action::kUpdate);
  ASSERT_EQ(pb.action, Action::kUpdate);
  a.OnWriteResult(store.Update(pa.body), T(5));
  std::optional<json> lost = store.Update(pb.body);
  EXPECT_FALSE(lost.has_value());  // 409
  b.OnWriteResult(lost, T(6));
  EXPECT_TRUE(a.leading());
  EXPECT_FALSE(b.leading());
  // b now sees a's record as a change and waits a whole lease duration from here.
  EXPECT_EQ(b.Decide(store.Get(), T(2000), W(2000)).action, Action::kNone);
  EXPECT_EQ(b.observed_holder(), "a");
}

TEST(LeaderElectionCoreTest, TransitionsCountHolderChanges) {
  FakeLeaseStore store;
  LeaderElectionCore a(Config("a"));
  LeaderElectionCore b(Config("b"));
  store.Attempt(a, 0);  // created: 0
  store.Attempt(b, 1000);
  store.Attempt(a, 2000);  // renewed: still 0
  EXPECT_EQ(Spec(*store.Get())["leaseTransitions"], 0);
  // a stops renewing; b saw the last change at 3000 and takes over 15 s later.
  store.Attempt(b, 3000);
  store.Attempt(b, 17999);
  EXPECT_FALSE(b.leading());
  store.Attempt(b, 18000);
  ASSERT_TRUE(b.leading());
  EXPECT_EQ(Spec(*store.Get())["leaseTransitions"], 1);
  EXPECT_EQ(Spec(*store.Get())["acquireTime"], FormatMicroTime(W(18000)));
  store.Attempt(a, 18500);  // a comes back: sees b's record, has lost
  EXPECT_FALSE(a.leading());
  store.Attempt(b, 20000);  // b renews: still 1
  EXPECT_EQ(Spec(*store.Get())["leaseTransitions"], 1);
  // b gives it up; a takes the free lease at its next attempt.
  std::optional<json> release = b.ReleaseBody(W(21000));
  ASSERT_TRUE(release.has_value());
  b.OnReleased(*store.Update(*release), T(21005));
  store.Attempt(a, 21100);
  ASSERT_TRUE(a.leading());
  EXPECT_EQ(Spec(*store.Get())["leaseTransitions"], 2);
  EXPECT_EQ(Spec(*store.Get())["holderIdentity"], "a");
}

TEST(LeaderElectionCoreTest, ReleaseWritesAFreeRecordOnTheLastVersion) {
  FakeLeaseStore store;
  LeaderElectionCore a(Config("a"));
  LeaderElectionCore b(Config("b"));
  EXPECT_FALSE(a.ReleaseBody(W(0)).has_value());  // nothing to release
  store.Attempt(a, 0);
  store.Attempt(a, 2000);
  store.Attempt(b, 2500);
  std::optional<json> body = a.ReleaseBody(W(3000));
  ASSERT_TRUE(body.has_value());
  EXPECT_EQ(Rv(*body), Rv(*store.Get()));
  EXPECT_EQ(Spec(*body)["holderIdentity"], "");
  EXPECT_EQ(Spec(*body)["leaseDurationSeconds"], 1);
  EXPECT_EQ(Spec(*body)["renewTime"], "2026-11-30T05:00:03.000000Z");
  EXPECT_EQ(Spec(*body)["acquireTime"], "2026-11-30T05:00:03.000000Z");
  EXPECT_EQ(Spec(*body)["leaseTransitions"], 0);
  std::optional<json> stored = store.Update(*body);
  ASSERT_TRUE(stored.has_value());
  a.OnReleased(*stored, T(3005));
  EXPECT_FALSE(a.leading());
  EXPECT_EQ(a.observed_holder(), "");
  // b does not wait for any expiry: an empty holder is free.
  LeaderElectionCore::Plan plan = b.Decide(store.Get(), T(3100), W(3100));
  EXPECT_EQ(plan.action, Action::kUpdate);
}

// ---- LeaderElector against the test API server -------------------------------------------------

template <typename F>
bool Eventually(F f, milliseconds timeout) {
  auto end = Clock::now() + timeout;
  while (Clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return f();
}

struct Counters {
  std::atomic<int> started{0};
  std::atomic<int> stopped{0};
};

class LeaderElectorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new testing::TestApiServer(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(server_->ok()) << "the test API server did not start";
    server_->Post("/_test/reset");
    KubeConfig cfg;
    cfg.server = server_->url();
    auto c = Client::Create(cfg);
    ASSERT_TRUE(c.ok());
    client_ = std::move(c).value();
  }

  static LeaderElectionConfig Short(const std::string& identity) {
    LeaderElectionConfig c;
    c.lease_namespace = "default";
    c.lease_name = "kinfer-operator-leader";
    c.identity = identity;
    c.lease_duration = milliseconds(600);  // written as leaseDurationSeconds 1
    c.renew_deadline = milliseconds(400);
    c.retry_period = milliseconds(100);
    return c;
  }
  std::unique_ptr<LeaderElector> Make(LeaderElectionConfig c, Counters* n) {
    EXPECT_TRUE(ValidateLeaderElectionConfig(c).ok());
    return std::make_unique<LeaderElector>(
        client_.get(), std::move(c), [n] { ++n->started; }, [n] { ++n->stopped; });
  }
  json Lease() {
    StatusOr<json> l = client_->Get(resources::kLeases, "default", "kinfer-operator-leader");
    return l.ok() ? *l : json();
  }

  static testing::TestApiServer* server_;
  std::unique_ptr<Client> client_;
};
testing::TestApiServer* LeaderElectorTest::server_ = nullptr;

TEST_F(LeaderElectorTest, ExactlyOneOfTwoCandidatesLeads) {
  Counters na, nb;
  auto a = Make(Short("a"), &na);
  auto b = Make(Short("b"), &nb);
  a->Start();
  b->Start();
  ASSERT_TRUE(Eventually([&] { return a->IsLeader() || b->IsLeader(); }, milliseconds(3000)));
  LeaderElector* leader = a->IsLeader() ? a.get() : b.get();
  LeaderElector* follower = leader == a.get() ? b.get() : a.get();
  // For over a lease duration, the leader keeps renewing and the follower never takes over.
  auto end = Clock::now() + milliseconds(1500);
  while (Clock::now() < end) {
    EXPECT_FALSE(a->IsLeader() && b->IsLeader());
    EXPECT_FALSE(follower->IsLeader());
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_TRUE(leader->IsLeader());
  EXPECT_EQ(na.started + nb.started, 1);
  EXPECT_EQ(na.stopped + nb.stopped, 0);
  EXPECT_EQ(follower->observed_holder(), leader->identity());
  json lease = Lease();
  EXPECT_EQ(lease["spec"]["holderIdentity"], leader->identity());
  EXPECT_EQ(lease["spec"]["leaseDurationSeconds"], 1);
  EXPECT_EQ(lease["spec"]["leaseTransitions"], 0);
  EXPECT_EQ(lease["spec"]["renewTime"].get<std::string>().size(),
            std::string("2026-11-30T05:00:00.123456Z").size());
}

TEST_F(LeaderElectorTest, StopWithReleaseHandsOverBeforeTheLeaseCouldExpire) {
  Counters na, nb;
  LeaderElectionConfig ca = Short("a");
  LeaderElectionConfig cb = Short("b");
  ca.lease_duration = cb.lease_duration = milliseconds(3000);  // expiry would take 3 s
  auto a = Make(ca, &na);
  a->Start();
  ASSERT_TRUE(Eventually([&] { return a->IsLeader(); }, milliseconds(3000)));
  auto b = Make(cb, &nb);
  b->Start();
  ASSERT_TRUE(Eventually([&] { return b->observed_holder() == "a"; }, milliseconds(3000)));

  auto t0 = Clock::now();
  a->Stop(/*release=*/true);
  EXPECT_FALSE(a->IsLeader());
  ASSERT_TRUE(Eventually([&] { return b->IsLeader(); }, milliseconds(3000)));
  EXPECT_LT(Clock::now() - t0, milliseconds(1500));
  EXPECT_EQ(na.started, 1);
  EXPECT_EQ(na.stopped, 0);  // Stop is not a loss
  EXPECT_EQ(nb.started, 1);
  json lease = Lease();
  EXPECT_EQ(lease["spec"]["holderIdentity"], "b");
  EXPECT_EQ(lease["spec"]["leaseTransitions"], 1);
  EXPECT_EQ(lease["spec"]["leaseDurationSeconds"], 3);
}

TEST_F(LeaderElectorTest, StopWithoutReleaseLeavesTheLeaseToExpire) {
  Counters na, nb;
  auto a = Make(Short("a"), &na);
  a->Start();
  ASSERT_TRUE(Eventually([&] { return a->IsLeader(); }, milliseconds(3000)));
  auto b = Make(Short("b"), &nb);
  b->Start();
  ASSERT_TRUE(Eventually([&] { return b->observed_holder() == "a"; }, milliseconds(3000)));

  auto t0 = Clock::now();
  a->Stop(/*release=*/false);
  EXPECT_FALSE(a->IsLeader());
  EXPECT_EQ(Lease()["spec"]["holderIdentity"], "a");
  ASSERT_TRUE(Eventually([&] { return b->IsLeader(); }, milliseconds(4000)));
  // b saw a's last renewal after t0 - retry_period, and waits leaseDurationSeconds (1 s) from then.
  EXPECT_GE(Clock::now() - t0, milliseconds(850));
  EXPECT_EQ(Lease()["spec"]["holderIdentity"], "b");
  EXPECT_EQ(Lease()["spec"]["leaseTransitions"], 1);
}

TEST_F(LeaderElectorTest, FailingRenewalsMakeTheLeaderStopLeading) {
  Counters na, nb;
  auto a = Make(Short("a"), &na);
  a->Start();
  ASSERT_TRUE(Eventually([&] { return a->IsLeader(); }, milliseconds(3000)));
  auto b = Make(Short("b"), &nb);
  b->Start();

  server_->Post("/_test/faults", {{"nextErrors", 100000},
                                  {"nextErrorCode", 500},
                                  {"verbs", {"update"}},
                                  {"resources", {"leases"}}});
  auto t0 = Clock::now();
  ASSERT_TRUE(Eventually([&] { return na.stopped.load() == 1; }, milliseconds(3000)));
  // Within renew_deadline (400 ms) of the last renewal, plus one attempt.
  EXPECT_LT(Clock::now() - t0, milliseconds(1200));
  EXPECT_FALSE(a->IsLeader());
  EXPECT_EQ(nb.started, 0);  // b's writes fail too

  server_->Post("/_test/faults", {{"clear", true}});
  ASSERT_TRUE(Eventually([&] { return b->IsLeader(); }, milliseconds(4000)));
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(na.started, 1);  // a's elector ended with the loss: it never comes back
  EXPECT_EQ(na.stopped, 1);
  EXPECT_FALSE(a->IsLeader());
  EXPECT_EQ(Lease()["spec"]["holderIdentity"], "b");
}

TEST_F(LeaderElectorTest, WaitsOutAForeignHolderWhoseRenewTimeIsStale) {
  json foreign = {{"apiVersion", "coordination.k8s.io/v1"},
                  {"kind", "Lease"},
                  {"metadata", {{"name", "kinfer-operator-leader"}}},
                  {"spec",
                   {{"holderIdentity", "old-pod"},
                    {"leaseDurationSeconds", 1},
                    {"acquireTime", "2000-01-01T00:00:00.000000Z"},
                    {"renewTime", "2000-01-01T00:00:00.000000Z"},
                    {"leaseTransitions", 4}}}};
  ASSERT_TRUE(client_->Create(resources::kLeases, "default", foreign).ok());
  Counters na;
  auto a = Make(Short("a"), &na);
  auto t0 = Clock::now();
  a->Start();
  ASSERT_TRUE(Eventually([&] { return a->observed_holder() == "old-pod"; }, milliseconds(2000)));
  ASSERT_TRUE(Eventually([&] { return a->IsLeader(); }, milliseconds(4000)));
  EXPECT_GE(Clock::now() - t0, milliseconds(1000));  // a whole leaseDurationSeconds on our clock
  json lease = Lease();
  EXPECT_EQ(lease["spec"]["holderIdentity"], "a");
  EXPECT_EQ(lease["spec"]["leaseTransitions"], 5);
}

}  // namespace
}  // namespace kinfer::kube
