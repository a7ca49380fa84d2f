// Tests of MetricsCollector's failure paths over real loopback sockets: a closed port, a server
// that never answers (the timeout), a bad address, and pods that are not ready. The success path
// against real sidecars is tests/python/test_metrics_collector.py.
#include "operator/autoscale/metrics_collector.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

namespace kinfer::autoscale {
namespace {

// A loopback socket bound to a free port; listening (never accepting) when `listen_too`.
class Socket {
 public:
  explicit Socket(bool listen_too) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port_ = ntohs(addr.sin_port);
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

}  // namespace
}  // namespace kinfer::autoscale
