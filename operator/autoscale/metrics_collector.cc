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

std::vector<std::pair<Status, std::string>> HttpGetAll(const std::vector<std::string>& urls,
                                                       std::chrono::milliseconds timeout) {
  using Outcome = std::pair<Status, std::string>;
  std::vector<Outcome> out(urls.size());
  std::vector<std::optional<pplx::task<Outcome>>> tasks(urls.size());
  // Each client lives until its request is done (its pipeline serves the request).
  std::vector<std::optional<http::client::http_client>> clients(urls.size());
  http::client::http_client_config config;
  config.set_timeout(timeout);
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < urls.size(); ++i) {
    const std::string url = urls[i];
    try {
      clients[i].emplace(url, config);
      tasks[i] = clients[i]
                     ->request(http::methods::GET)
                     .then([](http::http_response response) {
                       const int code = response.status_code();
                       return response.extract_string(/*ignore_content_type=*/true)
                           .then([code](std::string body) -> Outcome {
                             if (code == http::status_codes::OK) return {Status(), std::move(body)};
                             std::string head = body.substr(0, 300);
                             return {Unavailable("HTTP " + std::to_string(code) + ": " + head),
                                     std::move(body)};
                           });
                     })
                     .then([start, timeout, url](pplx::task<Outcome> done) -> Outcome {
                       try {
                         return done.get();
                       } catch (const std::exception& e) {
                         std::string message = "GET " + url + " failed: " + e.what();
                         // cpprestsdk reports its timeout as a failed read: tell it by the time
                         // taken.
                         bool timed_out = std::chrono::steady_clock::now() - start >= timeout;
                         return {timed_out ? DeadlineExceeded(std::move(message))
                                           : Unavailable(std::move(message)),
                                 std::string()};
                       }
                     });
    } catch (const std::exception& e) {  // a bad address: cpprestsdk throws on the URI
      out[i].first = InvalidArgument("bad URL " + url + ": " + e.what());
    }
  }
  for (size_t i = 0; i < urls.size(); ++i) {
    if (!tasks[i]) continue;
    try {
      out[i] = tasks[i]->get();
    } catch (const std::exception& e) {  // not expected: the continuation catches
      out[i].first = Unavailable(std::string("GET failed: ") + e.what());
    }
  }
  return out;
}

std::vector<PodScrape> ScrapeAll(const std::vector<PodEndpoint>& endpoints,
                                 const CollectorOptions& options) {
  std::vector<PodScrape> out(endpoints.size());
  std::vector<std::string> urls;
  std::vector<size_t> index;  // urls[k] is endpoints[index[k]]
  for (size_t i = 0; i < endpoints.size(); ++i) {
    out[i].pod = endpoints[i].pod;
    out[i].ready = endpoints[i].ready;
    if (!endpoints[i].ready) {
      out[i].status = FailedPrecondition("pod not ready: not scraped");
      continue;
    }
    urls.push_back("http://" + endpoints[i].address + options.path);
    index.push_back(i);
  }
  std::vector<std::pair<Status, std::string>> got = HttpGetAll(urls, options.timeout);
  for (size_t k = 0; k < got.size(); ++k) {
    PodScrape& s = out[index[k]];
    s.status = std::move(got[k].first);
    if (s.status.ok()) {
      s.body = std::move(got[k].second);
    } else {
      s.status = Status(s.status.code(),
                        "scrape of " + endpoints[index[k]].address + ": " + s.status.message());
    }
  }
  return out;
}

std::vector<PodSample> MetricsCollector::Collect(const std::vector<PodEndpoint>& pods) {
  return sampler_.Sample(ScrapeAll(pods, options_));
}

}  // namespace kinfer::autoscale
