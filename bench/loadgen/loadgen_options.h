// Command line of kinfer-loadgen (see loadgen.cc for what the tool does).
//
// Pure parsing: ParseOptions exits the process with status 2 and a message on a bad command line
// (it is only called from main). Thread-safe otherwise (no shared state).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kinfer::loadgen {

// Every flag, after validation. The URL is split into host, port and path.
struct Options {
  std::string url;
  std::string host;
  std::string port = "80";
  std::string path = "/";
  double rate = 0;
  double duration_s = 0;
  double warmup_s = 0;
  double timeout_s = 30;
  std::string method = "POST";
  std::string body;
  bool stream_flag = false;  // --stream: set "stream": true in the JSON body
  bool stream = false;       // the body asks for a stream
  bool poisson = false;
  size_t connections_max = 256;
  std::vector<std::string> headers;  // "name: value"
  std::string json_out;
  std::string label = "loadgen";
  uint64_t seed = 1;
};

// Parses argv. Fills in the default body for POST when none is given, and with --stream sets
// "stream": true in the JSON body. Exits with status 2 on an error.
Options ParseOptions(int argc, char** argv);

// The HTTP/1.1 request every iteration sends, serialised once: request line, Host, User-Agent,
// the --header lines, Content-Type (unless given), Accept for streams, Content-Length, body.
std::string BuildRequest(const Options& o);

}  // namespace kinfer::loadgen
