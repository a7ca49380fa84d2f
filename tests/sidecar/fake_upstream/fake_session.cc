#include "tests/sidecar/fake_upstream/fake_session.h"

#include <chrono>
#include <cstdio>
#include <utility>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>

namespace kinfer::fake {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

constexpr size_t kWatchBytes = 4096;
constexpr char kServer[] = "kinfer-fake-upstream";

std::string Dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Frames `data` as one HTTP/1.1 chunk.
void AppendChunk(std::string& out, std::string_view data) {
  char size[20];
  int n = std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  out.append(size, static_cast<size_t>(n));
  out.append(data);
  out.append("\r\n");
}

}  // namespace

FakeSession::FakeSession(net::ip::tcp::socket socket, FakeState& state)
    : socket_(std::move(socket)), timer_(socket_.get_executor()), state_(state) {}

void FakeSession::Start() {
  net::dispatch(socket_.get_executor(), [self = shared_from_this()] { self->DoRead(); });
}

// ---- reading ------------------------------------------------------------------------------

void FakeSession::DoRead() {
  parser_.emplace();
  parser_->body_limit(kMaxBodyBytes);
  http::async_read_header(
      socket_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
}

void FakeSession::OnHeader(beast::error_code ec) {
  if (closed_) return;
  if (ec || parser_->is_done()) return OnRead(ec);
  auto read_body = [self = shared_from_this()](beast::error_code ec, size_t) {
    if (ec || self->closed_) return self->OnRead(ec);
    http::async_read(self->socket_, self->buffer_, *self->parser_,
                     [self](beast::error_code ec, size_t) { self->OnRead(ec); });
  };
  const auto expect = parser_->get().find(http::field::expect);
  if (expect != parser_->get().end() && beast::iequals(expect->value(), "100-continue")) {
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    net::async_write(socket_, net::buffer(kContinue.data(), kContinue.size()),
                     std::move(read_body));
    return;
  }
  read_body(beast::error_code(), 0);
}

void FakeSession::OnRead(beast::error_code ec) {
  if (closed_) return;
  const bool parse_error =
      ec.category() == http::make_error_code(http::error::bad_target).category() &&
      ec != http::error::end_of_stream && ec != http::error::partial_message;
  if (parse_error) {
    // A malformed or oversized request: answer it, then close (the stream is out of sync).
    const bool too_big = ec == http::error::body_limit;
    active_ = true;
    keep_alive_ = false;
    req_ = {};
    std::string_view path = "other";
    if (too_big) {  // the request line is parsed when the Content-Length is over the limit
      req_.base() = parser_->get().base();
      path = std::string_view(req_.target().data(), req_.target().size());
      path = path.substr(0, path.find('?'));
    }
    id_ = state_.OnRequestStart(path);
    counted_ = true;
    ReplyError(too_big ? 413 : 400, too_big ? "request body larger than 8 MiB"
                                            : "malformed HTTP request: " + ec.message());
    return;
  }
  if (ec) {  // end of stream, reset, ...: the client is gone between requests
    Close();
    return;
  }
  req_ = parser_->release();
  active_ = true;
  keep_alive_ = req_.keep_alive();
  // With a pipelined request already buffered the parser must read next, so no watch then.
  if (buffer_.size() == 0) StartWatch();
  std::string_view target(req_.target().data(), req_.target().size());
  Route(target.substr(0, target.find('?')));
}

void FakeSession::StartWatch() {
  watching_ = true;
  socket_.async_read_some(
      buffer_.prepare(kWatchBytes),
      [self = shared_from_this()](beast::error_code ec, size_t n) { self->OnWatch(ec, n); });
}

void FakeSession::OnWatch(beast::error_code ec, size_t bytes) {
  watching_ = false;
  if (closed_) return;
  if (ec) {  // the client closed (or reset) the connection
    if (active_) {
      FinishRequest(Outcome::kCancelled);
    } else {
      Close();
    }
    return;
  }
  buffer_.commit(bytes);
  // Between requests the watch is simply the first read of the next one. During a request the
  // bytes wait in buffer_ (pipelining) and watching stops: the parser must own the next read.
  if (!active_) DoRead();
}

// ---- routing ------------------------------------------------------------------------------

void FakeSession::Route(std::string_view path) {
  if (path == "/control" || path.substr(0, 9) == "/control/") {
    HandleControl(path);
    return;
  }
  id_ = state_.OnRequestStart(path);
  counted_ = true;
  const bool get = req_.method() == http::verb::get;
  const bool post = req_.method() == http::verb::post;
  if (path == "/v1/chat/completions" || path == "/v1/completions") {
    if (!post) return ReplyError(405, "use POST");
    return HandleModelRequest(path, path == "/v1/chat/completions");
  }
  if (path == "/health" || path == "/ready") {
    if (!get) return ReplyError(405, "use GET");
    return Reply(200, R"({"status":"ok"})");
  }
  if (path == "/v1/models") {
    if (!get) return ReplyError(405, "use GET");
    return Reply(200, ModelsBody(state_.models()));
  }
  if (path == "/metrics") {
    if (!get) return ReplyError(405, "use GET");
    return Reply(200, state_.MetricsText(), "text/plain; version=0.0.4; charset=utf-8");
  }
  ReplyError(404, "no route for " + std::string(path));
}

void FakeSession::HandleControl(std::string_view path) {
  const bool get = req_.method() == http::verb::get;
  const bool post = req_.method() == http::verb::post;
  if (path == "/control/stats") {
    if (!get) return ReplyError(405, "use GET");
    return Reply(200, Dump(state_.StatsJson()));
  }
  if (path == "/control/reset") {
    if (!post) return ReplyError(405, "use POST");
    state_.Reset();
    return Reply(200, Dump(ToJson(state_.Knobs())));
  }
  if (path == "/control") {
    if (get) return Reply(200, Dump(ToJson(state_.Knobs())));
    if (!post) return ReplyError(405, "use GET or POST");
    nlohmann::json body = nlohmann::json::parse(req_.body(), nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded()) return ReplyError(400, "control body is not valid JSON");
    Status st = state_.MergeControl(body);
    if (!st.ok()) return ReplyError(400, st.message());
    return Reply(200, Dump(ToJson(state_.Knobs())));
  }
  ReplyError(404, "no route for " + std::string(path));
}

void FakeSession::HandleModelRequest(std::string_view path, bool chat) {
  nlohmann::json body = nlohmann::json::parse(req_.body(), nullptr, /*allow_exceptions=*/false);
  const bool json_ok = !body.is_discarded();
  StatusOr<CompletionRequest> parsed =
      json_ok ? ParseCompletionRequest(chat, body)
              : StatusOr<CompletionRequest>(InvalidArgument("request body is not valid JSON"));
  if (parsed.ok()) {
    completion_ = std::move(parsed).value();
    completion_.body_bytes = req_.body().size();
    completion_.headers = SelectedHeaders(req_.base());
  }
  state_.SetLastRequest({{"method", std::string(req_.method_string())},
                         {"path", path},
                         {"headers", AllHeaders(req_.base())},
                         {"body", json_ok ? std::move(body) : nlohmann::json(req_.body())}});
  if (!parsed.ok()) return ReplyError(400, parsed.status().message());
  if (!state_.HasModel(completion_.model)) {
    return ReplyError(404, "The model '" + completion_.model + "' does not exist");
  }
  settings_ = state_.Knobs().settings;
  Status st = ApplyHeaderOverrides(req_.base(), settings_);
  if (!st.ok()) return ReplyError(400, st.message());
  if (settings_.reset) return FinishRequest(Outcome::kAborted);
  if (state_.TakeFailFirst()) settings_.status = 503;

  waiter_ = std::make_shared<CapacityWaiter>();
  waiter_->grant = [self = shared_from_this()] {
    net::post(self->socket_.get_executor(), [self] { self->OnSlot(); });
  };
  if (state_.Acquire(waiter_)) {
    waiter_.reset();
    OnSlot();
  }
}

void FakeSession::OnSlot() {
  if (closed_ || !active_) return;  // cancelled meanwhile: Abandon() gave the slot back
  waiter_.reset();
  holds_slot_ = true;
  if (settings_.latency_ms == 0) return Respond();
  timer_.expires_after(std::chrono::milliseconds(settings_.latency_ms));
  timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (!ec && !self->closed_) self->Respond();
  });
}

void FakeSession::Respond() {
  if (settings_.hang) return;  // the watch ends it when the client gives up
  if (settings_.status != 200) {
    return ReplyError(static_cast<unsigned>(settings_.status),
                      "injected failure (status " + std::to_string(settings_.status) + ")");
  }
  if (completion_.stream) return StartStream();
  Reply(200, CompletionBody(completion_, id_, settings_.chunks));
}

// ---- streaming ----------------------------------------------------------------------------

void FakeSession::StartStream() {
  const bool http11 = req_.version() >= 11;
  if (!http11) keep_alive_ = false;  // HTTP/1.0: no chunking, the body ends at close
  out_ = http11 ? "HTTP/1.1 200 OK\r\n" : "HTTP/1.0 200 OK\r\n";
  out_ += "Server: ";
  out_ += kServer;
  out_ += "\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n";
  if (http11) out_ += "Transfer-Encoding: chunked\r\n";
  if (!keep_alive_) out_ += "Connection: close\r\n";
  out_ += "\r\n";
  status_ = 200;
  phase_ = StreamPhase::kHeader;
  chunks_sent_ = 0;
  net::async_write(
      socket_, net::buffer(out_),
      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnStreamWrite(ec); });
}

void FakeSession::OnStreamWrite(beast::error_code ec) {
  if (closed_) return;
  if (ec) return FinishRequest(Outcome::kCancelled);
  if (phase_ == StreamPhase::kDone) return FinishRequest(Outcome::kCompleted);
  if (chunks_sent_ == settings_.disconnect_after_chunks) return FinishRequest(Outcome::kAborted);
  if (chunks_sent_ == settings_.chunks) {
    out_.clear();
    if (req_.version() >= 11) {
      AppendChunk(out_, kStreamDone);
      out_ += "0\r\n\r\n";
    } else {
      out_ = kStreamDone;
    }
    phase_ = StreamPhase::kDone;
    net::async_write(
        socket_, net::buffer(out_),
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnStreamWrite(ec); });
    return;
  }
  if (chunks_sent_ == 0 || settings_.chunk_interval_ms == 0) return WriteChunk();
  timer_.expires_after(std::chrono::milliseconds(settings_.chunk_interval_ms));
  timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (!ec && !self->closed_) self->WriteChunk();
  });
}

void FakeSession::WriteChunk() {
  phase_ = StreamPhase::kChunks;
  std::string event =
      StreamEvent(completion_, id_, chunks_sent_, chunks_sent_ + 1 == settings_.chunks);
  out_.clear();
  if (req_.version() >= 11) {
    AppendChunk(out_, event);
  } else {
    out_ = std::move(event);
  }
  ++chunks_sent_;
  net::async_write(
      socket_, net::buffer(out_),
      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnStreamWrite(ec); });
}

// ---- whole responses ----------------------------------------------------------------------

void FakeSession::Reply(unsigned status, std::string body, std::string_view content_type) {
  status_ = status;
  res_ = {};
  res_.version(req_.version() >= 11 ? 11 : 10);
  res_.result(status);
  res_.set(http::field::server, kServer);
  res_.set(http::field::content_type, beast::string_view(content_type.data(), content_type.size()));
  if (status == 503) res_.set(http::field::retry_after, "1");
  res_.keep_alive(keep_alive_);
  res_.body() = std::move(body);
  res_.prepare_payload();
  http::async_write(socket_, res_, [self = shared_from_this()](beast::error_code ec, size_t) {
    self->OnReplyWritten(ec);
  });
}

void FakeSession::ReplyError(unsigned status, std::string_view message) {
  Reply(status, ErrorBody(static_cast<int>(status), message));
}

void FakeSession::OnReplyWritten(beast::error_code ec) {
  if (closed_) return;
  FinishRequest(ec ? Outcome::kCancelled : Outcome::kCompleted);
}

// ---- ends ---------------------------------------------------------------------------------

void FakeSession::FinishRequest(Outcome outcome) {
  if (counted_) state_.OnRequestEnd(outcome, static_cast<int>(status_));
  counted_ = false;
  if (holds_slot_) state_.Release();
  holds_slot_ = false;
  if (waiter_) state_.Abandon(waiter_);
  waiter_.reset();
  active_ = false;
  status_ = 0;
  if (outcome != Outcome::kCompleted || !keep_alive_) return Close();
  res_ = {};
  req_ = {};
  // A pending watch becomes the first read of the next request; else bytes already arrived.
  if (!watching_) DoRead();
}

void FakeSession::Close() {
  if (closed_) return;
  closed_ = true;
  timer_.cancel();
  beast::error_code ignored;
  socket_.shutdown(net::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
}

}  // namespace kinfer::fake
