// kinfer-runtime: serves one GGUF model over an OpenAI-compatible HTTP API.
// Only wiring lives here: flags -> logging -> HTTP server (live at once: /health) -> model load
// (/ready turns 200) -> wait for SIGINT/SIGTERM -> graceful stop.
//
// Exit codes: 0 after a signal, 1 when the model cannot be loaded or the address cannot be
// bound, 2 for bad command-line flags.
#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <charconv>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "common/logging.h"
#include "common/metrics/metrics.h"
#include "runtime/server/http_server.h"
#include "runtime/server/router.h"
#include "runtime/server/served_model.h"

namespace {

constexpr char kUsage[] =
    R"(Usage: kinfer-runtime --model PATH [options]

Serves a GGUF model with an OpenAI-compatible API (/v1/chat/completions, /v1/completions,
/v1/models, /tokenize, /detokenize, /health, /ready, /metrics). See docs/api.md.

Options:
  --model PATH           GGUF model file (required)
  --host HOST            address to listen on (default 127.0.0.1)
  --port N               port to listen on (default 8081)
  --threads N            CPU threads for the model (default 2)
  --ctx-size N           context window in tokens; 0 = the model's trained context (default 0)
  --model-name NAME      model id for the API (default: the file name without .gguf)
  --max-body-bytes N     largest request body accepted; larger get 413 (default 1048576)
  --log-level LEVEL      trace, debug, info, warn, error, critical or off (default info)
  -h, --help             show this help and exit
)";

struct Flags {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8081;
  int threads = 2;
  int ctx_size = 0;
  std::string model_name;
  long long max_body_bytes = 1 << 20;
  std::string log_level = "info";
};

bool ParseInt(std::string_view s, long long lo, long long hi, long long* out) {
  long long v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < lo || v > hi) return false;
  *out = v;
  return true;
}

[[noreturn]] void BadFlag(const std::string& message) {
  std::fprintf(stderr, "kinfer-runtime: %s\nRun 'kinfer-runtime --help' for usage.\n",
               message.c_str());
  std::exit(2);
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (arg.rfind("--", 0) != 0) BadFlag("unexpected argument '" + arg + "'");
    std::string name = arg, value;
    bool has_value = false;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    auto take = [&]() -> std::string {
      if (has_value) return value;
      if (i + 1 >= argc) BadFlag("flag " + name + " needs a value");
      return argv[++i];
    };
    auto take_int = [&](long long lo, long long hi) -> long long {
      std::string v = take();
      long long out = 0;
      if (!ParseInt(v, lo, hi, &out)) {
        BadFlag("flag " + name + " wants an integer in [" + std::to_string(lo) + ", " +
                std::to_string(hi) + "], got '" + v + "'");
      }
      return out;
    };
    if (name == "--model")
      f.model = take();
    else if (name == "--host")
      f.host = take();
    else if (name == "--port")
      f.port = static_cast<int>(take_int(1, 65535));
    else if (name == "--threads")
      f.threads = static_cast<int>(take_int(1, 1024));
    else if (name == "--ctx-size")
      f.ctx_size = static_cast<int>(take_int(0, 1 << 24));
    else if (name == "--model-name")
      f.model_name = take();
    else if (name == "--max-body-bytes")
      f.max_body_bytes = take_int(1, 1LL << 32);
    else if (name == "--log-level")
      f.log_level = take();
    else
      BadFlag("unknown flag '" + name + "'");
  }
  if (f.model.empty()) BadFlag("--model PATH is required");
  if (f.host.empty()) BadFlag("--host must not be empty");
  int level = 0;
  if (kinfer::Status s = kinfer::ParseLogLevel(f.log_level, &level); !s.ok()) {
    BadFlag(s.message());
  }
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags = ParseFlags(argc, argv);
  if (kinfer::Status s = kinfer::InitLogging("kinfer-runtime", flags.log_level); !s.ok()) {
    BadFlag(s.message());
  }

  // Signals are taken synchronously by sigwait below; block them before any thread starts.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);

  kinfer::metrics::Registry registry;
  kinfer::Router router(&registry);
  kinfer::HttpServerOptions http_options;
  http_options.host = flags.host;
  http_options.port = flags.port;
  http_options.max_body_bytes = static_cast<size_t>(flags.max_body_bytes);
  kinfer::HttpServer server(http_options, &router);
  if (kinfer::Status s = server.Start(); !s.ok()) {
    spdlog::critical("{}", s.message());
    return 1;
  }
  spdlog::info("listening on http://{}:{} (/health is up; loading the model)", flags.host,
               flags.port);

  kinfer::ServedModelOptions model_options;
  model_options.path = flags.model;
  model_options.name = flags.model_name;
  model_options.n_threads = flags.threads;
  model_options.context_length = flags.ctx_size;
  auto loaded = kinfer::ServedModel::Load(model_options);
  if (!loaded.ok()) {
    spdlog::critical("cannot load the model: {}", loaded.status().ToString());
    server.Stop(1);
    return 1;
  }
  const std::string name = (*loaded)->name();
  const int ctx = (*loaded)->engine().context_length();
  const bool fallback = (*loaded)->chat().uses_fallback();
  router.SetModel(std::move(loaded).value());
  spdlog::info("model '{}' loaded from {} (context {} tokens, {} threads{}); ready", name,
               flags.model, ctx, flags.threads,
               fallback ? ", no chat template in the file: using ChatML" : "");

  int sig = 0;
  sigwait(&sigs, &sig);
  spdlog::info("received {}; stopping", sig == SIGINT ? "SIGINT" : "SIGTERM");
  server.Stop();
  return 0;
}
