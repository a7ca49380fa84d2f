// kinfer-operator: reconciles InferenceServices (serving.kinfer.dev/v1alpha1) into Deployments,
// Services, ConfigMaps and PodDisruptionBudgets, writes their status, records Events, and
// autoscales them on queue depth and P99 TTFT. docs/operator.md is the user's guide.
//
// Startup: flags -> Kubernetes config (--kubeconfig, $KUBECONFIG, or in-cluster) -> /metrics,
// /healthz, /readyz -> informers (a standby keeps warm caches) -> leader election (when
// --leader-elect) -> workers and the autoscaler loop while leading.
// Shutdown: SIGTERM/SIGINT stop the workers after the reconcile in hand, stop the watches and
// release the Lease (a successor takes over at once); exit 0. Losing the Lease exits 1 at once
// (as controller-runtime does): the pod restarts as a standby.
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/flags.h"
#include "common/logging.h"
#include "operator/controller/autoscale_loop.h"
#include "operator/controller/controller.h"
#include "operator/controller/event_recorder.h"
#include "operator/controller/http_endpoints.h"
#include "operator/controller/operator_metrics.h"
#include "operator/kube/client.h"
#include "operator/kube/kubeconfig.h"
#include "operator/kube/leader_election.h"

namespace {

struct Flags {
  std::string kubeconfig;
  std::string context;
  std::string metrics_address = ":8080";
  std::string probe_address = ":8081";
  bool leader_elect = false;
  std::string lease_namespace;
  std::string lease_name = "kinfer-operator-leader";
  std::string log_level = "info";
  std::string metrics_source = "pods";
  std::string prometheus_url;
  std::vector<std::string> namespaces;
  std::string runtime_image = "kinfer/kinfer-runtime:0.1.0";
  std::string sidecar_image = "kinfer/kinfer-sidecar:0.1.0";
  std::string model_fetcher_image;
  std::vector<std::string> allowed_host_paths;
  int workers = 2;
  int resync_seconds = 600;
  int autoscale_interval_ms = 2000;
  bool autoscale = true;
  int sidecar_port = 8080;
  int shutdown_timeout_seconds = 20;
};

constexpr char kUsage[] = R"(Usage: kinfer-operator [flags]

Reconciles InferenceServices (serving.kinfer.dev/v1alpha1) into pods and autoscales them.

  --kubeconfig FILE                 kubeconfig (default: $KUBECONFIG, else in-cluster)
  --context NAME                    kubeconfig context (default: current-context)
  --metrics-bind-address ADDR       /metrics: ":PORT", "HOST:PORT" or "0" (off) [:8080]
  --health-probe-bind-address ADDR  /healthz, /readyz [:8081]
  --leader-elect[=BOOL]             one active replica, elected on a Lease [false]
  --leader-election-namespace NS    the Lease's namespace [$POD_NAMESPACE, else the kubeconfig's or in-cluster namespace]
  --leader-election-id NAME         the Lease's name [kinfer-operator-leader]
  --log-level LEVEL                 trace, debug, info, warn, error, critical, off [info]
  --metrics-source pods|prometheus  prometheus: read every service that says `pods` from
                                    --prometheus-url instead of scraping its pods [pods]
  --prometheus-url URL              Prometheus for --metrics-source prometheus
  --watch-namespaces A,B            only these namespaces [all]
  --default-runtime-image IMAGE     [kinfer/kinfer-runtime:0.1.0]
  --default-sidecar-image IMAGE     [kinfer/kinfer-sidecar:0.1.0]
  --model-fetcher-image IMAGE       model init containers [the runtime image]
  --allow-host-path-models DIR,...  node directories file:// models may come from; a file://
                                    model elsewhere is InvalidSpec [none: file:// refused]
  --workers N                       concurrent reconciles [2]
  --resync-period SECONDS           requeue every InferenceService this often [600]
  --autoscale-interval-ms MS        autoscaler tick [2000]
  --autoscale[=BOOL]                run the autoscaler loop [true]
  --sidecar-port N                  where the autoscaler scrapes each pod's sidecar [8080]
  --shutdown-timeout SECONDS        after SIGTERM, exit 1 at this deadline if the workers have
                                    not finished (below the pod's grace period of 30 s) [20]
  --help
)";

std::vector<std::string> SplitComma(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, ',')) {
    if (!part.empty()) out.push_back(part);
  }
  return out;
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  kinfer::FlagReader r(argc, argv, "kinfer-operator");
  while (r.Next()) {
    if (r.Is("--help", "-h")) {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (r.Is("--kubeconfig")) {
      f.kubeconfig = r.Value();
    } else if (r.Is("--context")) {
      f.context = r.Value();
    } else if (r.Is("--metrics-bind-address")) {
      f.metrics_address = r.Value();
    } else if (r.Is("--health-probe-bind-address")) {
      f.probe_address = r.Value();
    } else if (r.Is("--leader-elect")) {
      f.leader_elect = r.Bool();
    } else if (r.Is("--leader-election-namespace")) {
      f.lease_namespace = r.Value();
    } else if (r.Is("--leader-election-id")) {
      f.lease_name = r.Value();
    } else if (r.Is("--log-level")) {
      f.log_level = r.Value();
    } else if (r.Is("--metrics-source")) {
      f.metrics_source = r.Value();
      if (f.metrics_source != "pods" && f.metrics_source != "prometheus") {
        r.Fail("--metrics-source must be pods or prometheus, got '" + f.metrics_source + "'");
      }
    } else if (r.Is("--prometheus-url")) {
      f.prometheus_url = r.Value();
    } else if (r.Is("--watch-namespaces")) {
      f.namespaces = SplitComma(r.Value());
    } else if (r.Is("--default-runtime-image")) {
      f.runtime_image = r.Value();
    } else if (r.Is("--default-sidecar-image")) {
      f.sidecar_image = r.Value();
    } else if (r.Is("--model-fetcher-image")) {
      f.model_fetcher_image = r.Value();
    } else if (r.Is("--allow-host-path-models")) {
      f.allowed_host_paths = SplitComma(r.Value());
      for (const std::string& dir : f.allowed_host_paths) {
        if (dir.empty() || dir.front() != '/' || dir.find("/../") != std::string::npos ||
            dir.ends_with("/..")) {
          r.Fail("--allow-host-path-models takes absolute directories, got '" + dir + "'");
        }
      }
    } else if (r.Is("--workers")) {
      f.workers = static_cast<int>(r.Int(1, 64));
    } else if (r.Is("--resync-period")) {
      f.resync_seconds = static_cast<int>(r.Int(1, 7 * 24 * 3600));
    } else if (r.Is("--autoscale-interval-ms")) {
      f.autoscale_interval_ms = static_cast<int>(r.Int(100, 60000));
    } else if (r.Is("--autoscale")) {
      f.autoscale = r.Bool();
    } else if (r.Is("--sidecar-port")) {
      f.sidecar_port = static_cast<int>(r.Int(1, 65535));
    } else if (r.Is("--shutdown-timeout")) {
      f.shutdown_timeout_seconds = static_cast<int>(r.Int(1, 3600));
    } else {
      r.Unknown();
    }
  }
  if (f.metrics_source == "prometheus" && f.prometheus_url.empty()) {
    r.Fail("--metrics-source prometheus needs --prometheus-url");
  }
  return f;
}

std::string Identity() {
  std::string base;
  if (const char* pod = std::getenv("POD_NAME"); pod != nullptr && *pod != '\0') {
    base = pod;
  } else {
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    base = host;
  }
  std::random_device rd;
  char suffix[16];
  std::snprintf(suffix, sizeof suffix, "_%08x", rd());
  return base + suffix;
}

}  // namespace

int main(int argc, char** argv) {
  // glibc gives every thread that allocates its own arena (cpprestsdk's pool, the informers, the
  // workers), each keeping freed memory: two arenas hold the operator's RSS near its live data
  // (docs/benchmarks.md, operator RSS with 1000 InferenceServices).
  mallopt(M_ARENA_MAX, 2);
  Flags flags = ParseFlags(argc, argv);
  if (kinfer::Status s = kinfer::InitLogging("kinfer-operator", flags.log_level); !s.ok()) {
    std::fprintf(stderr, "kinfer-operator: %s\n", s.message().c_str());
    return 2;
  }
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto config = kinfer::kube::LoadDefault(flags.kubeconfig, flags.context);
  if (!config.ok()) {
    spdlog::critical("no Kubernetes configuration: {}", config.status().ToString());
    return 1;
  }
  auto client = kinfer::kube::Client::Create(*config);
  if (!client.ok()) {
    spdlog::critical("cannot make a Kubernetes client: {}", client.status().ToString());
    return 1;
  }
  const std::string identity = Identity();
  spdlog::info(
      "kinfer-operator {} talking to {} (namespaces: {})", identity, config->server,
      flags.namespaces.empty() ? std::string("all") : [&] {
        std::string s;
        for (const auto& n : flags.namespaces) s += (s.empty() ? "" : ",") + n;
        return s;
      }());

  kinfer::controller::OperatorMetrics metrics;
  kinfer::controller::EventRecorder events(client->get(), "kinfer-operator", identity);
  kinfer::controller::ControllerOptions copts;
  copts.namespaces = flags.namespaces;
  copts.planner.default_runtime_image = flags.runtime_image;
  copts.planner.default_sidecar_image = flags.sidecar_image;
  copts.planner.model_fetcher_image = flags.model_fetcher_image;
  copts.planner.allowed_host_paths = flags.allowed_host_paths;
  copts.workers = flags.workers;
  copts.resync_period = std::chrono::seconds(flags.resync_seconds);
  kinfer::controller::Controller controller(client->get(), copts, &metrics, &events);

  kinfer::controller::AutoscaleLoopOptions aopts;
  aopts.interval = std::chrono::milliseconds(flags.autoscale_interval_ms);
  aopts.sidecar_port = flags.sidecar_port;
  if (flags.metrics_source == "prometheus") aopts.prometheus_url = flags.prometheus_url;
  kinfer::controller::AutoscaleLoop autoscaler(&controller, aopts, &metrics);

  std::atomic<bool> lost{false};
  kinfer::controller::HttpEndpointsOptions hopts;
  hopts.metrics_address = flags.metrics_address;
  hopts.probe_address = flags.probe_address;
  hopts.metrics_text = [&] {
    controller.UpdateMetrics();
    return metrics.registry.ExposeText();
  };
  hopts.healthy = [&] { return !lost.load(); };
  hopts.ready = [&] { return controller.Synced(); };
  // The informers exist before the endpoints serve: /metrics (UpdateMetrics) and /readyz
  // (Synced) read the controller's informer lists, which StartInformers fills.
  controller.StartInformers();
  kinfer::controller::HttpEndpoints http(hopts);
  if (kinfer::Status s = http.Start(); !s.ok()) {
    spdlog::critical("{}", s.ToString());
    return 1;
  }
  // Leading starts the workers once the caches hold their first lists (a worker that planned
  // from an empty cache would try to create what exists). The wait runs on its own thread so
  // that signals and the elector stay responsive.
  std::atomic<bool> stopping{false};
  std::mutex starter_mu;
  std::thread starter;  // guarded by starter_mu
  auto lead = [&] {
    std::lock_guard<std::mutex> l(starter_mu);
    if (stopping.load()) return;
    metrics.leader.Get().Set(1);
    starter = std::thread([&] {
      while (!stopping.load() && !controller.WaitForSync(std::chrono::milliseconds(200))) {
      }
      if (stopping.load()) return;
      spdlog::info("leading: starting {} workers{}", flags.workers,
                   flags.autoscale ? " and the autoscaler" : "");
      controller.StartWorkers();
      if (flags.autoscale) autoscaler.Start();
    });
  };

  std::unique_ptr<kinfer::kube::LeaderElector> elector;
  if (flags.leader_elect) {
    kinfer::kube::LeaderElectionConfig le;
    le.lease_namespace = flags.lease_namespace;
    if (le.lease_namespace.empty()) {
      const char* ns = std::getenv("POD_NAMESPACE");
      le.lease_namespace = ns != nullptr && *ns != '\0' ? ns : config->ns;
    }
    le.lease_name = flags.lease_name;
    le.identity = identity;
    if (kinfer::Status s = kinfer::kube::ValidateLeaderElectionConfig(le); !s.ok()) {
      spdlog::critical("leader election: {}", s.ToString());
      return 2;
    }
    // `le` ends with this block: the callback keeps its own copy.
    elector = std::make_unique<kinfer::kube::LeaderElector>(client->get(), le, lead, [&, le] {
      // Another replica may lead now: stop writing at once, from here (the main loop may be
      // in a shutdown that waits on workers), without releasing anything.
      spdlog::error("lost the leader Lease {}/{}; exiting", le.lease_namespace, le.lease_name);
      metrics.leader.Get().Set(0);
      lost = true;
      spdlog::default_logger()->flush();
      std::_Exit(1);
    });
    spdlog::info("waiting for the leader Lease {}/{}", le.lease_namespace, le.lease_name);
    elector->Start();
  } else {
    lead();
  }

  int sig = 0;
  const timespec tick{0, 200 * 1000 * 1000};
  while (!lost.load()) {
    sig = sigtimedwait(&sigs, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM) break;
  }
  if (lost.load()) {
    // Another replica leads now: stop writing at once, without releasing anything.
    std::_Exit(1);
  }
  spdlog::info("received {}; stopping", sig == SIGINT ? "SIGINT" : "SIGTERM");
  // The workers finish the reconcile in hand, whose writes may each wait out the 30 s request
  // timeout on a slow API server: past the deadline, exit without waiting for them (and without
  // releasing the Lease, which a worker may still write under; the standby takes it when it
  // expires). The thread touches nothing of main's, so returning first is safe.
  std::thread([timeout = flags.shutdown_timeout_seconds] {
    std::this_thread::sleep_for(std::chrono::seconds(timeout));
    spdlog::error("shutdown took longer than {} s (--shutdown-timeout); exiting now", timeout);
    spdlog::default_logger()->flush();
    std::_Exit(1);
  }).detach();
  {
    std::lock_guard<std::mutex> l(starter_mu);
    stopping = true;  // a leadership won from now on starts nothing
  }
  if (starter.joinable()) starter.join();
  autoscaler.Stop();
  controller.Stop();
  if (elector) elector->Stop(/*release=*/true);  // hand over at once
  http.Stop();
  spdlog::info("stopped");
  return 0;
}
