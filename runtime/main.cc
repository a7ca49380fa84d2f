// kinfer-runtime: serves one GGUF model over an OpenAI-compatible HTTP API.
// Only wiring lives here: flags -> logging -> HTTP server (live at once: /health) -> model load
// (/ready turns 200) -> wait for SIGINT/SIGTERM -> graceful stop.
//
// Exit codes: 0 after a signal, 1 when the model cannot be loaded or the address cannot be
// bound, 2 for bad command-line flags.
#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "common/file_limit.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/metrics/metrics.h"
#include "runtime/backend/model_backend.h"
#include "runtime/server/http_server.h"
#include "runtime/server/router.h"
#include "runtime/server/served_model.h"

namespace {

constexpr char kUsage[] =
    R"(Usage: kinfer-runtime --model PATH [options]

Serves a GGUF model with an OpenAI-compatible API (/v1/chat/completions, /v1/completions,
/v1/responses, /v1/models, /tokenize, /detokenize, /cancel, /health, /ready, /metrics).
See docs/api.md.

Options:
  --model PATH           GGUF model file (required)
  --host HOST            address to listen on (default 127.0.0.1)
  --port N               port to listen on (default 8081)
  --threads N            CPU threads for the model (default 2)
  --device D             cpu, cuda or auto: CUDA when a device works, else the CPU (default auto)
  --ctx-size N           context window in tokens; 0 = the model's trained context (default 0)
  --mmap[=BOOL]          map the model file instead of reading it into huge-page memory when
                         the CPU computes (starts sooner, shares the page cache, decodes about
                         10% slower); on CUDA the file is always mapped (default false)
  --model-name NAME      model id for the API (default: the file name without .gguf)
  --max-body-bytes N     largest request body accepted; larger get 413 (default 1048576)
  --idle-timeout S       close a connection that waits this many seconds for (the rest of) a
                         request (default 75)
  --write-timeout S      a response write the client does not take within S seconds ends its
                         request as if the client had left (default 30)
  --max-connections N    open connections held at most; one more is answered 503 with
                         Retry-After and closed (default 0: half the open-file limit, which
                         starts raised to its hard limit, less a reserve; at most 65536)
  --max-batch-tokens N   tokens computed per step, decodes + prompt chunks; the CPU backend
                         computes at most 512 a step (default 256)
  --max-running N        sequences batched at once; below --max-batch-tokens (default 16)
  --max-queued N         waiting requests; beyond, 503 + Retry-After (default 256)
  --kv-cache-tokens N    paged KV cache size in positions; 0 = 2 x the context (default 0)
  --kv-cache-fraction F  size the KV cache instead as this fraction (0, 1] of the free device
                         memory after the weights (on the CPU: MemAvailable, or what the
                         memory limit of the pod leaves) (default: off)
  --kv-block-size N      positions per KV block (default 16)
  --prefix-caching[=BOOL]  reuse cached KV of earlier prompts with the same prefix (default true)
  --batch-invariant[=BOOL] a request's output does not depend on its batch, cache hits or
                         preemption; false = faster prefill (the GEMM kernels) (default: true
                         on the CPU, false on CUDA, where it also costs the tiled and split
                         attention)
  --plan-ahead MODE      auto, on or off: plan each step while the device computes the one
                         before (auto: on CUDA; on = on the CPU too, where each step's text
                         then streams a step later) (default auto)
  --chain-steps MODE     auto, on or off: launch each step planned ahead behind the one in
                         flight, before its tokens are back; the device takes them itself
                         (auto: on CUDA; on = on the CPU too, for tests) (default auto)
  --stream-interval N    a stream's events carry at least N tokens (its first token and its
                         end go at once): fewer chunks and wake-ups at large batches (default 1)
  --spec-tokens N        speculative decoding: draft tokens verified per step at most, for
                         requests that ask ("speculative": true) (default 3; 0 = never)
  --spec-default[=BOOL]  speculate for requests that do not say (default false)
  --spec-ngram-min N     prompt lookup: shortest suffix matched (default 2)
  --spec-ngram-max N     prompt lookup: longest suffix matched first (default 4)
  --draft-model PATH     draft with this GGUF model (same vocabulary) instead of prompt lookup
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
  int idle_timeout_s = 75;
  int write_timeout_s = 30;
  long long max_connections = 0;
  std::string log_level = "info";
  std::string draft_model;
  std::string device = "auto";
  bool mmap = false;
  std::optional<bool> batch_invariant;  // unset: the device's default (ServedModelOptions)
  kinfer::EngineOptions engine;
};

[[noreturn]] void BadFlag(const std::string& message) {
  std::fprintf(stderr, "kinfer-runtime: %s\nRun 'kinfer-runtime --help' for usage.\n",
               message.c_str());
  std::exit(2);
}

// A flag that is auto, on or off.
template <typename Mode>
Mode AutoOnOff(const char* flag, const std::string& v, Mode automatic, Mode on, Mode off) {
  if (v == "auto") return automatic;
  if (v == "on") return on;
  if (v == "off") return off;
  BadFlag(std::string(flag) + " must be auto, on or off, not '" + v + "'");
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  kinfer::FlagReader flags(argc, argv, "kinfer-runtime");
  while (flags.Next()) {
    if (flags.Is("--help", "-h")) {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (flags.Is("--model")) {
      f.model = flags.Value();
    } else if (flags.Is("--host")) {
      f.host = flags.Value();
    } else if (flags.Is("--port")) {
      f.port = static_cast<int>(flags.Int(1, 65535));
    } else if (flags.Is("--threads")) {
      f.threads = static_cast<int>(flags.Int(1, 1024));
    } else if (flags.Is("--ctx-size")) {
      f.ctx_size = static_cast<int>(flags.Int(0, 1 << 24));
    } else if (flags.Is("--model-name")) {
      f.model_name = flags.Value();
    } else if (flags.Is("--max-body-bytes")) {
      f.max_body_bytes = flags.Int(1, 1LL << 32);
    } else if (flags.Is("--idle-timeout")) {
      f.idle_timeout_s = static_cast<int>(flags.Int(1, 86400));
    } else if (flags.Is("--write-timeout")) {
      f.write_timeout_s = static_cast<int>(flags.Int(1, 86400));
    } else if (flags.Is("--max-connections")) {
      f.max_connections = flags.Int(0, 1 << 20);
    } else if (flags.Is("--log-level")) {
      f.log_level = flags.Value();
    } else if (flags.Is("--max-batch-tokens")) {
      f.engine.max_batch_tokens = static_cast<int>(flags.Int(2, 1 << 20));
    } else if (flags.Is("--max-running")) {
      f.engine.max_running = static_cast<int>(flags.Int(1, 1 << 20));
    } else if (flags.Is("--max-queued")) {
      f.engine.max_queued_requests = static_cast<int>(flags.Int(1, 1 << 20));
    } else if (flags.Is("--kv-cache-tokens")) {
      f.engine.kv_cache_tokens = flags.Int(0, 1LL << 32);
    } else if (flags.Is("--device")) {
      f.device = flags.Value();
      if (f.device != "cpu" && f.device != "cuda" && f.device != "auto") {
        BadFlag("--device must be cpu, cuda or auto, not '" + f.device + "'");
      }
    } else if (flags.Is("--mmap")) {
      f.mmap = flags.Bool();
    } else if (flags.Is("--kv-cache-fraction")) {
      const std::string v = flags.Value();
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(x > 0.0 && x <= 1.0)) {
        BadFlag("--kv-cache-fraction must be a number in (0, 1], not '" + v + "'");
      }
      f.engine.kv_cache_fraction = x;
    } else if (flags.Is("--kv-block-size")) {
      f.engine.kv_block_size = static_cast<int>(flags.Int(1, 1024));
    } else if (flags.Is("--prefix-caching")) {
      f.engine.prefix_caching = flags.Bool();
    } else if (flags.Is("--batch-invariant")) {
      f.batch_invariant = flags.Bool();
    } else if (flags.Is("--plan-ahead")) {
      using P = kinfer::EngineOptions::PlanAhead;
      f.engine.plan_ahead = AutoOnOff("--plan-ahead", flags.Value(), P::kAuto, P::kAlways, P::kOff);
    } else if (flags.Is("--chain-steps")) {
      using C = kinfer::EngineOptions::ChainSteps;
      f.engine.chain_steps = AutoOnOff("--chain-steps", flags.Value(), C::kAuto, C::kAlways, C::kOff);
    } else if (flags.Is("--stream-interval")) {
      f.engine.stream_interval = static_cast<int>(flags.Int(1, 4096));
    } else if (flags.Is("--spec-tokens")) {
      f.engine.spec.max_tokens = static_cast<int>(flags.Int(0, 64));
    } else if (flags.Is("--spec-default")) {
      f.engine.spec.default_on = flags.Bool();
    } else if (flags.Is("--spec-ngram-min")) {
      f.engine.spec.ngram_min = static_cast<int>(flags.Int(1, 64));
    } else if (flags.Is("--spec-ngram-max")) {
      f.engine.spec.ngram_max = static_cast<int>(flags.Int(1, 64));
    } else if (flags.Is("--draft-model")) {
      f.draft_model = flags.Value();
    } else {
      flags.Unknown();
    }
  }
  if (f.model.empty()) BadFlag("--model PATH is required");
  if (f.host.empty()) BadFlag("--host must not be empty");
  if (f.engine.spec.ngram_min > f.engine.spec.ngram_max) {
    BadFlag("--spec-ngram-min must not exceed --spec-ngram-max");
  }
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

  const uint64_t open_files = kinfer::RaiseOpenFileLimit();
  spdlog::debug("open-file limit {}", open_files);

  kinfer::metrics::Registry registry;
  kinfer::Router router(&registry);
  kinfer::HttpServerOptions http_options;
  http_options.host = flags.host;
  http_options.port = flags.port;
  http_options.max_body_bytes = static_cast<size_t>(flags.max_body_bytes);
  http_options.idle_timeout = std::chrono::seconds(flags.idle_timeout_s);
  http_options.write_timeout = std::chrono::seconds(flags.write_timeout_s);
  http_options.max_connections = static_cast<size_t>(flags.max_connections);
  kinfer::HttpServer server(http_options, &router);
  if (kinfer::Status s = server.Start(); !s.ok()) {
    spdlog::critical("{}", s.message());
    return 1;
  }
  spdlog::info("listening on http://{}:{} (/health is up; loading the model)", flags.host,
               flags.port);

  // Signals are waited for from here on, the load included: a SIGTERM while a large model loads
  // (a pod deleted at start) ends the process at once with 0, not at the grace period's SIGKILL.
  // Once loaded, the signal is handed to main, which stops the server in order.
  struct SignalState {
    std::mutex mu;
    std::condition_variable cv;
    bool serving = false;
    int sig = 0;
  };
  auto signal_state = std::make_shared<SignalState>();
  std::thread([sigs, st = signal_state]() mutable {
    int sig = 0;
    sigwait(&sigs, &sig);
    std::unique_lock<std::mutex> lock(st->mu);
    if (!st->serving) {
      spdlog::info("received {} while loading the model; exiting",
                   sig == SIGINT ? "SIGINT" : "SIGTERM");
      spdlog::default_logger()->flush();
      std::_Exit(0);
    }
    st->sig = sig;
    st->cv.notify_all();
  }).detach();

  kinfer::ServedModelOptions model_options;
  model_options.path = flags.model;
  model_options.name = flags.model_name;
  model_options.n_threads = flags.threads;
  model_options.context_length = flags.ctx_size;
  model_options.engine = flags.engine;
  model_options.draft_path = flags.draft_model;
  model_options.device = flags.device;
  model_options.mmap = flags.mmap;
  model_options.batch_invariant = flags.batch_invariant;
  auto loaded = kinfer::ServedModel::Load(model_options);
  if (!loaded.ok()) {
    spdlog::critical("cannot load the model: {}", loaded.status().ToString());
    server.Stop(1);
    return 1;
  }
  // The engine sets up its KV cache on its own thread: one that cannot be allocated (a
  // --kv-cache-tokens or --kv-cache-fraction past the memory there is) is a start-up error, as in
  // vLLM and llama-server: exit 1 with the reason (CrashLoopBackOff names it), not a pod that
  // never gets ready.
  if (kinfer::Status started = (*loaded)->engine().WaitStarted(); !started.ok()) {
    spdlog::critical("cannot serve the model: {}", started.message());
    server.Stop(1);
    return 1;
  }
  const std::string name = (*loaded)->name();
  const int ctx = (*loaded)->engine().context_length();
  const bool fallback = (*loaded)->chat().uses_fallback();
  const std::string device = (*loaded)->backend().name();
  std::string held = (*loaded)->weights_mapped() ? "file mapped" : "read into memory";
  if (const int n = (*loaded)->regrouped_tensors(); n > 0) {
    held += ", " + std::to_string(n) + " Q4 tensors regrouped for the CPU kernels";
  }
  router.SetModel(std::move(loaded).value());
  spdlog::info("model '{}' loaded from {} on {} (context {} tokens, {} threads, {}{}); ready", name,
               flags.model, device, ctx, flags.threads, held,
               fallback ? ", no chat template in the file: using ChatML" : "");

  int sig = 0;
  {
    std::unique_lock<std::mutex> lock(signal_state->mu);
    signal_state->serving = true;
    signal_state->cv.wait(lock, [&] { return signal_state->sig != 0; });
    sig = signal_state->sig;
  }
  spdlog::info("received {}; stopping", sig == SIGINT ? "SIGINT" : "SIGTERM");
  server.Stop();
  return 0;
}
