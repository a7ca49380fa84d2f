// Store (pure) and the Informer's list+watch against the real test API server: events, bookmarks,
// backoff, and convergence after a compaction with dropped watches.
#include "operator/kube/watch.h"

#include <gtest/gtest.h>

#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/operator/kube/log_capture.h"
#include "tests/operator/kube/test_apiserver.h"

namespace kinfer::kube {
namespace {

namespace rs = resources;
using std::chrono::milliseconds;

// A WatchOptions::sleeper that sleeps and records each wait (the informer's thread calls it).
class SleepLog {
 public:
  std::function<void(milliseconds)> Sleeper() {
    return [this](milliseconds d) {
      {
        std::lock_guard<std::mutex> l(mu_);
        taken_.push_back(d);
      }
      std::this_thread::sleep_for(d);
    };
  }
  std::vector<milliseconds> Taken() const {
    std::lock_guard<std::mutex> l(mu_);
    return taken_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<milliseconds> taken_;
};

json Obj(const std::string& ns, const std::string& name, const std::string& rv) {
  return {{"metadata", {{"namespace", ns}, {"name", name}, {"resourceVersion", rv}}}};
}

TEST(StoreTest, ApplyAndReplaceReportDifferences) {
  Store s;
  s.Apply({EventType::kAdded, Obj("a", "x", "1")});
  s.Apply({EventType::kAdded, Obj("a", "y", "2")});
  s.Apply({EventType::kAdded, Obj("b", "z", "3")});
  s.Apply({EventType::kDeleted, Obj("b", "z", "4")});
  EXPECT_EQ(s.Size(), 2u);
  ASSERT_TRUE(s.Get("a", "x").has_value());
  EXPECT_EQ(s.List("a").size(), 2u);
  EXPECT_EQ(s.List("b").size(), 0u);

  std::vector<WatchEvent> diff = s.Replace({Obj("a", "x", "1"), Obj("a", "y", "5"), Obj("c", "w", "6")});
  ASSERT_EQ(diff.size(), 2u);
  EXPECT_EQ(diff[0].type, EventType::kModified);
  EXPECT_EQ(Store::KeyOf(diff[0].object), "a/y");
  EXPECT_EQ(diff[1].type, EventType::kAdded);
  diff = s.Replace({});
  EXPECT_EQ(diff.size(), 3u);
  for (const WatchEvent& e : diff) EXPECT_EQ(e.type, EventType::kDeleted);
  EXPECT_EQ(s.Size(), 0u);
}

class Recorder {
 public:
  void operator()(const WatchEvent& e) {
    std::lock_guard<std::mutex> l(mu_);
    seen_.push_back(std::string(EventTypeName(e.type)) + " " + Store::KeyOf(e.object));
    cv_.notify_all();
  }
  // Waits until `entry` has been seen.
  bool WaitFor(const std::string& entry, milliseconds timeout = milliseconds(5000)) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, timeout, [&] {
      return std::find(seen_.begin(), seen_.end(), entry) != seen_.end();
    });
  }
  std::vector<std::string> seen() {
    std::lock_guard<std::mutex> l(mu_);
    return seen_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> seen_;
};

template <typename F>
bool Eventually(F f, milliseconds timeout = milliseconds(5000)) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return f();
}

class InformerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new testing::TestApiServer({"--bookmark-interval", "0.2"});
  }
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
  static json ConfigMap(const std::string& name, const std::string& v) {
    return {{"apiVersion", "v1"},
            {"kind", "ConfigMap"},
            {"metadata", {{"name", name}}},
            {"data", {{"k", v}}}};
  }
  WatchOptions Options() {
    WatchOptions o;
    o.ns = "default";
    o.initial_backoff = milliseconds(20);
    o.max_backoff = milliseconds(200);
    return o;
  }
  // Backoffs of 10 ms doubling to 40 ms, each recorded in `log` instead of slept.
  WatchOptions BackoffOptions(SleepLog& log) {
    WatchOptions o = Options();
    o.initial_backoff = milliseconds(10);
    o.max_backoff = milliseconds(40);
    o.sleeper = log.Sleeper();
    return o;
  }

  static testing::TestApiServer* server_;
  std::unique_ptr<Client> client_;
};
testing::TestApiServer* InformerTest::server_ = nullptr;

TEST_F(InformerTest, ListsThenWatchesAddedModifiedDeleted) {
  ASSERT_TRUE(client_->Create(rs::kConfigMaps, "default", ConfigMap("before", "1")).ok());
  Recorder rec;
  Informer inf(client_.get(), rs::kConfigMaps, Options(), std::ref(rec));
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(milliseconds(5000)));
  EXPECT_TRUE(rec.WaitFor("ADDED default/before"));

  StatusOr<json> a = client_->Create(rs::kConfigMaps, "default", ConfigMap("a", "1"));
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(rec.WaitFor("ADDED default/a"));
  json upd = *a;
  upd["data"]["k"] = "2";
  ASSERT_TRUE(client_->Update(rs::kConfigMaps, "default", upd).ok());
  EXPECT_TRUE(rec.WaitFor("MODIFIED default/a"));
  ASSERT_TRUE(client_->Delete(rs::kConfigMaps, "default", "before").ok());
  EXPECT_TRUE(rec.WaitFor("DELETED default/before"));

  EXPECT_TRUE(Eventually([&] {
    std::optional<json> cached = inf.store().Get("default", "a");
    return cached.has_value() && (*cached)["data"]["k"] == "2" && inf.store().Size() == 1;
  }));
  // Objects in another namespace stay out.
  ASSERT_TRUE(client_->Create(rs::kConfigMaps, "kube-system", ConfigMap("other", "1")).ok());
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_FALSE(inf.store().Get("kube-system", "other").has_value());
  inf.Stop();
  EXPECT_EQ(inf.stats().lists, 1);
  EXPECT_EQ(inf.stats().relists, 0);
}

TEST_F(InformerTest, BookmarksAdvanceTheResourceVersion) {
  Informer inf(client_.get(), rs::kConfigMaps, Options(), nullptr);
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(milliseconds(5000)));
  // A write elsewhere moves the global resourceVersion; a bookmark brings the watcher up to it.
  json svc = {{"apiVersion", "v1"},
              {"kind", "Service"},
              {"metadata", {{"name", "s"}}},
              {"spec", {{"ports", {{{"port", 80}}}}}}};
  StatusOr<json> created = client_->Create(rs::kServices, "default", svc);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  int64_t want = std::stoll((*created)["metadata"]["resourceVersion"].get<std::string>());
  EXPECT_TRUE(Eventually([&] {
    std::string rv = inf.resource_version();
    return !rv.empty() && std::stoll(rv) >= want;
  })) << inf.resource_version();
  EXPECT_GT(inf.stats().bookmarks, 0);
}

TEST_F(InformerTest, RelistsAfterCompactionWithDroppedWatchAndConverges) {
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(
        client_->Create(rs::kConfigMaps, "default", ConfigMap("cm" + std::to_string(i), "v")).ok());
  }
  Recorder rec;
  Informer inf(client_.get(), rs::kConfigMaps, Options(), std::ref(rec));
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(milliseconds(5000)));
  ASSERT_TRUE(Eventually([&] { return inf.stats().watches >= 1; }));

  // Reconnects fail while the cluster changes and the history is compacted.
  server_->Post("/_test/faults", {{"errorRate", 1.0}, {"errorCode", 500}, {"verbs", {"watch"}}});
  server_->Post("/_test/faults", {{"dropWatches", true}});
  ASSERT_TRUE(client_->Delete(rs::kConfigMaps, "default", "cm0").ok());
  ASSERT_TRUE(client_->Create(rs::kConfigMaps, "default", ConfigMap("new", "v")).ok());
  ASSERT_TRUE(client_->MergePatch(rs::kConfigMaps, "default", "cm1", {{"data", {{"k", "w"}}}}).ok());
  server_->Post("/_test/compact");
  ASSERT_TRUE(Eventually([&] { return inf.stats().stream_errors >= 1; }));
  server_->Post("/_test/faults", {{"clear", true}});

  EXPECT_TRUE(rec.WaitFor("DELETED default/cm0"));
  EXPECT_TRUE(rec.WaitFor("ADDED default/new"));
  EXPECT_TRUE(rec.WaitFor("MODIFIED default/cm1"));
  EXPECT_GE(inf.stats().relists, 1);
  // Converged: the cache equals a fresh list, and later events still arrive.
  StatusOr<json> list = client_->List(rs::kConfigMaps, "default");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(inf.store().Size(), (*list)["items"].size());
  ASSERT_TRUE(client_->Create(rs::kConfigMaps, "default", ConfigMap("after", "v")).ok());
  EXPECT_TRUE(rec.WaitFor("ADDED default/after"));
}

TEST_F(InformerTest, FailedWatchesBackOffExponentially) {
  SleepLog backoffs;
  const WatchOptions o = BackoffOptions(backoffs);
  server_->Post("/_test/faults", {{"nextErrors", 4}, {"nextErrorCode", 503}, {"verbs", {"watch"}}});
  Informer inf(client_.get(), rs::kConfigMaps, o, nullptr);
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(milliseconds(5000)));
  ASSERT_TRUE(Eventually([&] { return inf.stats().watches >= 1; }));
  inf.Stop();
  const std::vector<milliseconds> sleeps = backoffs.Taken();
  ASSERT_GE(sleeps.size(), 4u);
  EXPECT_EQ(sleeps[0], milliseconds(10));
  EXPECT_EQ(sleeps[1], milliseconds(20));
  EXPECT_EQ(sleeps[2], milliseconds(40));
  EXPECT_EQ(sleeps[3], milliseconds(40));
  EXPECT_EQ(inf.stats().stream_errors, 4);
}

// Every watch answered 410 Gone: each relist waits for the backoff, which a successful list does
// not reset (it used to relist at once, thousands of lists a second).
TEST_F(InformerTest, RelistsAfterGoneBackOffExponentially) {
  SleepLog backoffs;
  const WatchOptions o = BackoffOptions(backoffs);
  server_->Post("/_test/faults", {{"errorRate", 1.0}, {"errorCode", 410}, {"verbs", {"watch"}}});
  Informer inf(client_.get(), rs::kConfigMaps, o, nullptr);
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(milliseconds(5000)));
  EXPECT_TRUE(Eventually([&] {
    return backoffs.Taken().size() >= 4;
  }));
  std::this_thread::sleep_for(milliseconds(200));
  inf.Stop();
  server_->Post("/_test/faults", {{"clear", true}});
  const std::vector<milliseconds> sleeps = backoffs.Taken();
  ASSERT_GE(sleeps.size(), 4u);
  EXPECT_EQ(sleeps[0], milliseconds(10));
  EXPECT_EQ(sleeps[1], milliseconds(20));
  EXPECT_EQ(sleeps[2], milliseconds(40));
  EXPECT_EQ(sleeps[3], milliseconds(40));
  // One list per backoff (plus the first): about 5 + 200 ms / 40 ms, far from a tight loop.
  EXPECT_LE(inf.stats().lists, static_cast<int64_t>(sleeps.size()) + 2);
  EXPECT_LE(inf.stats().lists, 20);
}

TEST(FailureLogTest, FirstAndNewMessagesAtOnceALastingOneEvery30s) {
  FailureLog log;
  auto t = FailureLog::Clock::time_point() + std::chrono::seconds(100);
  EXPECT_TRUE(log.ShouldLog("a", "403", t));
  EXPECT_FALSE(log.ShouldLog("a", "403", t + std::chrono::seconds(29)));
  EXPECT_TRUE(log.ShouldLog("b", "403", t)) << "per key";
  EXPECT_TRUE(log.ShouldLog("a", "500", t + std::chrono::seconds(29))) << "a new message";
  EXPECT_FALSE(log.ShouldLog("a", "500", t + std::chrono::seconds(58)));
  EXPECT_TRUE(log.ShouldLog("a", "500", t + std::chrono::seconds(59)));
  log.Clear("a");
  EXPECT_TRUE(log.ShouldLog("a", "500", t + std::chrono::seconds(60))) << "after it ended";
}

// RBAC without list: the informer says so with the server's answer, once while it lasts (it used
// to only count the failures, and the log said nothing while /readyz was 500).
TEST_F(InformerTest, AFailingListIsLoggedOnceWithTheServersAnswer) {
  testing::LogCapture log;
  server_->Post("/_test/faults", {{"errorRate", 1.0}, {"errorCode", 403}, {"verbs", {"list"}}});
  WatchOptions o = Options();
  o.initial_backoff = milliseconds(5);
  o.max_backoff = milliseconds(10);
  Informer inf(client_.get(), rs::kConfigMaps, o, nullptr);
  inf.Start();
  EXPECT_TRUE(Eventually([&] { return inf.stats().stream_errors >= 5; }));
  inf.Stop();
  server_->Post("/_test/faults", {{"clear", true}});
  const std::vector<std::string> warnings =
      log.LinesWith("informer configmaps in default: list failed");
  for (const std::string& line : warnings) {
    EXPECT_NE(line.find("403"), std::string::npos) << line;
    EXPECT_NE(line.find("[warning]"), std::string::npos) << line;
  }
  EXPECT_EQ(warnings.size(), 1u) << ::testing::PrintToString(log.Lines());
}

// A watch that ends cleanly (timeoutSeconds) with nothing delivered, a quiet namespace without
// bookmarks, is watched again at once; it used to back off each time (0.16 s ... 25.7 s).
TEST(InformerCleanEndTest, ACleanEndWithNoEventsWatchesAgainAtOnce) {
  testing::TestApiServer server({"--bookmark-interval", "100"});
  ASSERT_TRUE(server.ok());
  KubeConfig cfg;
  cfg.server = server.url();
  auto c = Client::Create(cfg);
  ASSERT_TRUE(c.ok());
  std::unique_ptr<Client> client = std::move(c).value();
  SleepLog backoffs;
  WatchOptions o;
  o.ns = "default";
  o.timeout_seconds = 1;
  o.sleeper = backoffs.Sleeper();
  Informer inf(client.get(), rs::kConfigMaps, o, nullptr);
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(milliseconds(5000)));
  EXPECT_TRUE(Eventually([&] { return inf.stats().watches >= 3; }, milliseconds(8000)));
  inf.Stop();
  EXPECT_EQ(inf.stats().stream_errors, 0);
  EXPECT_EQ(inf.stats().events + inf.stats().bookmarks, 0);
  const std::vector<milliseconds> sleeps = backoffs.Taken();
  EXPECT_TRUE(sleeps.empty()) << sleeps.size() << " backoffs, first " << sleeps[0].count() << " ms";
}

TEST_F(InformerTest, StopsPromptly) {
  Informer inf(client_.get(), rs::kConfigMaps, Options(), nullptr);
  inf.Start();
  ASSERT_TRUE(inf.WaitForSync(milliseconds(5000)));
  ASSERT_TRUE(Eventually([&] { return inf.stats().watches >= 1; }));
  auto t0 = std::chrono::steady_clock::now();
  inf.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(2000));
}

}  // namespace
}  // namespace kinfer::kube
