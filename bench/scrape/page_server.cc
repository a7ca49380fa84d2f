#include "bench/scrape/page_server.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <string_view>
#include <utility>

namespace kinfer::bench {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

std::string Response(std::string_view status, std::string_view content_type, std::string_view body,
                     bool close) {
  std::string out = "HTTP/1.1 ";
  out += status;
  out += "\r\nContent-Type: ";
  out += content_type;
  out += "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  if (close) out += "Connection: close\r\n";
  out += "\r\n";
  out += body;
  return out;
}

}  // namespace

struct PageServer::Impl {
  net::io_context io;
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors;
  std::string path;
  // The serialized answers: [keep-alive, close].
  std::string page[2], not_found[2], not_allowed[2];
  PageServerCounters* counters = nullptr;

  void Accept(tcp::acceptor* acceptor);
};

namespace {

// One accepted connection: read a request, write the prepared answer, repeat while keep-alive.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, PageServer::Impl* server)
      : socket_(std::move(socket)), server_(server) {}

  void Read() {
    request_ = {};
    http::async_read(
        socket_, buffer_, request_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

 private:
  void OnRead(beast::error_code ec) {
    if (ec) {
      if (ec != http::error::end_of_stream && ec != net::error::eof &&
          ec != net::error::connection_reset) {
        server_->counters->errors.fetch_add(1, std::memory_order_relaxed);
      }
      Close();
      return;
    }
    const bool keep = request_.keep_alive();
    const int k = keep ? 0 : 1;
    std::string_view target(request_.target().data(), request_.target().size());
    target = target.substr(0, target.find('?'));
    const std::string* answer = nullptr;
    if (request_.method() != http::verb::get) {
      answer = &server_->not_allowed[k];
    } else if (target != server_->path) {
      answer = &server_->not_found[k];
    } else {
      answer = &server_->page[k];
    }
    (answer == &server_->page[k] ? server_->counters->requests : server_->counters->not_found)
        .fetch_add(1, std::memory_order_relaxed);
    net::async_write(socket_, net::buffer(*answer),
                     [self = shared_from_this(), keep](beast::error_code ec, size_t) {
                       if (ec) {
                         self->server_->counters->errors.fetch_add(1, std::memory_order_relaxed);
                         self->Close();
                       } else if (keep) {
                         self->Read();
                       } else {
                         self->Close();
                       }
                     });
  }

  void Close() {
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    socket_.close(ignored);
  }

  tcp::socket socket_;
  PageServer::Impl* server_;
  beast::flat_buffer buffer_;
  http::request<http::empty_body> request_;
};

}  // namespace

void PageServer::Impl::Accept(tcp::acceptor* acceptor) {
  acceptor->async_accept([this, acceptor](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted) return;
    if (ec) {  // e.g. out of file descriptors: count it and try again shortly
      counters->errors.fetch_add(1, std::memory_order_relaxed);
      auto timer = std::make_shared<net::steady_timer>(io, std::chrono::milliseconds(10));
      timer->async_wait([this, acceptor, timer](beast::error_code) { Accept(acceptor); });
      return;
    }
    counters->connections.fetch_add(1, std::memory_order_relaxed);
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    std::make_shared<Session>(std::move(socket), this)->Read();
    Accept(acceptor);
  });
}

StatusOr<std::unique_ptr<PageServer>> PageServer::Start(PageServerOptions options) {
  if (options.listeners < 1 || options.threads < 1 || options.path.empty() ||
      options.path[0] != '/') {
    return InvalidArgument("PageServer: listeners and threads must be >= 1, path must start /");
  }
  std::unique_ptr<PageServer> server(new PageServer());
  server->impl_ = std::make_unique<Impl>();
  server->counters_ = std::make_unique<PageServerCounters>();
  Impl& impl = *server->impl_;
  impl.counters = server->counters_.get();
  impl.path = options.path;
  for (int k = 0; k < 2; ++k) {
    impl.page[k] = Response("200 OK", options.content_type, options.body, k == 1);
    impl.not_found[k] = Response("404 Not Found", "text/plain", "not found\n", k == 1);
    impl.not_allowed[k] = Response("405 Method Not Allowed", "text/plain", "GET only\n", k == 1);
  }
  const tcp::endpoint any_port(net::ip::make_address_v4("127.0.0.1"), 0);
  for (int i = 0; i < options.listeners; ++i) {
    auto acceptor = std::make_unique<tcp::acceptor>(impl.io);
    beast::error_code ec;
    acceptor->open(any_port.protocol(), ec);
    if (!ec) acceptor->bind(any_port, ec);
    if (!ec) acceptor->listen(options.backlog, ec);
    if (ec) {
      return Unavailable("PageServer: listener " + std::to_string(i) + ": " + ec.message());
    }
    server->ports_.push_back(acceptor->local_endpoint().port());
    impl.acceptors.push_back(std::move(acceptor));
  }
  for (auto& acceptor : impl.acceptors) impl.Accept(acceptor.get());
  for (int t = 0; t < options.threads; ++t) {
    server->threads_.emplace_back([&impl] { impl.io.run(); });
  }
  return server;
}

void PageServer::Stop() {
  if (!impl_) return;
  impl_->io.stop();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  impl_.reset();  // closes the listeners and any connection still open
}

PageServer::~PageServer() { Stop(); }

}  // namespace kinfer::bench
