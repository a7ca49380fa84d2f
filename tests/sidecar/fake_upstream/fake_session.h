// FakeSession: one accepted HTTP/1.1 connection of kinfer-fake-upstream (keep-alive, one request
// at a time; pipelined requests are read after the current response).
//
// Lifetime: owned by shared_ptrs held by its pending asynchronous operations (and by a capacity
// grant while it waits for a slot); it dies when the connection is closed and those complete.
//
// Threading: every handler runs on the socket's strand, so the members need no lock. Shared state
// is reached only through FakeState, which locks.
//
// Cancellation: while a request is handled a small read ("watch") stays pending on the socket, so a
// client that closes is noticed at once, also during a hang, a latency delay or a capacity wait.
// The watch's bytes, if the client sends any (a pipelined request), stay in the read buffer and
// are parsed after the current response.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "tests/sidecar/fake_upstream/fake_replies.h"
#include "tests/sidecar/fake_upstream/fake_settings.h"
#include "tests/sidecar/fake_upstream/fake_state.h"

namespace kinfer::fake {

inline constexpr uint64_t kMaxBodyBytes = 8u << 20;  // larger bodies get 413

class FakeSession : public std::enable_shared_from_this<FakeSession> {
 public:
  // REQUIRES: `socket` has a strand executor; `state` outlives the session.
  FakeSession(boost::asio::ip::tcp::socket socket, FakeState& state);

  // Starts reading requests.
  void Start();

 private:
  enum class StreamPhase { kHeader, kChunks, kDone };

  void DoRead();
  void OnHeader(boost::beast::error_code ec);  // answers "Expect: 100-continue", reads the body
  void OnRead(boost::beast::error_code ec);
  void StartWatch();
  void OnWatch(boost::beast::error_code ec, size_t bytes);

  void Route(std::string_view path);
  void HandleControl(std::string_view path);
  void HandleModelRequest(std::string_view path, bool chat);
  void OnSlot();
  void Respond();

  void StartStream();
  void WriteChunk();
  void OnStreamWrite(boost::beast::error_code ec);

  // Writes a whole response: a JSON body unless content_type says otherwise.
  void Reply(unsigned status, std::string body, std::string_view content_type = "application/json");
  void ReplyError(unsigned status, std::string_view message);
  void OnReplyWritten(boost::beast::error_code ec);

  // Ends the current request: counts it, gives its capacity slot back, then reads the next request
  // (kCompleted on a keep-alive connection) or closes the connection.
  void FinishRequest(Outcome outcome);
  void Close();

  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer timer_;
  FakeState& state_;

  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  boost::beast::http::request<boost::beast::http::string_body> req_;
  boost::beast::http::response<boost::beast::http::string_body> res_;
  std::string out_;  // the stream bytes being written

  bool closed_ = false;
  bool watching_ = false;  // the watch read is pending
  bool active_ = false;    // a request is being handled (between its read and FinishRequest)

  // The current request.
  bool counted_ = false;  // FakeState::OnRequestStart was called (not for /control*)
  bool keep_alive_ = true;
  uint64_t id_ = 0;
  unsigned status_ = 0;  // the status being written
  bool holds_slot_ = false;
  std::shared_ptr<CapacityWaiter> waiter_;  // set while queued for a slot
  FakeSettings settings_;                   // global knobs merged with the x-fake-* headers
  CompletionRequest completion_;
  StreamPhase phase_ = StreamPhase::kHeader;
  int64_t chunks_sent_ = 0;
};

}  // namespace kinfer::fake
