// kinfer-scrape-bench: the operator's metrics scrape fan-out at scale (docs/benchmarks.md,
// bench/run_scrape_fanout.py drives it). Two modes, run as two processes so that each one's CPU
// and memory are its own:
//
//   kinfer-scrape-bench --mode serve --listeners N --page FILE [--path /metrics] [--threads 1]
//                       [--ports-out FILE]
//     N HTTP listeners on 127.0.0.1 answering GET /metrics with FILE (a kinfer-sidecar page).
//     Prints "LISTENING N" once all are bound (ports one per line in --ports-out) and serves
//     until SIGTERM or SIGINT; then prints one JSON line of counters and its CPU seconds.
//
//   kinfer-scrape-bench --mode scrape --targets FILE [--rounds 20] [--warmup 1]
//                       [--interval-ms 2000] [--timeout-ms 1000] [--expect-bytes B]
//                       [--nofile N] [--json OUT]
//     autoscale::ScrapeAll over every host:port of FILE (one a line), every interval, as the
//     operator's autoscale loop does; one line per round on stderr, the result (scrape_rounds.h)
//     as JSON on stdout and in OUT. --nofile sets the soft RLIMIT_NOFILE first (the limit an
//     operator pod may run under).
//
// Both modes raise the soft RLIMIT_NOFILE to the hard limit unless --nofile says otherwise; the
// scrape mode limits glibc to two malloc arenas, as kinfer-operator does.
// Only wiring: the measuring is in scrape_rounds.cc, the server in page_server.cc.
#include <malloc.h>
#include <signal.h>
#include <sys/resource.h>
#include <time.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/scrape/page_server.h"
#include "bench/scrape/scrape_rounds.h"
#include "common/flags.h"

namespace {

constexpr const char* kUsage = R"(usage:
  kinfer-scrape-bench --mode serve --listeners N --page FILE [--path /metrics] [--threads 1]
                      [--ports-out FILE]
  kinfer-scrape-bench --mode scrape --targets FILE [--rounds 20] [--warmup 1]
                      [--interval-ms 2000] [--timeout-ms 1000] [--expect-bytes B]
                      [--nofile N] [--json OUT]
)";

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

// Sets the soft file limit to `soft` (0: the hard limit); the limit in force after.
rlim_t SetFileLimit(rlim_t soft) {
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = soft == 0 ? lim.rlim_max : std::min(soft, lim.rlim_max);
  setrlimit(RLIMIT_NOFILE, &lim);
  getrlimit(RLIMIT_NOFILE, &lim);
  return lim.rlim_cur;
}

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

int Serve(const kinfer::bench::PageServerOptions& options, const std::string& ports_out) {
  // Block the stop signals before any thread starts, so that only sigwait below sees them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  auto server = kinfer::bench::PageServer::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "kinfer-scrape-bench: %s\n", server.status().ToString().c_str());
    return 1;
  }
  if (!ports_out.empty()) {
    std::ofstream out(ports_out);
    for (int port : (*server)->ports()) out << port << "\n";
    if (!out) {
      std::fprintf(stderr, "kinfer-scrape-bench: cannot write %s\n", ports_out.c_str());
      return 1;
    }
  }
  std::printf("LISTENING %zu\n", (*server)->ports().size());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop, &sig);
  (*server)->Stop();
  const auto& c = (*server)->counters();
  nlohmann::json out = {{"listeners", (*server)->ports().size()},
                        {"connections", c.connections.load()},
                        {"requests", c.requests.load()},
                        {"not_found", c.not_found.load()},
                        {"errors", c.errors.load()},
                        {"cpu_s", ProcessCpuSeconds()}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

int Scrape(const std::string& targets_path, const kinfer::bench::ScrapeRoundsOptions& options,
           const std::string& json_path) {
  std::ifstream in(targets_path);
  if (!in) {
    std::fprintf(stderr, "kinfer-scrape-bench: cannot read %s\n", targets_path.c_str());
    return 2;
  }
  std::vector<kinfer::autoscale::PodEndpoint> endpoints;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    endpoints.push_back({"pod-" + std::to_string(endpoints.size()), line, true});
  }
  if (endpoints.empty()) {
    std::fprintf(stderr, "kinfer-scrape-bench: no targets in %s\n", targets_path.c_str());
    return 2;
  }
  kinfer::bench::ScrapeRoundsResult result = kinfer::bench::RunScrapeRounds(endpoints, options);
  nlohmann::json out = kinfer::bench::ToJson(result, options);
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  out["nofile_soft"] = lim.rlim_cur;
  const std::string text = out.dump(1);
  std::printf("%s\n", text.c_str());
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << text << "\n";
    if (!f) {
      std::fprintf(stderr, "kinfer-scrape-bench: cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  kinfer::FlagReader flags(argc, argv, "kinfer-scrape-bench");
  std::string mode, page_path, ports_out, targets, json_path;
  kinfer::bench::PageServerOptions serve;
  kinfer::bench::ScrapeRoundsOptions scrape;
  long long nofile = 0;
  while (flags.Next()) {
    if (flags.Is("--help", "-h")) {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (flags.Is("--mode")) {
      mode = flags.Value();
    } else if (flags.Is("--listeners")) {
      serve.listeners = static_cast<int>(flags.Int(1, 60000));
    } else if (flags.Is("--page")) {
      page_path = flags.Value();
    } else if (flags.Is("--path")) {
      serve.path = flags.Value();
      scrape.collector.path = serve.path;
    } else if (flags.Is("--threads")) {
      serve.threads = static_cast<int>(flags.Int(1, 64));
    } else if (flags.Is("--ports-out")) {
      ports_out = flags.Value();
    } else if (flags.Is("--targets")) {
      targets = flags.Value();
    } else if (flags.Is("--rounds")) {
      scrape.rounds = static_cast<int>(flags.Int(1, 100000));
    } else if (flags.Is("--warmup")) {
      scrape.warmup_rounds = static_cast<int>(flags.Int(0, 1000));
    } else if (flags.Is("--interval-ms")) {
      scrape.interval = std::chrono::milliseconds(flags.Int(0, 3600000));
    } else if (flags.Is("--timeout-ms")) {
      scrape.collector.timeout = std::chrono::milliseconds(flags.Int(1, 3600000));
    } else if (flags.Is("--expect-bytes")) {
      scrape.expect_body_bytes = static_cast<size_t>(flags.Int(0, 1LL << 40));
    } else if (flags.Is("--nofile")) {
      nofile = flags.Int(16, 1LL << 30);
    } else if (flags.Is("--json")) {
      json_path = flags.Value();
    } else {
      flags.Unknown();
    }
  }
  const rlim_t limit = SetFileLimit(static_cast<rlim_t>(nofile));
  std::fprintf(stderr, "kinfer-scrape-bench: RLIMIT_NOFILE soft %llu\n",
               static_cast<unsigned long long>(limit));
  if (mode == "serve") {
    if (page_path.empty() || !ReadFile(page_path, &serve.body))
      flags.Fail("--page FILE unreadable");
    return Serve(serve, ports_out);
  }
  if (mode == "scrape") {
    if (targets.empty()) flags.Fail("--targets FILE is required");
    // As kinfer-operator's main() (operator/controller/main.cc), so that the RSS is its figure.
    mallopt(M_ARENA_MAX, 2);
    return Scrape(targets, scrape, json_path);
  }
  flags.Fail("--mode serve or --mode scrape");
}
