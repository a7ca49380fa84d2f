#include "operator/autoscale/metrics_collector.h"

#include <cpprest/http_client.h>

#include <chrono>
#include <exception>
#include <optional>
#include <stdexcept>
#include <utility>

namespace kinfer::autoscale {
namespace {

namespace http = web::http;

}  // namespace

std::vector<PodScrape> ScrapeAll(const std::vector<PodEndpoint>& endpoints,
                                 const CollectorOptions& options) {
  using Outcome = std::pair<Status, std::string>;
  std::vector<PodScrape> out(endpoints.size());
  std::vector<std::optional<pplx::task<Outcome>>> tasks(endpoints.size());
  // Each client lives until its request is done (its pipeline serves the request).
  std::vector<std::optional<http::client::http_client>> clients(endpoints.size());
  http::client::http_client_config config;
  config.set_timeout(options.timeout);
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < endpoints.size(); ++i) {
    out[i].pod = endpoints[i].pod;
    out[i].ready = endpoints[i].ready;
    if (!endpoints[i].ready) {
      out[i].status = FailedPrecondition("pod not ready: not scraped");
      continue;
    }
    const std::string address = endpoints[i].address;
    const auto timeout = options.timeout;
    try {
      clients[i].emplace("http://" + address, config);
      tasks[i] = clients[i]
                     ->request(http::methods::GET, options.path)
                     .then([](http::http_response response) {
                       if (response.status_code() != http::status_codes::OK) {
                         throw std::runtime_error("HTTP " + std::to_string(response.status_code()));
                       }
                       return response.extract_string(/*ignore_content_type=*/true);
                     })
                     .then([start, timeout, address](pplx::task<std::string> done) -> Outcome {
                       try {
                         return {Status(), done.get()};
                       } catch (const std::exception& e) {
                         std::string message = "scrape of " + address + " failed: " + e.what();
                         // cpprestsdk reports its timeout as a failed read: tell it by the time
                         // taken.
                         bool timed_out = std::chrono::steady_clock::now() - start >= timeout;
                         return {timed_out ? DeadlineExceeded(std::move(message))
                                           : Unavailable(std::move(message)),
                                 std::string()};
                       }
                     });
    } catch (const std::exception& e) {  // a bad address: cpprestsdk throws on the URI
      out[i].status = InvalidArgument("bad address " + address + ": " + e.what());
    }
  }
  for (size_t i = 0; i < endpoints.size(); ++i) {
    if (!tasks[i]) continue;
    try {
      Outcome outcome = tasks[i]->get();
      out[i].status = std::move(outcome.first);
      out[i].body = std::move(outcome.second);
    } catch (const std::exception& e) {  // not expected: the continuation catches
      out[i].status = Unavailable(std::string("scrape failed: ") + e.what());
    }
  }
  return out;
}

std::vector<PodSample> MetricsCollector::Collect(const std::vector<PodEndpoint>& pods) {
  return sampler_.Sample(ScrapeAll(pods, options_));
}

}  // namespace kinfer::autoscale
