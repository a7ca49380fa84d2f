// POST /v1/responses over the chat completions handler (responses_api.h): the request is
// translated, served as a chat request, and its answer translated back, whole or streamed.
#include <chrono>
#include <memory>

#include "runtime/server/generation.h"
#include "runtime/server/responses_api.h"

namespace kinfer {
namespace {

using json = nlohmann::json;

// Hands the chat stream's events to the translator and writes what it gives.
class TranslatingSink : public ChunkSink {
 public:
  TranslatingSink(ChunkSink& out, ResponsesStreamTranslator& t) : out_(out), t_(t) {}
  bool Write(std::string_view data) override {
    for (const std::string& e : t_.Translate(data)) {
      if (!out_.Write(e)) return false;
    }
    return true;
  }
  bool Closed() const override { return out_.Closed(); }

 private:
  ChunkSink& out_;
  ResponsesStreamTranslator& t_;
};

// A chat error response with its param named as the Responses request names it, in the param
// and in the message ("'max_completion_tokens' must be ..." reads "'max_output_tokens' ...").
HttpResponse RenameErrorParam(HttpResponse resp) {
  json body = json::parse(resp.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_object() && body.contains("error") && body["error"].is_object() &&
      body["error"].contains("param") && body["error"]["param"].is_string()) {
    json& error = body["error"];
    const std::string chat = error["param"].get<std::string>();
    const std::string renamed = ResponsesParam(chat);
    error["param"] = renamed;
    if (renamed != chat && error.contains("message") && error["message"].is_string()) {
      std::string message = error["message"].get<std::string>();
      const std::string from = "'" + chat + "'", to = "'" + renamed + "'";
      for (size_t at = message.find(from); at != std::string::npos; at = message.find(from, at + to.size())) {
        message.replace(at, from.size(), to);
      }
      // The context-length message counts the prompt "in the messages" (chat's name for it).
      if (const size_t at = message.find(" in the messages,"); at != std::string::npos) {
        message.replace(at, 17, " in the input,");
      }
      error["message"] = message;
    }
    resp.body = DumpJson(body);
  }
  return resp;
}

}  // namespace

HttpResponse HandleResponses(const HttpRequest& request, const GenerationContext& ctx) {
  ResponsesRequest rr;
  ErrorDetail d;
  StatusOr<std::string> chat_body = ResponsesToChatBody(request.body, &rr, &d);
  if (!chat_body.ok()) {
    ctx.metrics->CountRequest(kStatusInvalid);
    return ErrorResponse(chat_body.status(), d);
  }
  HttpRequest chat = request;
  chat.body = std::move(chat_body).value();
  HttpResponse resp = HandleGeneration(ApiKind::kChat, chat, ctx);
  const std::string id = NewResponseId("resp_");
  const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
  if (resp.stream) {
    auto translator = std::make_shared<ResponsesStreamTranslator>(std::move(rr), id, created);
    resp.stream = [inner = std::move(resp.stream), translator](ChunkSink& sink) {
      TranslatingSink t(sink, *translator);
      inner(t);
    };
    return resp;
  }
  if (resp.status != 200) return RenameErrorParam(std::move(resp));
  const json whole = json::parse(resp.body, nullptr, /*allow_exceptions=*/false);
  resp.body = DumpJson(ResponseFromChat(whole, rr, id, created));
  return resp;
}

}  // namespace kinfer
