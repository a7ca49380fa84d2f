// kinfer-sidecar: the per-pod policy proxy in front of an OpenAI-compatible runtime.
// Only wiring lives here: flags -> config (file or defaults, flags override) -> logging ->
// ProxyServer on one event-loop thread -> signals (SIGTERM/SIGINT drain and exit, SIGHUP reload).
//
// Exit codes: 0 after a drain, 1 when the address cannot be bound, 2 for bad flags or config.
#include <signal.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <string>
#include <utility>  // before Boost.Asio 1.74 (awaitable.hpp needs std::exchange)

#include <boost/asio.hpp>

#include "common/file_limit.h"
#include "common/flags.h"
#include "common/logging.h"
#include "sidecar/config/sidecar_config.h"
#include "sidecar/proxy/proxy_server.h"

namespace {

constexpr char kUsage[] =
    R"(Usage: kinfer-sidecar [--config FILE] [options]

The per-pod policy proxy: rate limits, priority queue with deadlines, circuit breaker, degrade
to a fallback model, response cache, and the queue/latency signals the autoscaler reads, in
front of an OpenAI-compatible upstream. See docs/sidecar.md; every config key is documented in
sidecar/kinfer-sidecar.example.yaml.

Options:
  --config FILE        YAML configuration (default: built-in defaults); SIGHUP re-reads it
  --listen HOST:PORT   address to listen on (default :8080; overrides the file)
  --upstream URL       upstream base URL (default http://127.0.0.1:8081; overrides the file)
  --log-level LEVEL    trace, debug, info, warn, error, critical or off (default info)
  --check-config       validate the configuration, print it is valid, and exit
  -h, --help           show this help and exit
)";

[[noreturn]] void Fail(int code, const std::string& message) {
  std::fprintf(stderr, "kinfer-sidecar: %s\n", message.c_str());
  std::exit(code);
}

struct Flags {
  std::string config_path;
  std::string listen;
  std::string upstream;
  std::string log_level = "info";
  bool check_only = false;
};

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  kinfer::FlagReader flags(argc, argv, "kinfer-sidecar");
  while (flags.Next()) {
    if (flags.Is("--help", "-h")) {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (flags.Is("--check-config")) {
      f.check_only = true;
    } else if (flags.Is("--config")) {
      f.config_path = flags.Value();
    } else if (flags.Is("--listen")) {
      f.listen = flags.Value();
    } else if (flags.Is("--upstream")) {
      f.upstream = flags.Value();
    } else if (flags.Is("--log-level")) {
      f.log_level = flags.Value();
    } else {
      flags.Unknown();
    }
  }
  return f;
}

kinfer::SidecarConfig LoadConfig(const Flags& flags) {
  kinfer::SidecarConfig config;
  if (!flags.config_path.empty()) {
    auto loaded = kinfer::LoadSidecarConfigFile(flags.config_path);
    if (!loaded.ok()) Fail(2, flags.config_path + ": " + loaded.status().message());
    config = std::move(*loaded);
  }
  if (!flags.listen.empty()) {
    auto listen = kinfer::ParseHostPort(flags.listen);
    if (!listen.ok()) Fail(2, "--listen: " + listen.status().message());
    config.listen = *listen;
  }
  if (!flags.upstream.empty()) {
    auto upstream = kinfer::ParseUpstreamUrl(flags.upstream);
    if (!upstream.ok()) Fail(2, "--upstream: " + upstream.status().message());
    config.upstream = *upstream;
  }
  if (kinfer::Status s = config.Validate(); !s.ok()) Fail(2, s.message());
  return config;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags = ParseFlags(argc, argv);
  if (kinfer::Status s = kinfer::InitLogging("kinfer-sidecar", flags.log_level); !s.ok()) {
    Fail(2, s.message());
  }
  kinfer::SidecarConfig config = LoadConfig(flags);
  if (flags.check_only) {
    std::printf("configuration is valid\n");
    return 0;
  }
  signal(SIGPIPE, SIG_IGN);
  const uint64_t open_files = kinfer::RaiseOpenFileLimit();
  spdlog::debug("open-file limit {}", open_files);

  boost::asio::io_context ioc(1);
  kinfer::ProxyServer server(ioc, config, flags.config_path);
  if (kinfer::Status s = server.Listen(); !s.ok()) Fail(1, s.message());
  spdlog::info("listening on {}:{}, upstream http://{}:{}{}", config.listen.host, server.port(),
               config.upstream.host, config.upstream.port, config.upstream.base_path);

  boost::asio::signal_set signals(ioc, SIGINT, SIGTERM, SIGHUP);
  std::function<void(const boost::system::error_code&, int)> on_signal =
      [&](const boost::system::error_code& ec, int sig) {
        if (ec) return;
        if (sig == SIGHUP) {
          server.Reload();
          signals.async_wait(on_signal);
          return;
        }
        spdlog::info("signal {}: draining", sig);
        server.BeginDrain([&] {
          spdlog::info("drained; exiting");
          signals.cancel();
          ioc.stop();
        });
        signals.async_wait(on_signal);  // a second SIGTERM during the drain is absorbed
      };
  signals.async_wait(on_signal);
  ioc.run();
  return 0;
}
