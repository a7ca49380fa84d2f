// kinfer-fake-upstream: a controllable fake OpenAI-compatible upstream, the test fixture behind
// kinfer-sidecar's integration tests and benchmarks. See README.md in this folder.
//
//   kinfer-fake-upstream [--host 127.0.0.1] [--port 0] [--threads 1] [--capacity 0]
//                        [--model primary [--model small ...]]
//
// Prints "LISTENING <port>" on stdout once accepting; SIGINT/SIGTERM exit with status 0.
// This file only wires things together: the knobs are in fake_settings, the shared counters and
// the capacity gate in fake_state, the HTTP connection in fake_session.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include "tests/sidecar/fake_upstream/fake_session.h"
#include "tests/sidecar/fake_upstream/fake_state.h"

namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace kinfer::fake {
namespace {

struct Options {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  int threads = 1;
  int64_t capacity = 0;
  std::vector<std::string> models;
};

[[noreturn]] void Usage(const char* error) {
  if (error) std::fprintf(stderr, "kinfer-fake-upstream: %s\n", error);
  std::fprintf(stderr,
               "usage: kinfer-fake-upstream [--host 127.0.0.1] [--port 0] [--threads 1]\n"
               "                            [--capacity 0] [--model primary]...\n");
  std::exit(error ? 2 : 0);
}

int64_t ParseInt(std::string_view flag, const char* text, int64_t min, int64_t max) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < min || v > max) {
    std::string msg = std::string(flag) + ": expected an integer in [" + std::to_string(min) +
                      ", " + std::to_string(max) + "]";
    Usage(msg.c_str());
  }
  return v;
}

Options ParseOptions(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string_view flag = argv[i];
    if (flag == "--help" || flag == "-h") Usage(nullptr);
    if (i + 1 >= argc) Usage(("missing value for " + std::string(flag)).c_str());
    const char* value = argv[++i];
    if (flag == "--host") {
      o.host = value;
    } else if (flag == "--port") {
      o.port = static_cast<uint16_t>(ParseInt(flag, value, 0, 65535));
    } else if (flag == "--threads") {
      o.threads = static_cast<int>(ParseInt(flag, value, 1, 256));
    } else if (flag == "--capacity") {
      o.capacity = ParseInt(flag, value, 0, 1'000'000);
    } else if (flag == "--model") {
      if (*value == '\0') Usage("--model: empty name");
      o.models.emplace_back(value);
    } else {
      Usage(("unknown flag " + std::string(flag)).c_str());
    }
  }
  if (o.models.empty()) o.models.emplace_back("primary");
  return o;
}

// Accepts connections forever; each gets its own strand and session.
class Listener {
 public:
  Listener(net::io_context& ioc, tcp::acceptor acceptor, FakeState& state)
      : ioc_(ioc), acceptor_(std::move(acceptor)), retry_(ioc), state_(state) {}

  void Accept() {
    acceptor_.async_accept(net::make_strand(ioc_),
                           [this](boost::system::error_code ec, tcp::socket socket) {
                             OnAccept(ec, std::move(socket));
                           });
  }

 private:
  void OnAccept(boost::system::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted) return;
    if (ec) {  // e.g. out of file descriptors: back off instead of spinning
      std::fprintf(stderr, "kinfer-fake-upstream: accept: %s\n", ec.message().c_str());
      retry_.expires_after(std::chrono::milliseconds(50));
      retry_.async_wait([this](boost::system::error_code wait_ec) {
        if (!wait_ec) Accept();
      });
      return;
    }
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);  // every SSE chunk leaves at once
    std::make_shared<FakeSession>(std::move(socket), state_)->Start();
    Accept();
  }

  net::io_context& ioc_;
  tcp::acceptor acceptor_;
  net::steady_timer retry_;
  FakeState& state_;
};

int Run(const Options& o) {
  GlobalKnobs defaults;
  defaults.capacity = o.capacity;
  FakeState state(defaults, o.models);  // outlives the io_context and every session
  net::io_context ioc(o.threads);

  boost::system::error_code ec;
  const net::ip::address address = net::ip::make_address(o.host, ec);
  if (ec) {
    std::fprintf(stderr, "kinfer-fake-upstream: --host %s: %s\n", o.host.c_str(),
                 ec.message().c_str());
    return 2;
  }
  tcp::acceptor acceptor(ioc);
  const tcp::endpoint endpoint(address, o.port);
  if (acceptor.open(endpoint.protocol(), ec) ||
      acceptor.set_option(net::socket_base::reuse_address(true), ec) ||
      acceptor.bind(endpoint, ec) ||
      acceptor.listen(net::socket_base::max_listen_connections, ec)) {
    std::fprintf(stderr, "kinfer-fake-upstream: listen on %s:%u: %s\n", o.host.c_str(),
                 static_cast<unsigned>(o.port), ec.message().c_str());
    return 1;
  }
  const uint16_t port = acceptor.local_endpoint().port();
  Listener listener(ioc, std::move(acceptor), state);
  listener.Accept();

  net::signal_set signals(ioc, SIGINT, SIGTERM);
  signals.async_wait([&ioc](boost::system::error_code, int) { ioc.stop(); });

  std::printf("LISTENING %u\n", static_cast<unsigned>(port));
  std::fflush(stdout);

  auto run = [&ioc] {
    for (;;) {
      try {
        ioc.run();
        return;
      } catch (const std::exception& e) {  // a bug in one handler must not kill the fixture
        std::fprintf(stderr, "kinfer-fake-upstream: handler threw: %s\n", e.what());
      }
    }
  };
  std::vector<std::thread> threads;
  for (int i = 1; i < o.threads; ++i) threads.emplace_back(run);
  run();
  for (std::thread& t : threads) t.join();
  return 0;
}

}  // namespace
}  // namespace kinfer::fake

int main(int argc, char** argv) {
  return kinfer::fake::Run(kinfer::fake::ParseOptions(argc, argv));
}
