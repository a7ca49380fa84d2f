// Test helper: runs the real test API server (tests/kube/apiserver) as a child process on a free
// port for the life of the object, and talks to its /_test endpoints. Header-only.
//
// Thread safety: construct and destroy on one thread; Post may be called from any thread.
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cpprest/http_client.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kinfer::testing {

class TestApiServer {
 public:
  // Starts `python3 kinfer_test_apiserver.py --port 0 <extra>` and waits for "LISTENING <port>".
  explicit TestApiServer(std::vector<std::string> extra = {}) {
    std::string src = KINFER_SOURCE_DIR;
    std::vector<std::string> args = {"python3", src + "/tests/kube/apiserver/kinfer_test_apiserver.py",
                                     "--port", "0", "--crd",
                                     src + "/crds/serving.kinfer.dev_inferenceservices.yaml"};
    args.insert(args.end(), extra.begin(), extra.end());
    int fds[2];
    if (pipe(fds) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], 1);
      close(fds[0]);
      close(fds[1]);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execvp("python3", argv.data());
      _exit(127);
    }
    close(fds[1]);
    FILE* out = fdopen(fds[0], "r");
    char line[256];
    while (out != nullptr && fgets(line, sizeof line, out) != nullptr) {
      int port = 0;
      if (sscanf(line, "LISTENING %d", &port) == 1) {
        port_ = port;
        break;
      }
    }
    out_ = out;  // kept open so the child never writes into a closed pipe
  }
  ~TestApiServer() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int st = 0;
      waitpid(pid_, &st, 0);
    }
    if (out_ != nullptr) fclose(out_);
  }
  TestApiServer(const TestApiServer&) = delete;
  TestApiServer& operator=(const TestApiServer&) = delete;

  bool ok() const { return port_ > 0; }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // POST a JSON body to a /_test endpoint; returns the answer (null on failure).
  nlohmann::json Post(const std::string& path, const nlohmann::json& body = nlohmann::json::object()) {
    return Call(web::http::methods::POST, path, body.dump());
  }
  nlohmann::json Get(const std::string& path) { return Call(web::http::methods::GET, path, ""); }

 private:
  nlohmann::json Call(const web::http::method& m, const std::string& path, const std::string& body) {
    try {
      web::http::client::http_client c(url());
      web::http::http_request req(m);
      req.set_request_uri(path);
      if (!body.empty()) req.set_body(body, "application/json");
      std::string text = c.request(req).get().extract_string(true).get();
      return nlohmann::json::parse(text, nullptr, false);
    } catch (const std::exception&) {
      return nullptr;
    }
  }

  pid_t pid_ = -1;
  int port_ = 0;
  FILE* out_ = nullptr;
};

}  // namespace kinfer::testing
