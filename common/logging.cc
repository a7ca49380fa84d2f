#include "common/logging.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace kinfer {

Status ParseLogLevel(std::string_view name, int* out) {
  struct Entry {
    std::string_view name;
    spdlog::level::level_enum level;
  };
  static constexpr Entry kLevels[] = {
      {"trace", spdlog::level::trace},       {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},         {"warn", spdlog::level::warn},
      {"warning", spdlog::level::warn},      {"error", spdlog::level::err},
      {"critical", spdlog::level::critical}, {"off", spdlog::level::off},
  };
  for (const Entry& e : kLevels) {
    if (e.name == name) {
      *out = static_cast<int>(e.level);
      return Status::Ok();
    }
  }
  return InvalidArgument("unknown log level '" + std::string(name) +
                         "' (want trace, debug, info, warn, error, critical or off)");
}

Status InitLogging(std::string_view program, std::string_view level) {
  int lvl = 0;
  KINFER_RETURN_IF_ERROR(ParseLogLevel(level, &lvl));
  // Not registered by name (stderr_logger_mt would throw on a second call with the same name);
  // set_default_logger replaces any previous default.
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>(std::string(program), std::move(sink));
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %L " + std::string(program) + ": %v");
  logger->set_level(static_cast<spdlog::level::level_enum>(lvl));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
  return Status::Ok();
}

}  // namespace kinfer
