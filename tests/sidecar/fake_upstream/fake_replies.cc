#include "tests/sidecar/fake_upstream/fake_replies.h"

#include <chrono>

namespace kinfer::fake {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

void AddHeader(nlohmann::json& out, std::string name, std::string_view value) {
  auto it = out.find(name);
  if (it == out.end()) {
    out[std::move(name)] = std::string(value);
  } else {
    it->get_ref<std::string&>() += ", ";
    it->get_ref<std::string&>() += value;
  }
}

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

nlohmann::json XFake(const CompletionRequest& req) {
  return {{"model", req.model},
          {"max_tokens", req.max_tokens ? nlohmann::json(*req.max_tokens) : nlohmann::json()},
          {"stream", req.stream},
          {"headers", req.headers}};
}

std::string Content(const CompletionRequest& req) {
  return "ok model=" + req.model +
         " max_tokens=" + (req.max_tokens ? std::to_string(*req.max_tokens) : "none");
}

}  // namespace

StatusOr<CompletionRequest> ParseCompletionRequest(bool chat, const nlohmann::json& body) {
  if (!body.is_object()) return InvalidArgument("request body must be a JSON object");
  CompletionRequest req;
  req.chat = chat;
  auto model = body.find("model");
  if (model == body.end() || !model->is_string()) {
    return InvalidArgument("'model' is required and must be a string");
  }
  req.model = model->get<std::string>();
  if (chat) {
    auto messages = body.find("messages");
    if (messages == body.end() || !messages->is_array()) {
      return InvalidArgument("'messages' is required and must be an array");
    }
  } else {
    auto prompt = body.find("prompt");
    if (prompt == body.end() || !(prompt->is_string() || prompt->is_array())) {
      return InvalidArgument("'prompt' is required and must be a string or an array");
    }
  }
  auto max_tokens = body.find("max_tokens");
  if (max_tokens != body.end() && !max_tokens->is_null()) {
    if (!max_tokens->is_number_integer() || max_tokens->get<int64_t>() < 0 ||
        (max_tokens->is_number_unsigned() && max_tokens->get<uint64_t>() > INT64_MAX)) {
      return InvalidArgument("'max_tokens' must be a non-negative integer");
    }
    req.max_tokens = max_tokens->get<int64_t>();
  }
  auto stream = body.find("stream");
  if (stream != body.end() && !stream->is_null()) {
    if (!stream->is_boolean()) return InvalidArgument("'stream' must be a boolean");
    req.stream = stream->get<bool>();
  }
  return req;
}

nlohmann::json SelectedHeaders(const boost::beast::http::fields& headers) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& f : headers) {
    std::string name = Lower(std::string_view(f.name_string().data(), f.name_string().size()));
    if (StartsWith(name, "x-kinfer-") || StartsWith(name, "x-fake-") || name == "authorization" ||
        name == "x-request-id") {
      AddHeader(out, std::move(name), std::string_view(f.value().data(), f.value().size()));
    }
  }
  return out;
}

nlohmann::json AllHeaders(const boost::beast::http::fields& headers) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& f : headers) {
    AddHeader(out, Lower(std::string_view(f.name_string().data(), f.name_string().size())),
              std::string_view(f.value().data(), f.value().size()));
  }
  return out;
}

std::string ErrorBody(int status, std::string_view message) {
  const char* type = status == 429   ? "rate_limit_error"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  nlohmann::json body = {
      {"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}}},
  };
  // Replace invalid UTF-8 (a message may quote client input) instead of throwing.
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string CompletionBody(const CompletionRequest& req, uint64_t id, int64_t tokens) {
  const int64_t prompt_tokens = static_cast<int64_t>(req.body_bytes / 4) + 1;
  nlohmann::json choice = {{"index", 0}, {"finish_reason", "stop"}, {"logprobs", nullptr}};
  if (req.chat) {
    choice["message"] = {{"role", "assistant"}, {"content", Content(req)}};
  } else {
    choice["text"] = Content(req);
  }
  nlohmann::json body = {
      {"id", "fake-" + std::to_string(id)},
      {"object", req.chat ? "chat.completion" : "text_completion"},
      {"created", UnixSeconds()},
      {"model", req.model},
      {"choices", nlohmann::json::array({std::move(choice)})},
      {"usage",
       {{"prompt_tokens", prompt_tokens},
        {"completion_tokens", tokens},
        {"total_tokens", prompt_tokens + tokens}}},
      {"x_fake", XFake(req)},
  };
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string StreamEvent(const CompletionRequest& req, uint64_t id, int64_t index, bool last) {
  const std::string token = "tok" + std::to_string(index) + " ";
  nlohmann::json choice = {{"index", 0},
                           {"finish_reason", last ? nlohmann::json("stop") : nlohmann::json()}};
  if (req.chat) {
    nlohmann::json delta = {{"content", token}};
    if (index == 0) delta["role"] = "assistant";
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = token;
  }
  nlohmann::json chunk = {
      {"id", "fake-" + std::to_string(id)},
      {"object", req.chat ? "chat.completion.chunk" : "text_completion"},
      {"created", UnixSeconds()},
      {"model", req.model},
      {"choices", nlohmann::json::array({std::move(choice)})},
  };
  if (index == 0) chunk["x_fake"] = XFake(req);
  return "data: " + chunk.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n";
}

std::string ModelsBody(const std::vector<std::string>& models) {
  nlohmann::json data = nlohmann::json::array();
  for (const std::string& m : models) {
    data.push_back({{"id", m}, {"object", "model"}, {"created", 0}, {"owned_by", "kinfer-fake"}});
  }
  return nlohmann::json{{"object", "list"}, {"data", std::move(data)}}.dump();
}

}  // namespace kinfer::fake
