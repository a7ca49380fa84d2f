// kinfer-metrics-probe: runs the operator's MetricsCollector against given sidecars and prints
// what the Autoscaler would be fed. For people (is my pod's /metrics readable?) and for the
// integration test tests/python/test_metrics_collector.py.
//
//   kinfer-metrics-probe [--timeout-ms 1000] [--path /metrics] NAME=HOST:PORT...
//
// Each line read on stdin triggers one Collect() of all pods and prints one line of JSON: an
// array of PodSamples {"pod","ready","has_metrics","queue_depth","in_flight",
// "ttft_upper_bounds","ttft_counts"}. The first collect records the TTFT baselines. EOF exits 0;
// bad arguments exit 2. Only wiring: the logic is in metrics_collector / pod_sampler.
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "operator/autoscale/metrics_collector.h"

int main(int argc, char** argv) {
  using kinfer::autoscale::PodEndpoint;
  kinfer::autoscale::CollectorOptions options;
  std::vector<PodEndpoint> pods;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if ((arg == "--timeout-ms" || arg == "--path") && i + 1 < argc) {
      std::string value = argv[++i];
      if (arg == "--path") {
        options.path = value;
        continue;
      }
      try {
        options.timeout = std::chrono::milliseconds(std::stoi(value));
      } catch (const std::exception&) {
        std::fprintf(stderr, "bad --timeout-ms %s\n", value.c_str());
        return 2;
      }
      continue;
    }
    size_t eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 || eq == std::string::npos || eq == 0 || eq + 1 == arg.size()) {
      std::fprintf(stderr,
                   "usage: kinfer-metrics-probe [--timeout-ms MS] [--path P] NAME=HOST:PORT...\n");
      return 2;
    }
    pods.push_back(PodEndpoint{arg.substr(0, eq), arg.substr(eq + 1), true});
  }
  if (pods.empty()) {
    std::fprintf(stderr,
                 "usage: kinfer-metrics-probe [--timeout-ms MS] [--path P] NAME=HOST:PORT...\n");
    return 2;
  }
  kinfer::autoscale::MetricsCollector collector(options);
  std::string line;
  while (std::getline(std::cin, line)) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& s : collector.Collect(pods)) {
      out.push_back({{"pod", s.pod},
                     {"ready", s.ready},
                     {"has_metrics", s.has_metrics},
                     {"queue_depth", s.queue_depth},
                     {"in_flight", s.in_flight},
                     {"ttft_upper_bounds", s.ttft_upper_bounds},
                     {"ttft_counts", s.ttft_counts}});
    }
    std::cout << out.dump() << std::endl;
  }
  return 0;
}
