// Tests of MetricsCollector over real loopback sockets: its failure paths (a closed port, a server
// that never answers, bad addresses, pods that are not ready, a non-200 answer) and the bounds on
// scrapes in flight (max_in_flight, a low file limit), against FakePages, a small HTTP server in
// this file. The success path against real sidecars is tests/python/test_metrics_collector.py;
// 100-2000 pods are bench/scrape (docs/benchmarks.md).
#include "operator/autoscale/metrics_collector.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace kinfer::autoscale {
namespace {

// Binds `fd` to a free loopback port and returns the port.
int BindLoopback(int fd) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  return ntohs(addr.sin_port);
}

// A loopback socket bound to a free port; listening (never accepting) when `listen_too`.
class Socket {
 public:
  explicit Socket(bool listen_too) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    port_ = BindLoopback(fd_);
    if (listen_too) {
      EXPECT_EQ(::listen(fd_, 16), 0);
    }
  }
  ~Socket() { Close(); }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// An HTTP server on a loopback port, on its own thread: reads each request's head, holds the
// connection `hold` and answers `status` with `body`, then closes. Counts the connections open
// at once (most_at_once) and the answers given.
class FakePages {
 public:
  FakePages(std::string body, std::chrono::milliseconds hold, int status = 200)
      : body_(std::move(body)), hold_(hold), status_(status) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    port_ = BindLoopback(fd_);
    EXPECT_EQ(::listen(fd_, 1024), 0);
    thread_ = std::thread([this] { Run(); });
  }
  ~FakePages() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  int most_at_once() const { return most_at_once_.load(); }
  int answered() const { return answered_.load(); }

 private:
  struct Conn {
    int fd;
    std::string head;
    std::chrono::steady_clock::time_point read_at{};
    bool read = false;
  };

  void Run() {
    std::vector<Conn> conns;
    while (!stop_) {
      std::vector<pollfd> fds{{fd_, POLLIN, 0}};
      for (const Conn& c : conns) fds.push_back({c.fd, static_cast<short>(c.read ? 0 : POLLIN), 0});
      ::poll(fds.data(), fds.size(), 1);
      for (;;) {  // accept what is waiting (EMFILE: try again on the next turn)
        int c = ::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK);
        if (c < 0) break;
        conns.push_back({c, {}});
      }
      most_at_once_.store(std::max(most_at_once_.load(), static_cast<int>(conns.size())));
      const auto now = std::chrono::steady_clock::now();
      for (size_t i = 0; i < conns.size();) {
        Conn& c = conns[i];
        char buf[4096];
        ssize_t n = 0;
        while (!c.read && (n = ::recv(c.fd, buf, sizeof buf, 0)) > 0) {
          c.head.append(buf, static_cast<size_t>(n));
          if (c.head.find("\r\n\r\n") != std::string::npos) {
            c.read = true;
            c.read_at = now;
          }
        }
        const bool gone = !c.read && n == 0;
        if (c.read && now - c.read_at >= hold_) {
          std::string answer =
              "HTTP/1.1 " + std::to_string(status_) +
              " X\r\nContent-Type: text/plain\r\nContent-Length: " + std::to_string(body_.size()) +
              "\r\nConnection: close\r\n\r\n" + body_;
          // Counted before it is sent: the client may read it, and its test check the count,
          // before this thread runs again.
          answered_.fetch_add(1);
          ::send(c.fd, answer.data(), answer.size(), MSG_NOSIGNAL);  // fits the socket buffer
        }
        if (gone || (c.read && now - c.read_at >= hold_)) {
          ::close(c.fd);
          conns.erase(conns.begin() + static_cast<long>(i));
        } else {
          ++i;
        }
      }
    }
    for (const Conn& c : conns) ::close(c.fd);
  }

  std::string body_;
  std::chrono::milliseconds hold_;
  int status_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> most_at_once_{0};
  std::atomic<int> answered_{0};
  std::thread thread_;
};

std::vector<PodEndpoint> Pods(const std::string& address, int n) {
  std::vector<PodEndpoint> pods;
  for (int i = 0; i < n; ++i) pods.push_back({"pod-" + std::to_string(i), address, true});
  return pods;
}

constexpr const char* kPage =
    "# TYPE kinfer_sidecar_in_flight gauge\nkinfer_sidecar_in_flight 3\n"
    "kinfer_sidecar_queue_depth{class=\"standard\"} 5\n";

TEST(MetricsCollectorTest, FailedScrapesGiveNoMetrics) {
  Socket closed(false);
  std::string closed_address = closed.address();
  closed.Close();
  Socket silent(true);  // accepts connections (backlog) but never answers
  CollectorOptions options;
  options.timeout = std::chrono::milliseconds(300);
  MetricsCollector collector(options);
  std::vector<PodEndpoint> pods = {{"closed", closed_address, true},
                                   {"silent", silent.address(), true},
                                   {"starting", "127.0.0.1:1", false}};
  auto start = std::chrono::steady_clock::now();
  std::vector<PodScrape> scrapes = ScrapeAll(pods, options);
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(scrapes.size(), 3u);
  EXPECT_EQ(scrapes[0].status.code(), StatusCode::kUnavailable) << scrapes[0].status.ToString();
  EXPECT_EQ(scrapes[1].status.code(), StatusCode::kDeadlineExceeded)
      << scrapes[1].status.ToString();
  EXPECT_EQ(scrapes[2].status.code(), StatusCode::kFailedPrecondition);
  EXPECT_LT(took, std::chrono::seconds(5));

  std::vector<PodSample> samples = collector.Collect(pods);
  ASSERT_EQ(samples.size(), 3u);
  for (const PodSample& s : samples) EXPECT_FALSE(s.has_metrics) << s.pod;
  EXPECT_TRUE(samples[0].ready);
  EXPECT_FALSE(samples[2].ready);
  EXPECT_EQ(samples[1].pod, "silent");
}

TEST(MetricsCollectorTest, BadAddressIsAnErrorNotAThrow) {
  std::vector<PodScrape> scrapes = ScrapeAll({{"p", "not a host:port", true}}, {});
  ASSERT_EQ(scrapes.size(), 1u);
  EXPECT_FALSE(scrapes[0].status.ok());
}

TEST(MetricsCollectorTest, BadAddressesAreInvalidArgumentsWithoutALookup) {
  auto start = std::chrono::steady_clock::now();
  std::vector<PodScrape> scrapes = ScrapeAll({{"a", "not a host:port", true},
                                              {"b", "10.0.0.1", true},
                                              {"c", "[::1]", true},
                                              {"d", "127.0.0.1:0", true},
                                              {"e", "127.0.0.1:99999", true},
                                              {"f", "::1:80", true},
                                              {"g", "host/x:80", true}},
                                             {});
  ASSERT_EQ(scrapes.size(), 7u);
  for (const PodScrape& s : scrapes) {
    EXPECT_EQ(s.status.code(), StatusCode::kInvalidArgument)
        << s.pod << ": " << s.status.ToString();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(100));
  // A bracketed IPv6 literal is an address: scraped (nothing listens there), not refused.
  std::vector<PodScrape> v6 = ScrapeAll({{"v6", "[::1]:1", true}}, {});
  EXPECT_EQ(v6[0].status.code(), StatusCode::kUnavailable) << v6[0].status.ToString();
}

TEST(MetricsCollectorTest, PagesComeBackInOrderAndNon200IsUnavailable) {
  FakePages a("page a", std::chrono::milliseconds(0));
  FakePages b("page b", std::chrono::milliseconds(0));
  FakePages down("overloaded", std::chrono::milliseconds(0), 503);
  std::vector<PodScrape> scrapes =
      ScrapeAll({{"a", a.address(), true},
                 {"b", b.address(), true},
                 {"down", down.address(), true},
                 {"by-name", "localhost:" + std::to_string(a.port()), true}},
                {});
  ASSERT_EQ(scrapes.size(), 4u);
  EXPECT_TRUE(scrapes[0].status.ok()) << scrapes[0].status.ToString();
  EXPECT_EQ(scrapes[0].body, "page a");
  EXPECT_EQ(scrapes[1].body, "page b");
  EXPECT_EQ(scrapes[2].status.code(), StatusCode::kUnavailable);
  EXPECT_NE(scrapes[2].status.message().find("HTTP 503: overloaded"), std::string::npos)
      << scrapes[2].status.ToString();
  EXPECT_TRUE(scrapes[2].body.empty());
  EXPECT_TRUE(scrapes[3].status.ok()) << scrapes[3].status.ToString();
  EXPECT_EQ(scrapes[3].body, "page a");
  EXPECT_EQ(scrapes[3].pod, "by-name");
}

TEST(MetricsCollectorTest, MaxInFlightBoundsTheScrapesAtOnceAndAllFinish) {
  FakePages pages(kPage, std::chrono::milliseconds(20));
  CollectorOptions options;
  options.max_in_flight = 4;
  std::vector<PodScrape> scrapes = ScrapeAll(Pods(pages.address(), 24), options);
  ASSERT_EQ(scrapes.size(), 24u);
  for (const PodScrape& s : scrapes)
    EXPECT_TRUE(s.status.ok()) << s.pod << ": " << s.status.ToString();
  EXPECT_LE(pages.most_at_once(), 4);
  EXPECT_EQ(pages.answered(), 24);
}

TEST(MetricsCollectorTest, AllAtOnceWithoutABound) {
  FakePages pages(kPage, std::chrono::milliseconds(300));
  auto start = std::chrono::steady_clock::now();
  std::vector<PodScrape> scrapes = ScrapeAll(Pods(pages.address(), 50), {});
  auto took = std::chrono::steady_clock::now() - start;
  for (const PodScrape& s : scrapes)
    EXPECT_TRUE(s.status.ok()) << s.pod << ": " << s.status.ToString();
  EXPECT_EQ(pages.most_at_once(), 50);
  EXPECT_LT(took, std::chrono::seconds(2));  // one hold, not 50 (15 s)
}

// Each scrape's timeout counts from its own start: two silent pods one after the other take two
// timeouts, and both time out.
TEST(MetricsCollectorTest, AWaitingScrapeGetsItsWholeTimeout) {
  Socket silent(true);
  CollectorOptions options;
  options.timeout = std::chrono::milliseconds(200);
  options.max_in_flight = 1;
  auto start = std::chrono::steady_clock::now();
  std::vector<PodScrape> scrapes = ScrapeAll(Pods(silent.address(), 2), options);
  auto took = std::chrono::steady_clock::now() - start;
  for (const PodScrape& s : scrapes) {
    EXPECT_EQ(s.status.code(), StatusCode::kDeadlineExceeded) << s.status.ToString();
  }
  EXPECT_GE(took, std::chrono::milliseconds(390));
  EXPECT_LT(took, std::chrono::seconds(2));
}

// With the soft file limit barely above what is open, 300 pods are scraped a few at a time, none
// failing with EMFILE (before the bound, every scrape past the limit failed to connect).
TEST(MetricsCollectorTest, ALowFileLimitQueuesScrapesInsteadOfFailingThem) {
  FakePages pages(kPage, std::chrono::milliseconds(50));
  int open = 0;  // descriptors open now (the limit bounds how many more can be opened)
  for (int fd = 0; fd < 4096; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1) ++open;
  }
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(open + 64);  // 64 more: the server's and the scrapes'
  ASSERT_LE(low.rlim_cur, saved.rlim_max);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<PodScrape> scrapes = ScrapeAll(Pods(pages.address(), 300), {});
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  int ok = 0;
  std::string first_error;
  for (const PodScrape& s : scrapes) {
    if (s.status.ok()) {
      ++ok;
    } else if (first_error.empty()) {
      first_error = s.status.ToString();
    }
  }
  EXPECT_EQ(ok, 300) << first_error;
  // The budget: 64 free less the reserve of 32 for the rest of the process.
  EXPECT_LE(pages.most_at_once(), 33) << "open before: " << open;
}

}  // namespace
}  // namespace kinfer::autoscale
