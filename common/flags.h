// FlagReader: walks a GNU-style command line ("--name value" or "--name=value") for the programs'
// main()s, so each program only lists its flags.
//
//   kinfer::FlagReader flags(argc, argv, "kinfer-sidecar");
//   while (flags.Next()) {
//     if (flags.Is("--help", "-h")) ...
//     else if (flags.Is("--port")) port = flags.Int(1, 65535);
//     else flags.Unknown();
//   }
//
// Errors (a missing value, a bad integer, an unknown flag, a positional argument) print
// "<program>: <message>" and a pointer to --help on stderr and exit with status 2.
// Not thread-safe; for main() only.
#pragma once

#include <string>
#include <string_view>

namespace kinfer {

class FlagReader {
 public:
  FlagReader(int argc, char** argv, std::string program)
      : argc_(argc), argv_(argv), program_(std::move(program)) {}

  // Advances to the next argument; false when there are none left. An argument that does not
  // start with "-" is an error (no program here takes positional arguments).
  bool Next();
  // The current flag's name, without any "=value".
  const std::string& name() const { return name_; }
  bool Is(std::string_view name, std::string_view alias = {}) const {
    return name_ == name || (!alias.empty() && name_ == alias);
  }
  // The current flag's value: after "=", else the next argument.
  std::string Value();
  // The value as an integer in [lo, hi].
  long long Int(long long lo, long long hi);
  // A boolean flag: "--name" alone is true; "--name=true|false|1|0" sets it. Never consumes the
  // next argument (as Go's flag package treats booleans).
  bool Bool();
  [[noreturn]] void Unknown() const;
  [[noreturn]] void Fail(const std::string& message) const;

 private:
  int argc_;
  char** argv_;
  std::string program_;
  int i_ = 0;
  std::string name_;
  std::string inline_value_;
  bool has_inline_value_ = false;
};

}  // namespace kinfer
