// The HTTP adapter and the router over real loopback HTTP, before any model is loaded:
// liveness/readiness, routing errors, the body limit, metrics, and JSON error bodies.
// (Generation end to end is covered by tests/python against the real model.)
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>
#include <vector>

#include <cpprest/http_client.h>
#include <nlohmann/json.hpp>

#include "common/metrics/metrics.h"
#include "runtime/server/http_server.h"
#include "runtime/server/router.h"

namespace kinfer {
namespace {

namespace http = web::http;
using json = nlohmann::json;

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  close(fd);
  return port;
}

struct Reply {
  int status = 0;
  std::string body;
  std::string content_type;
  std::string header(const http::http_response& r, const std::string& k) {
    auto it = r.headers().find(k);
    return it == r.headers().end() ? "" : it->second;
  }
  std::string allow;
  std::string retry_after;
};

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    port_ = FreePort();
    router_ = std::make_unique<Router>(&registry_);
    HttpServerOptions o;
    o.port = port_;
    o.max_body_bytes = 1000;
    o.idle_timeout = std::chrono::seconds(1);
    server_ = std::make_unique<HttpServer>(o, router_.get());
    ASSERT_TRUE(server_->Start().ok());
  }
  void TearDown() override { server_->Stop(); }

  Reply Send(const std::string& method, const std::string& path, const std::string& body = "") {
    http::client::http_client client("http://127.0.0.1:" + std::to_string(port_));
    http::http_request req(method);
    req.set_request_uri(path);
    if (!body.empty()) req.set_body(body, "application/json");
    http::http_response resp = client.request(req).get();
    Reply r;
    r.status = resp.status_code();
    r.body = resp.extract_utf8string(true).get();
    r.content_type = resp.headers().content_type();
    r.allow = r.header(resp, "Allow");
    r.retry_after = r.header(resp, "Retry-After");
    return r;
  }

  // Sends raw bytes on a new connection and returns everything read until the server closes it;
  // kTimedOut is appended when it has not closed it after 10 s.
  std::string SendRaw(const std::string& bytes) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port_));
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      close(fd);
      return "connect failed";
    }
    timeval tv{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (!bytes.empty()) send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) out += kTimedOut;
    close(fd);
    return out;
  }
  static constexpr const char* kTimedOut = "<no close within 10 s>";

  static void ExpectErrorShape(const Reply& r) {
    json j = json::parse(r.body);
    ASSERT_TRUE(j.contains("error")) << r.body;
    EXPECT_TRUE(j["error"]["message"].is_string());
    EXPECT_TRUE(j["error"]["type"].is_string());
    EXPECT_TRUE(j["error"].contains("param"));
    EXPECT_TRUE(j["error"].contains("code"));
  }

  int port_ = 0;
  metrics::Registry registry_;
  std::unique_ptr<Router> router_;
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpServerTest, HealthIsUpAndReadyIs503WhileLoading) {
  Reply h = Send("GET", "/health");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(json::parse(h.body)["status"], "ok");
  Reply r = Send("GET", "/ready");
  EXPECT_EQ(r.status, 503);
}

// The probes and /metrics are not held to the in-flight cap: with every request slot taken (here
// none at all), a generation is refused, while /health, /ready and /metrics still answer.
TEST_F(HttpServerTest, ProbesAndMetricsAreAnsweredWhenEveryRequestSlotIsTaken) {
  server_->Stop();
  HttpServerOptions o;
  o.port = port_;
  o.max_in_flight = 0;
  server_ = std::make_unique<HttpServer>(o, router_.get());
  ASSERT_TRUE(server_->Start().ok());
  Reply gen = Send("POST", "/v1/completions", R"({"prompt":"x"})");
  EXPECT_EQ(gen.status, 503);
  EXPECT_NE(gen.body.find("too many requests in flight"), std::string::npos) << gen.body;
  EXPECT_EQ(Send("GET", "/health").status, 200);
  EXPECT_EQ(Send("GET", "/ready").status, 503);  // loading, not refused
  EXPECT_NE(Send("GET", "/ready").body.find("loading"), std::string::npos);
  EXPECT_EQ(Send("GET", "/metrics").status, 200);
}

TEST_F(HttpServerTest, GenerationBeforeLoadIs503WithRetryAfter) {
  Reply r =
      Send("POST", "/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.retry_after, "1");
  ExpectErrorShape(r);
}

TEST_F(HttpServerTest, UnknownPathIs404AndWrongMethodIs405) {
  Reply a = Send("GET", "/nope");
  EXPECT_EQ(a.status, 404);
  ExpectErrorShape(a);
  Reply b = Send("GET", "/v1/chat/completions");
  EXPECT_EQ(b.status, 405);
  EXPECT_EQ(b.allow, "POST");
  ExpectErrorShape(b);
  Reply c = Send("DELETE", "/health");
  EXPECT_EQ(c.status, 405);
  EXPECT_EQ(Send("GET", "/health/").status, 200);  // trailing slash tolerated
}

TEST_F(HttpServerTest, OversizedBodyIs413AndServerStaysUp) {
  Reply r = Send("POST", "/v1/completions", std::string(5000, 'x'));
  EXPECT_EQ(r.status, 413);
  ExpectErrorShape(r);
  EXPECT_EQ(Send("GET", "/health").status, 200);
}

TEST_F(HttpServerTest, MetricsArePrometheusText) {
  Send("GET", "/nope");
  Reply m = Send("GET", "/metrics");
  EXPECT_EQ(m.status, 200);
  EXPECT_EQ(m.content_type, metrics::kTextContentType);
  EXPECT_NE(m.body.find("# TYPE kinfer_runtime_requests_total counter"), std::string::npos);
  EXPECT_NE(m.body.find("kinfer_runtime_model_loaded 0"), std::string::npos);
  EXPECT_NE(m.body.find("kinfer_runtime_http_requests_total{route=\"other\",code=\"404\"} 1"),
            std::string::npos)
      << m.body;
  EXPECT_NE(m.body.find("kinfer_runtime_time_to_first_token_seconds_bucket{le=\"120\"} 0"),
            std::string::npos);
}

TEST_F(HttpServerTest, PipelinedRequestsAreAnsweredInOrder) {
  const std::string out = SendRaw(
      "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
      "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
      "GET /ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const size_t a = out.find("HTTP/1.1 200");
  const size_t b = out.find("HTTP/1.1 404");
  const size_t c = out.find("HTTP/1.1 503");
  ASSERT_NE(a, std::string::npos) << out;
  ASSERT_NE(b, std::string::npos) << out;
  ASSERT_NE(c, std::string::npos) << out;
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
}

TEST_F(HttpServerTest, MalformedRequestsGetA400JsonBody) {
  for (const std::string& bad :
       {std::string("BLAH\r\n\r\n"), std::string("GET /health HTTP/1.1\r\nNo colon here\r\n\r\n"),
        std::string("GET /%zz HTTP/1.1\r\nHost: x\r\n\r\n")}) {
    const std::string out = SendRaw(bad);
    EXPECT_EQ(out.rfind("HTTP/1.1 400", 0), 0u) << bad << " -> " << out;
    const size_t body = out.find("\r\n\r\n");
    ASSERT_NE(body, std::string::npos) << out;
    const json j = json::parse(out.substr(body + 4), nullptr, false);
    ASSERT_TRUE(j.is_object()) << out;
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  }
  EXPECT_EQ(Send("GET", "/health").status, 200);
}

// RFC 9110 9.3.2: HEAD wherever GET, with GET's header and no body (an error answer included);
// the connection stays usable after it.
TEST_F(HttpServerTest, HeadIsAnsweredLikeGetWithoutABody) {
  const std::string out = SendRaw(
      "HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n"
      "HEAD /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n"
      "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  ASSERT_EQ(out.rfind("HTTP/1.1 200", 0), 0u) << out;
  const size_t end1 = out.find("\r\n\r\n");
  ASSERT_NE(end1, std::string::npos) << out;
  EXPECT_NE(out.substr(0, end1).find("Content-Length: 15"), std::string::npos) << out;
  // The 405 follows the first header at once: no body in between.
  ASSERT_EQ(out.compare(end1 + 4, 12, "HTTP/1.1 405"), 0) << out;
  const size_t end2 = out.find("\r\n\r\n", end1 + 4);
  ASSERT_NE(end2, std::string::npos) << out;
  EXPECT_NE(out.substr(end1, end2 - end1).find("Allow: POST"), std::string::npos) << out;
  ASSERT_EQ(out.compare(end2 + 4, 12, "HTTP/1.1 200"), 0) << out;
  EXPECT_EQ(out.find("error"), std::string::npos) << out;
  EXPECT_EQ(out.size() - out.find(R"({"status":"ok"})"), 15u) << out;  // only GET's body
  Reply r = Send("PUT", "/health");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.allow, "GET, HEAD");
}

// RFC 9112 3.2: 400 for an HTTP/1.1 request without Host, and for any with two; 1.0 needs none.
TEST_F(HttpServerTest, HostIsRequiredInHttp11) {
  for (const std::string& bad : {std::string("GET /health HTTP/1.1\r\n\r\n"),
                                 std::string("GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
                                 std::string("GET /health HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n")}) {
    const std::string out = SendRaw(bad);
    EXPECT_EQ(out.rfind("HTTP/1.1 400", 0), 0u) << bad << " -> " << out;
    EXPECT_NE(out.find("Host header"), std::string::npos) << out;
  }
  const std::string ok = SendRaw("GET /health HTTP/1.0\r\n\r\n");
  EXPECT_EQ(ok.rfind("HTTP/1.1 200", 0), 0u) << ok;
}

// RFC 9112 3.2.2: a server must accept an absolute-form target; it is routed by its path.
TEST_F(HttpServerTest, AbsoluteFormTargetIsRoutedByItsPath) {
  std::string out =
      SendRaw("GET http://127.0.0.1:1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(out.rfind("HTTP/1.1 200", 0), 0u) << out;
  out = SendRaw("GET HTTP://h/v1/chat/completions?a=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(out.rfind("HTTP/1.1 405", 0), 0u) << out;
  out = SendRaw("GET http://h HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");  // path "/"
  EXPECT_EQ(out.rfind("HTTP/1.1 404", 0), 0u) << out;
  EXPECT_NE(out.find("no route for GET /\""), std::string::npos) << out;
}

// RFC 9112 6.1: a transfer coding other than chunked gets 501 and a JSON error; the body is not
// read as if it were plain.
TEST_F(HttpServerTest, UnknownTransferCodingIs501) {
  for (const std::string coding : {"gzip, chunked", "gzip", "chunked, chunked"}) {
    const std::string out = SendRaw("POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: " +
                                    coding + "\r\n\r\n2\r\n{}\r\n0\r\n\r\n");
    if (coding == "chunked, chunked") {  // chunked twice is malformed, not unknown
      EXPECT_EQ(out.rfind("HTTP/1.1 400", 0), 0u) << out;
      continue;
    }
    ASSERT_EQ(out.rfind("HTTP/1.1 501", 0), 0u) << coding << " -> " << out;
    const size_t body = out.find("\r\n\r\n");
    ASSERT_NE(body, std::string::npos) << out;
    const json j = json::parse(out.substr(body + 4), nullptr, false);
    ASSERT_TRUE(j.is_object()) << out;
    EXPECT_NE(j["error"]["message"].get<std::string>().find("gzip"), std::string::npos) << out;
  }
}

TEST_F(HttpServerTest, PercentEncodedPathIsDecoded) {
  EXPECT_EQ(Send("GET", "/heal%74h").status, 200);
}

TEST_F(HttpServerTest, HugeHeadersGet431) {
  const std::string out =
      SendRaw("GET /health HTTP/1.1\r\nX-Big: " + std::string(70 * 1024, 'a') + "\r\n\r\n");
  EXPECT_EQ(out.rfind("HTTP/1.1 431", 0), 0u) << out.substr(0, 200);
}

TEST_F(HttpServerTest, IdleAndSlowConnectionsAreClosed) {
  // idle_timeout is 1 s here: a connection that sends nothing, or half a request, is closed
  // (recv sees EOF) instead of being held open forever.
  EXPECT_EQ(SendRaw(""), "");
  EXPECT_EQ(SendRaw("GET /health HTTP/1.1\r\nHost"), "");
}

TEST_F(HttpServerTest, AKeptAliveConnectionIsClosedWhenIdleAfterItsAnswers) {
  // idle_timeout is 1 s: a kept-alive connection that got its answers and sends nothing more is
  // closed too. The watch read for a gone client once outlived the answer, beyond the idle
  // timer, so every such connection stayed open (one file descriptor each) until the client
  // closed it.
  std::string out = SendRaw("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(out.find("HTTP/1.1 200"), std::string::npos) << out;
  EXPECT_EQ(out.find(kTimedOut), std::string::npos) << out;
  out = SendRaw(
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
      "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(out.find("HTTP/1.1 503"), std::string::npos) << out;  // no model loaded
  EXPECT_NE(out.find("HTTP/1.1 200"), std::string::npos) << out;
  EXPECT_EQ(out.find(kTimedOut), std::string::npos) << out;
}

int OpenFds() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d) != nullptr) ++n;
    closedir(d);
    n -= 3;  // ".", ".." and the directory's own descriptor
  }
  return n;
}

TEST_F(HttpServerTest, OutOfFileDescriptorsTheServerWaitsAndRecovers) {
  // Three clients; the file limit then leaves room for two accepted connections, so the third
  // waits in the backlog while accept fails (EMFILE). Once the first two leave, it is served.
  std::vector<int> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(socket(AF_INET, SOCK_STREAM, 0));
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  rlimit low = old;
  low.rlim_cur = static_cast<rlim_t>(OpenFds() + 2);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port_));
  for (int fd : clients) {
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  }
  const std::string req = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  send(clients[2], req.data(), req.size(), MSG_NOSIGNAL);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // accept fails meanwhile
  close(clients[0]);
  close(clients[1]);
  timeval tv{10, 0};
  setsockopt(clients[2], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = recv(clients[2], buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  close(clients[2]);
  setrlimit(RLIMIT_NOFILE, &old);
  EXPECT_EQ(out.rfind("HTTP/1.1 200", 0), 0u) << out;
  EXPECT_EQ(Send("GET", "/health").status, 200);
}

}  // namespace
}  // namespace kinfer
