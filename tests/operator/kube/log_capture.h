// LogCapture: while alive, spdlog's default logger writes into a ring buffer the test reads
// (the previous default logger comes back when it goes, on an early ASSERT return too).
#pragma once

#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kinfer::testing {

class LogCapture {
 public:
  explicit LogCapture(size_t lines = 200)
      : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(lines)),
        previous_(spdlog::default_logger()) {
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", sink_));
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  std::vector<std::string> Lines() const { return sink_->last_formatted(); }
  // The captured lines that contain `text`.
  std::vector<std::string> LinesWith(std::string_view text) const {
    std::vector<std::string> out;
    for (std::string& line : Lines()) {
      if (line.find(text) != std::string::npos) out.push_back(std::move(line));
    }
    return out;
  }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
  std::shared_ptr<spdlog::logger> previous_;
};

}  // namespace kinfer::testing
