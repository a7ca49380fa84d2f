#include "bench/loadgen/loadgen_options.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string_view>

#include <boost/beast/core/string.hpp>
#include <nlohmann/json.hpp>

namespace kinfer::loadgen {
namespace {

// Samples are 16 bytes a request; refuse runs that would hold more than about 1.6 GB of them.
constexpr double kMaxRequests = 100e6;

[[noreturn]] void Fail(const std::string& error) {
  std::fprintf(stderr, "kinfer-loadgen: %s\n", error.c_str());
  std::exit(2);
}

double ParseNumber(std::string_view flag, const char* text, double min) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !std::isfinite(v) || v < min) {
    char msg[160];
    std::snprintf(msg, sizeof(msg), "%.*s: expected a number >= %g", static_cast<int>(flag.size()),
                  flag.data(), min);
    Fail(msg);
  }
  return v;
}

uint64_t ParseInteger(std::string_view flag, const char* text, uint64_t min) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || *text == '-' || v < min) {
    Fail(std::string(flag) + ": expected an integer >= " + std::to_string(min));
  }
  return v;
}

// http://host[:port][/path]; https is not supported (loopback benchmarks).
void ParseUrl(Options& o) {
  constexpr std::string_view kScheme = "http://";
  std::string_view rest = o.url;
  if (rest.substr(0, kScheme.size()) != kScheme) Fail("--url must start with http://");
  rest.remove_prefix(kScheme.size());
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  o.path = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  if (!authority.empty() && authority.front() == '[') {  // [v6]:port
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) Fail("--url: bad IPv6 host");
    o.host = std::string(authority.substr(1, close - 1));
    authority.remove_prefix(close + 1);
    if (!authority.empty() && authority.front() == ':') o.port = std::string(authority.substr(1));
  } else {
    const size_t colon = authority.find(':');
    o.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) o.port = std::string(authority.substr(colon + 1));
  }
  if (o.host.empty() || o.port.empty()) Fail("--url: missing host or port");
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Fail("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

Options ParseOptions(int argc, char** argv) {
  Options o;
  bool have_body = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--stream") {
      o.stream_flag = true;
      continue;
    }
    if (flag == "--poisson") {
      o.poisson = true;
      continue;
    }
    if (i + 1 >= argc) Fail("missing value for " + std::string(flag));
    const char* v = argv[++i];
    if (flag == "--url") {
      o.url = v;
    } else if (flag == "--rate") {
      o.rate = ParseNumber(flag, v, 0);
    } else if (flag == "--duration") {
      o.duration_s = ParseNumber(flag, v, 0);
    } else if (flag == "--warmup") {
      o.warmup_s = ParseNumber(flag, v, 0);
    } else if (flag == "--timeout") {
      o.timeout_s = ParseNumber(flag, v, 0.001);
    } else if (flag == "--method") {
      o.method = v;
    } else if (flag == "--body") {
      o.body = ReadFile(v);
      have_body = true;
    } else if (flag == "--body-json") {
      o.body = v;
      have_body = true;
    } else if (flag == "--connections-max") {
      o.connections_max = static_cast<size_t>(ParseInteger(flag, v, 1));
    } else if (flag == "--header") {
      const std::string_view h = v;
      if (h.find(':') == std::string_view::npos || h.find_first_of("\r\n") != h.npos) {
        Fail("--header: expected 'name: value'");
      }
      o.headers.emplace_back(h);
    } else if (flag == "--json") {
      o.json_out = v;
    } else if (flag == "--label") {
      o.label = v;
    } else if (flag == "--seed") {
      o.seed = ParseInteger(flag, v, 0);
    } else {
      Fail("unknown flag " + std::string(flag));
    }
  }
  if (o.url.empty() || o.rate <= 0 || o.duration_s <= 0) {
    Fail(
        "usage: kinfer-loadgen --url http://HOST:PORT/PATH --rate R --duration S [--warmup S]\n"
        "  [--body FILE | --body-json JSON] [--stream] [--poisson] [--method POST]\n"
        "  [--connections-max 256] [--header 'k: v']... [--timeout 30] [--json OUT.json]\n"
        "  [--label NAME] [--seed 1]");
  }
  if (o.rate * (o.duration_s + o.warmup_s) > kMaxRequests) Fail("rate x duration is too large");
  ParseUrl(o);
  if (!have_body && o.method == "POST") {
    o.body =
        R"({"model":"primary","messages":[{"role":"user","content":"hello"}],"max_tokens":16})";
  }
  nlohmann::json body = nlohmann::json::parse(o.body, nullptr, /*allow_exceptions=*/false);
  if (o.stream_flag) {
    if (!body.is_object()) Fail("--stream needs a JSON object body");
    body["stream"] = true;
    o.body = body.dump();
  }
  o.stream = body.is_object() && body.value("stream", false) == true;
  return o;
}

// The request is the same every time: serialised once.
std::string BuildRequest(const Options& o) {
  std::string r = o.method + " " + o.path + " HTTP/1.1\r\nHost: " + o.host + ":" + o.port +
                  "\r\nUser-Agent: kinfer-loadgen\r\n";
  bool content_type = false;
  for (const std::string& h : o.headers) {
    const std::string name = h.substr(0, h.find(':'));
    if (boost::beast::iequals(name, "content-type")) content_type = true;
    r += h + "\r\n";
  }
  if (!o.body.empty() && !content_type) r += "Content-Type: application/json\r\n";
  if (o.stream) r += "Accept: text/event-stream\r\n";
  if (!o.body.empty() || o.method == "POST") {
    r += "Content-Length: " + std::to_string(o.body.size()) + "\r\n";
  }
  r += "\r\n" + o.body;
  return r;
}

}  // namespace kinfer::loadgen
