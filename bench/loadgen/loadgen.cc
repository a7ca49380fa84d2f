// kinfer-loadgen: an open-loop HTTP/1.1 load generator for latency benchmarks of kinfer-sidecar
// (and of anything OpenAI-compatible on plain http://).
//
//   kinfer-loadgen --url http://127.0.0.1:8080/v1/chat/completions --rate 1000 --duration 10
//                  [--warmup 2] [--body FILE | --body-json '{...}'] [--stream] [--poisson]
//                  [--method POST] [--connections-max 256] [--header 'k: v']... [--timeout 30]
//                  [--json OUT.json] [--label NAME] [--seed 1]
//
// Open loop: request k is due at start + k/R (or at Poisson arrival times with --poisson) on the
// steady clock, whatever the responses do, and every latency is measured from that SCHEDULED time,
// so a stall of the server (or a wait for a connection) shows up in the percentiles instead of
// silently slowing the generator down (no coordinated omission).
//
// Connections: a keep-alive pool. A due request takes an idle connection (most recently used
// first), else opens a new one while fewer than --connections-max exist, else waits FIFO for the
// next connection to come free (the wait is part of its latency).
//
// Measured per request: total latency (last body byte), first-byte latency (first body byte; for
// an SSE stream, the first chunk), HTTP status. Connect / read / write failures and timeouts are
// errors, counted apart from statuses. Warmup requests are sent but not recorded.
//
// Output: one JSON object on stdout (and in --json FILE) and a one-line summary on stderr.
// Percentiles are exact, nearest-rank, over every recorded sample.
//
// Threading: one thread and one io_context; no locks. At 1000 req/s it needs a fraction of a core.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <deque>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "bench/loadgen/loadgen_options.h"

namespace kinfer::loadgen {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

// ---- statistics ---------------------------------------------------------------------------

// Nearest-rank percentiles of latencies in nanoseconds, reported in milliseconds.
Json Summary(std::vector<int64_t> ns) {
  if (ns.empty()) return Json{{"count", 0}};
  std::sort(ns.begin(), ns.end());
  auto ms = [](double v) { return std::round(v / 1e3) / 1e3; };  // 1 us resolution
  auto pct = [&](double p) {
    const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(ns.size())));
    return ms(static_cast<double>(ns[std::max<size_t>(rank, 1) - 1]));
  };
  double sum = 0;
  for (int64_t v : ns) sum += static_cast<double>(v);
  return Json{{"count", ns.size()},
              {"mean", ms(sum / static_cast<double>(ns.size()))},
              {"min", ms(static_cast<double>(ns.front()))},
              {"p50", pct(50)},
              {"p90", pct(90)},
              {"p99", pct(99)},
              {"p999", pct(99.9)},
              {"max", ms(static_cast<double>(ns.back()))}};
}

// ---- the generator ------------------------------------------------------------------------

enum class ErrorKind { kConnect, kIo, kTimeout, kInterrupted };

struct Due {
  Clock::time_point scheduled;
  bool measured;  // false during the warmup
};

class LoadGen;

// One keep-alive connection; carries one request at a time.
class Conn : public std::enable_shared_from_this<Conn> {
 public:
  Conn(net::io_context& ioc, LoadGen& gen) : socket_(ioc), gen_(gen) {}
  void Send(Due due);
  // Closes the socket; the pending operation then fails with `kind`.
  void Abort(ErrorKind kind);
  void Close() {
    beast::error_code ignored;
    socket_.close(ignored);
  }
  bool busy() const { return busy_; }
  const Due& due() const { return due_; }

 private:
  void Write();
  void ReadSome();
  void OnRead(beast::error_code ec);
  void Failed(ErrorKind kind);
  // An I/O error before any response byte on a connection that served earlier requests.
  bool Stale() const { return served_ > 0 && !aborted_ && !(parser_ && parser_->got_some()); }

  tcp::socket socket_;
  LoadGen& gen_;
  beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::string_body>> parser_;
  Due due_{};
  Clock::time_point first_byte_{};
  bool busy_ = false;
  bool connected_ = false;
  uint64_t served_ = 0;               // responses read on this connection
  std::optional<ErrorKind> aborted_;  // why Abort() closed the socket
};

class LoadGen {
 public:
  LoadGen(net::io_context& ioc, Options options, tcp::resolver::results_type endpoints)
      : ioc_(ioc),
        o_(std::move(options)),
        endpoints_(std::move(endpoints)),
        request_(BuildRequest(o_)),
        tick_(ioc),
        sweep_(ioc),
        signals_(ioc, SIGINT, SIGTERM),
        rng_(o_.seed) {
    const double expected = o_.rate * o_.duration_s * 1.05 + 16;
    total_ns_.reserve(static_cast<size_t>(expected));
    first_ns_.reserve(static_cast<size_t>(expected));
  }

  void Start() {
    signals_.async_wait([this](beast::error_code ec, int) {
      if (!ec) Interrupt();
    });
    start_ = Clock::now() + std::chrono::milliseconds(20);
    measure_from_ = start_ + ToDuration(o_.warmup_s);
    measure_to_ = measure_from_ + ToDuration(o_.duration_s);
    next_ = start_;
    ArmTick();
    ArmSweep();
  }

  Json Report() const;

  // ---- called by Conn ----
  const std::string& request() const { return request_; }
  const tcp::resolver::results_type& endpoints() const { return endpoints_; }
  void OnConnected() { ++connections_opened_; }
  void OnResponse(Conn* conn, const Due& due, Clock::time_point first, unsigned status, bool keep);
  void OnError(Conn* conn, const Due& due, ErrorKind kind);
  // A reused keep-alive connection was found closed before any response byte (the server's idle
  // timeout): the request goes back to the head of the queue, keeping its scheduled time.
  void OnStale(Conn* conn, const Due& due);

 private:
  static Clock::duration ToDuration(double seconds) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  }

  void ArmTick() {
    tick_.expires_at(next_);
    tick_.async_wait([this](beast::error_code ec) {
      if (!ec) Tick();
    });
  }

  // Issues every request that is due, then sleeps until the next one.
  void Tick() {
    const Clock::time_point now = Clock::now();
    while (!scheduling_done_ && next_ <= now) {
      const bool measured = next_ >= measure_from_;
      max_lag_ = std::max(max_lag_, now - next_);
      ++(measured ? sent_ : warmup_sent_);
      ++outstanding_;
      Dispatch(Due{next_, measured});
      Advance();
    }
    if (scheduling_done_) return MaybeFinish();
    ArmTick();
  }

  void Advance() {
    ++k_;
    if (o_.poisson) {
      next_ += ToDuration(std::exponential_distribution<double>(o_.rate)(rng_));
    } else {
      next_ = start_ + ToDuration(static_cast<double>(k_) / o_.rate);
    }
    if (next_ >= measure_to_) scheduling_done_ = true;
  }

  void Dispatch(Due due) {
    waiting_.push_back(due);
    Pump();
    max_waiting_ = std::max(max_waiting_, waiting_.size());
  }

  // Hands waiting requests to idle connections, opening new ones up to the limit.
  void Pump() {
    while (!waiting_.empty()) {
      Conn* conn = nullptr;
      if (!idle_.empty()) {
        conn = idle_.back();
        idle_.pop_back();
      } else if (conns_.size() < o_.connections_max) {
        conns_.push_back(std::make_shared<Conn>(ioc_, *this));
        conn = conns_.back().get();
      } else {
        return;
      }
      const Due due = waiting_.front();
      waiting_.pop_front();
      conn->Send(due);
    }
  }

  void Drop(Conn* conn) {
    idle_.erase(std::remove(idle_.begin(), idle_.end(), conn), idle_.end());
    auto it = std::find_if(conns_.begin(), conns_.end(),
                           [conn](const std::shared_ptr<Conn>& c) { return c.get() == conn; });
    if (it != conns_.end()) {
      std::swap(*it, conns_.back());
      conns_.pop_back();
    }
  }

  // Times out requests older than --timeout, on a connection or still waiting for one.
  void ArmSweep() {
    sweep_.expires_after(std::chrono::milliseconds(100));
    sweep_.async_wait([this](beast::error_code ec) {
      if (ec || finished_) return;
      const Clock::time_point limit = Clock::now() - ToDuration(o_.timeout_s);
      for (const auto& c : std::vector<std::shared_ptr<Conn>>(conns_)) {
        if (c->busy() && c->due().scheduled < limit) c->Abort(ErrorKind::kTimeout);
      }
      while (!waiting_.empty() && waiting_.front().scheduled < limit) {
        const Due due = waiting_.front();
        waiting_.pop_front();
        CountError(due, ErrorKind::kTimeout);
      }
      MaybeFinish();
      if (!finished_) ArmSweep();
    });
  }

  void CountError(const Due& due, ErrorKind kind) {
    --outstanding_;
    if (!due.measured) {
      ++warmup_errors_;
      return;
    }
    ++errors_[static_cast<int>(kind)];
  }

  void MaybeFinish() {
    if (finished_ || !scheduling_done_ || outstanding_ > 0) return;
    finished_ = true;
    end_ = Clock::now();
    tick_.cancel();
    sweep_.cancel();
    signals_.cancel();
    for (const auto& c : conns_) c->Close();
    idle_.clear();
  }

  // SIGINT/SIGTERM: stop scheduling and report what was recorded; outstanding requests are errors.
  void Interrupt() {
    interrupted_ = true;
    scheduling_done_ = true;
    tick_.cancel();
    for (const auto& c : std::vector<std::shared_ptr<Conn>>(conns_)) {
      if (c->busy()) c->Abort(ErrorKind::kInterrupted);
    }
    while (!waiting_.empty()) {
      CountError(waiting_.front(), ErrorKind::kInterrupted);
      waiting_.pop_front();
    }
    MaybeFinish();
  }

  net::io_context& ioc_;
  const Options o_;
  const tcp::resolver::results_type endpoints_;
  const std::string request_;
  net::steady_timer tick_;
  net::steady_timer sweep_;
  net::signal_set signals_;
  std::mt19937_64 rng_;

  Clock::time_point start_, measure_from_, measure_to_, next_, end_;
  uint64_t k_ = 0;
  bool scheduling_done_ = false;
  bool finished_ = false;
  bool interrupted_ = false;

  std::vector<std::shared_ptr<Conn>> conns_;  // open or opening
  std::vector<Conn*> idle_;                   // keep-alive, no request
  std::deque<Due> waiting_;                   // due, waiting for a connection

  uint64_t outstanding_ = 0;  // dispatched, not yet answered or failed
  uint64_t sent_ = 0, warmup_sent_ = 0, completed_ = 0, warmup_errors_ = 0;
  uint64_t errors_[4] = {0, 0, 0, 0};  // by ErrorKind
  uint64_t connections_opened_ = 0;    // connects that succeeded
  uint64_t stale_retries_ = 0;
  size_t max_waiting_ = 0;
  Clock::duration max_lag_{};
  std::map<unsigned, uint64_t> statuses_;
  std::vector<int64_t> total_ns_, first_ns_;
};

// ---- Conn ---------------------------------------------------------------------------------

void Conn::Send(Due due) {
  due_ = due;
  busy_ = true;
  aborted_.reset();
  parser_.reset();
  if (connected_) return Write();
  net::async_connect(socket_, gen_.endpoints(),
                     [self = shared_from_this()](beast::error_code ec, const tcp::endpoint&) {
                       if (ec) return self->Failed(self->aborted_.value_or(ErrorKind::kConnect));
                       self->connected_ = true;
                       self->gen_.OnConnected();
                       beast::error_code ignored;
                       self->socket_.set_option(tcp::no_delay(true), ignored);
                       self->Write();
                     });
}

void Conn::Write() {
  net::async_write(socket_, net::buffer(gen_.request()),
                   [self = shared_from_this()](beast::error_code ec, size_t) {
                     if (ec) return self->Failed(self->aborted_.value_or(ErrorKind::kIo));
                     self->parser_.emplace();
                     // No limit: the body is dropped as it arrives. (Not boost::none: Beast 1.74
                     // compares the length with the optional and then rejects every body.)
                     self->parser_->body_limit(std::numeric_limits<uint64_t>::max());
                     self->first_byte_ = Clock::time_point{};
                     self->ReadSome();
                   });
}

void Conn::ReadSome() {
  http::async_read_some(
      socket_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
}

void Conn::OnRead(beast::error_code ec) {
  if (ec) return Failed(aborted_.value_or(ErrorKind::kIo));
  const Clock::time_point now = Clock::now();
  std::string& body = parser_->get().body();
  if (first_byte_ == Clock::time_point{} && (!body.empty() || parser_->is_done())) {
    first_byte_ = now;
  }
  body.clear();  // memory stays bounded by one read, however long the stream
  if (!parser_->is_done()) return ReadSome();
  ++served_;
  busy_ = false;
  const bool keep = parser_->get().keep_alive();
  const unsigned status = parser_->get().result_int();
  if (!keep) {
    Close();
    connected_ = false;
  }
  gen_.OnResponse(this, due_, first_byte_, status, keep);
}

void Conn::Abort(ErrorKind kind) {
  aborted_ = kind;
  Close();
}

void Conn::Failed(ErrorKind kind) {
  busy_ = false;
  Close();
  if (kind == ErrorKind::kIo && Stale()) return gen_.OnStale(this, due_);
  gen_.OnError(this, due_, kind);
}

// ---- LoadGen, the parts that need Conn ----------------------------------------------------

void LoadGen::OnResponse(Conn* conn, const Due& due, Clock::time_point first, unsigned status,
                         bool keep) {
  const Clock::time_point now = Clock::now();
  --outstanding_;
  if (due.measured) {
    ++completed_;
    ++statuses_[status];
    total_ns_.push_back((now - due.scheduled).count());
    first_ns_.push_back((first - due.scheduled).count());
  }
  if (!keep) {
    Drop(conn);
  } else if (!finished_) {
    idle_.push_back(conn);
  }
  Pump();
  MaybeFinish();
}

void LoadGen::OnError(Conn* conn, const Due& due, ErrorKind kind) {
  CountError(due, kind);
  Drop(conn);
  Pump();
  MaybeFinish();
}

void LoadGen::OnStale(Conn* conn, const Due& due) {
  ++stale_retries_;
  Drop(conn);
  waiting_.push_front(due);
  Pump();
}

Json LoadGen::Report() const {
  const double elapsed = std::chrono::duration<double>(end_ - measure_from_).count();
  Json status = Json::object();
  for (const auto& [code, n] : statuses_) status[std::to_string(code)] = n;
  const uint64_t errors = errors_[0] + errors_[1] + errors_[2] + errors_[3];
  return Json{
      {"label", o_.label},
      {"url", o_.url},
      {"method", o_.method},
      {"rate", o_.rate},
      {"arrival", o_.poisson ? "poisson" : "uniform"},
      {"duration_s", o_.duration_s},
      {"warmup_s", o_.warmup_s},
      {"stream", o_.stream},
      {"connections_max", o_.connections_max},
      {"sent", sent_},
      {"completed", completed_},
      {"errors", errors},
      {"error_kinds",
       {{"connect", errors_[0]},
        {"io", errors_[1]},
        {"timeout", errors_[2]},
        {"interrupted", errors_[3]}}},
      {"status", status},
      {"warmup_sent", warmup_sent_},
      {"warmup_errors", warmup_errors_},
      {"achieved_rate", std::round(static_cast<double>(sent_) / o_.duration_s * 10) / 10},
      {"elapsed_s", std::round(elapsed * 1000) / 1000},
      {"interrupted", interrupted_},
      {"connections_opened", connections_opened_},
      {"stale_connection_retries", stale_retries_},
      {"max_waiting_for_connection", max_waiting_},
      {"max_schedule_lag_ms",
       std::round(std::chrono::duration<double, std::milli>(max_lag_).count() * 1000) / 1000},
      {"latency_ms", {{"total", Summary(total_ns_)}, {"first_byte", Summary(first_ns_)}}},
  };
}

int Run(int argc, char** argv) {
  const Options o = ParseOptions(argc, argv);
  net::io_context ioc(1);
  tcp::resolver resolver(ioc);
  beast::error_code ec;
  auto endpoints = resolver.resolve(o.host, o.port, ec);
  if (ec) {
    std::fprintf(stderr, "kinfer-loadgen: resolve %s:%s: %s\n", o.host.c_str(), o.port.c_str(),
                 ec.message().c_str());
    return 2;
  }
  LoadGen gen(ioc, o, std::move(endpoints));
  gen.Start();
  ioc.run();

  const Json report = gen.Report();
  const std::string text = report.dump(2, ' ', false, Json::error_handler_t::replace);
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
  if (!o.json_out.empty()) {
    std::ofstream out(o.json_out);
    out << text << "\n";
    if (!out) {
      std::fprintf(stderr, "kinfer-loadgen: cannot write %s\n", o.json_out.c_str());
      return 1;
    }
  }
  const Json& total = report["latency_ms"]["total"];
  std::fprintf(
      stderr,
      "%s: rate=%g sent=%llu completed=%llu errors=%llu p50=%sms p99=%sms p999=%sms "
      "max=%sms\n",
      o.label.c_str(), o.rate, static_cast<unsigned long long>(report["sent"].get<uint64_t>()),
      static_cast<unsigned long long>(report["completed"].get<uint64_t>()),
      static_cast<unsigned long long>(report["errors"].get<uint64_t>()),
      total.value("p50", Json()).dump().c_str(), total.value("p99", Json()).dump().c_str(),
      total.value("p999", Json()).dump().c_str(), total.value("max", Json()).dump().c_str());
  return 0;
}

}  // namespace
}  // namespace kinfer::loadgen

int main(int argc, char** argv) { return kinfer::loadgen::Run(argc, argv); }
