#include "operator/autoscale/metrics_collector.h"

#include <cpprest/http_client.h>
#include <dirent.h>
#include <sys/resource.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <deque>
#include <exception>
#include <limits>
#include <memory>
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

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = net::ip::tcp;

// A sidecar page is about 15 kB (docs/benchmarks.md, scrape fan-out); past this it is not one.
constexpr uint64_t kBodyLimit = 16u << 20;
// The read buffer of a scrape: a sidecar page in one or two reads.
constexpr size_t kReadBuffer = 16u << 10;

struct HostPort {
  std::string host;  // without the brackets of an IPv6 literal
  std::string port;
};

bool IsPort(const std::string& s) {
  if (s.empty() || s.size() > 5) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  const int port = std::stoi(s);
  return port >= 1 && port <= 65535;
}

// "host:port" or "[v6]:port"; nullopt when it is neither (no resolver is asked about junk).
std::optional<HostPort> ParseAddress(const std::string& address) {
  HostPort out;
  size_t colon;
  if (!address.empty() && address[0] == '[') {
    const size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return std::nullopt;
    }
    out.host = address.substr(1, close - 1);
    colon = close + 1;
  } else {
    colon = address.rfind(':');
    if (colon == std::string::npos) return std::nullopt;
    out.host = address.substr(0, colon);
    if (out.host.find(':') != std::string::npos) return std::nullopt;  // unbracketed IPv6
  }
  out.port = address.substr(colon + 1);
  if (out.host.empty() || !IsPort(out.port)) return std::nullopt;
  for (char c : out.host) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' ||
                    c == '_' || c == ':' || c == '%';
    if (!ok) return std::nullopt;
  }
  return out;
}

// How many scrapes may hold a socket at once: the soft RLIMIT_NOFILE less the descriptors open
// now and a reserve for the rest of the process (its API watches, listeners, the Prometheus
// queries running beside the scrapes). At least 8: past the budget, EMFILE makes the run wait.
size_t FileBudget() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) {
    return std::numeric_limits<size_t>::max();
  }
  size_t open = 64;  // when /proc cannot tell
  if (DIR* dir = opendir("/proc/self/fd")) {
    open = 0;
    while (dirent* e = readdir(dir)) {
      if (e->d_name[0] != '.') ++open;
    }
    closedir(dir);
  }
  const size_t soft = lim.rlim_cur;
  const size_t reserve = std::max<size_t>(32, soft / 16);
  if (soft <= open + reserve + 8) return 8;
  return soft - open - reserve;
}

bool OutOfDescriptors(const beast::error_code& ec) {
  return ec == net::error::no_descriptors ||
         (ec.category() == boost::system::system_category() && ec.value() == ENFILE);
}

// One ScrapeAll: every target fetched on this thread's own io_context, at most `limit` at once.
// Not cpprestsdk as HttpGetAll: an http_client per pod and a task continuation per step on its
// 40-thread pool cost about 6x the CPU per scrape, 43 threads, and one descriptor per pod with
// no bound, so that past the file limit scrapes failed (docs/benchmarks.md, scrape fan-out).
// A scrape: resolve (only for a name) -> connect -> write the GET -> read the answer, under one
// timer started with it; whichever of the answer, an error or the timer comes first finishes it
// and starts the next waiting one.
class ScrapeRun {
 public:
  using Outcome = std::pair<Status, std::string>;

  ScrapeRun(std::vector<std::pair<std::string, HostPort>> targets, const CollectorOptions& options)
      : targets_(std::move(targets)), options_(options), out_(targets_.size()) {
    limit_ = FileBudget();
    if (options.max_in_flight > 0) limit_ = std::min(limit_, options.max_in_flight);
    limit_ = std::max<size_t>(limit_, 1);
    for (size_t i = 0; i < targets_.size(); ++i) pending_.push_back(i);
  }

  std::vector<Outcome> Run() {
    StartWaiting();
    io_.run();
    return std::move(out_);
  }

 private:
  struct Fetch {
    explicit Fetch(net::io_context& io, size_t index)
        : index(index), socket(io), timer(io), resolver(io) {}
    size_t index;
    tcp::socket socket;
    net::steady_timer timer;
    tcp::resolver resolver;
    std::string request;
    beast::flat_buffer buffer;
    std::optional<bhttp::response_parser<bhttp::string_body>> parser;
    bool done = false;
  };
  using FetchPtr = std::shared_ptr<Fetch>;

  std::string Url(size_t i) const { return "http://" + targets_[i].first + options_.path; }

  void StartWaiting() {
    while (in_flight_ < limit_ && !pending_.empty()) {
      const size_t i = pending_.front();
      pending_.pop_front();
      ++in_flight_;
      Start(i);
    }
  }

  void Start(size_t i) {
    auto f = std::make_shared<Fetch>(io_, i);
    const auto& [address, hp] = targets_[i];
    f->request = "GET " + options_.path + " HTTP/1.1\r\nHost: " + address +
                 "\r\nUser-Agent: kinfer-operator\r\nAccept: text/plain\r\n"
                 "Connection: close\r\n\r\n";
    f->timer.expires_after(options_.timeout);
    f->timer.async_wait([this, f](beast::error_code ec) {
      if (ec || f->done) return;
      Finish(f, {DeadlineExceeded("GET " + Url(f->index) + ": no answer within " +
                                  std::to_string(options_.timeout.count()) + " ms"),
                 std::string()});
    });
    beast::error_code ec;
    const net::ip::address ip = net::ip::make_address(hp.host, ec);
    if (!ec) {
      Connect(f, tcp::endpoint(ip, static_cast<unsigned short>(std::stoi(hp.port))));
      return;
    }
    f->resolver.async_resolve(
        hp.host, hp.port, [this, f](beast::error_code ec, tcp::resolver::results_type results) {
          if (f->done) return;
          if (ec) return Fail(f, ec);
          net::async_connect(f->socket, results,
                             [this, f](beast::error_code ec, const tcp::endpoint&) {
                               if (f->done) return;
                               if (ec) return Fail(f, ec);
                               Send(f);
                             });
        });
  }

  void Connect(const FetchPtr& f, const tcp::endpoint& endpoint) {
    beast::error_code ec;
    f->socket.open(endpoint.protocol(), ec);
    if (ec) return Fail(f, ec);
    f->socket.async_connect(endpoint, [this, f](beast::error_code ec) {
      if (f->done) return;
      if (ec) return Fail(f, ec);
      Send(f);
    });
  }

  void Send(const FetchPtr& f) {
    net::async_write(f->socket, net::buffer(f->request), [this, f](beast::error_code ec, size_t) {
      if (f->done) return;
      if (ec) return Fail(f, ec);
      f->parser.emplace();
      // Beast reads 512 bytes at a time into an empty buffer: 30 reads for a sidecar page. Room
      // for the whole page halves the CPU of a 2000-pod round (docs/benchmarks.md).
      f->buffer.reserve(kReadBuffer);
      f->parser->body_limit(kBodyLimit);
      bhttp::async_read(f->socket, f->buffer, *f->parser, [this, f](beast::error_code ec, size_t) {
        if (f->done) return;
        if (ec) return Fail(f, ec);
        bhttp::response<bhttp::string_body> response = f->parser->release();
        const unsigned code = response.result_int();
        if (code == 200) return Finish(f, {Status(), std::move(response.body())});
        Finish(f,
               {Unavailable("HTTP " + std::to_string(code) + ": " + response.body().substr(0, 300)),
                std::string()});
      });
    });
  }

  void Fail(const FetchPtr& f, const beast::error_code& ec) {
    if (OutOfDescriptors(ec) && in_flight_ > 1) {
      // The process ran out of descriptors: fewer at once from now on, and this one waits for
      // one of the others to finish.
      limit_ = std::max<size_t>(1, in_flight_ - 1);
      Release(f);
      pending_.push_front(f->index);
      return;
    }
    Finish(f, {Unavailable("GET " + Url(f->index) + " failed: " + ec.message()), std::string()});
  }

  void Finish(const FetchPtr& f, Outcome outcome) {
    out_[f->index] = std::move(outcome);
    Release(f);
  }

  // Ends a fetch's I/O (its handlers still queued see `done`) and lets the next one start, from
  // the io_context rather than from here so that failures in a row do not recurse.
  void Release(const FetchPtr& f) {
    f->done = true;
    beast::error_code ignored;
    f->timer.cancel();
    f->resolver.cancel();
    f->socket.close(ignored);
    --in_flight_;
    net::post(io_, [this] { StartWaiting(); });
  }

  net::io_context io_{1};
  std::vector<std::pair<std::string, HostPort>> targets_;  // (address as given, parsed)
  const CollectorOptions& options_;
  std::vector<Outcome> out_;
  std::deque<size_t> pending_;  // not started yet, in order
  size_t in_flight_ = 0;
  size_t limit_ = 1;
};

}  // namespace

std::vector<PodScrape> ScrapeAll(const std::vector<PodEndpoint>& endpoints,
                                 const CollectorOptions& options) {
  std::vector<PodScrape> out(endpoints.size());
  std::vector<std::pair<std::string, HostPort>> targets;
  std::vector<size_t> index;  // targets[k] is endpoints[index[k]]
  for (size_t i = 0; i < endpoints.size(); ++i) {
    out[i].pod = endpoints[i].pod;
    out[i].ready = endpoints[i].ready;
    if (!endpoints[i].ready) {
      out[i].status = FailedPrecondition("pod not ready: not scraped");
      continue;
    }
    std::optional<HostPort> hp = ParseAddress(endpoints[i].address);
    if (!hp) {
      out[i].status = InvalidArgument("scrape of " + endpoints[i].address +
                                      ": bad address (want host:port or [v6]:port)");
      continue;
    }
    targets.emplace_back(endpoints[i].address, std::move(*hp));
    index.push_back(i);
  }
  std::vector<std::pair<Status, std::string>> got;
  try {
    got = ScrapeRun(std::move(targets), options).Run();
  } catch (const std::exception& e) {  // not expected (allocation): every scrape failed
    got.assign(index.size(), {Unavailable(std::string("scrape failed: ") + e.what()), ""});
  }
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
