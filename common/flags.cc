#include "common/flags.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>

namespace kinfer {

bool FlagReader::Next() {
  if (++i_ >= argc_) return false;
  std::string arg = argv_[i_];
  if (arg.empty() || arg[0] != '-') Fail("unexpected argument '" + arg + "'");
  has_inline_value_ = false;
  name_ = arg;
  if (size_t eq = arg.find('='); eq != std::string::npos) {
    name_ = arg.substr(0, eq);
    inline_value_ = arg.substr(eq + 1);
    has_inline_value_ = true;
  }
  return true;
}

std::string FlagReader::Value() {
  if (has_inline_value_) return inline_value_;
  if (i_ + 1 >= argc_) Fail("flag " + name_ + " needs a value");
  return argv_[++i_];
}

long long FlagReader::Int(long long lo, long long hi) {
  std::string v = Value();
  long long out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || p != v.data() + v.size() || out < lo || out > hi) {
    Fail("flag " + name_ + " wants an integer in [" + std::to_string(lo) + ", " +
         std::to_string(hi) + "], got '" + v + "'");
  }
  return out;
}

bool FlagReader::Bool() {
  if (!has_inline_value_) return true;
  const std::string& v = inline_value_;
  if (v == "true" || v == "1") return true;
  if (v == "false" || v == "0") return false;
  Fail("flag " + name_ + " wants true or false, got '" + v + "'");
}

void FlagReader::Unknown() const { Fail("unknown flag '" + name_ + "'"); }

void FlagReader::Fail(const std::string& message) const {
  std::fprintf(stderr, "%s: %s\nRun '%s --help' for usage.\n", program_.c_str(), message.c_str(),
               program_.c_str());
  std::exit(2);
}

}  // namespace kinfer
