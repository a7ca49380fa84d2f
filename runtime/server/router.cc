#include "runtime/server/router.h"

#include <spdlog/spdlog.h>

#include <exception>

#include "common/http_errors.h"
#include "runtime/server/generation.h"
#include "runtime/server/openai_protocol.h"
#include "runtime/server/served_model.h"
#include "runtime/tokenizer/tokenizer.h"

namespace kinfer {

using json = nlohmann::json;

// ---- http_types.h helpers ---------------------------------------------------------------------

HttpResponse JsonResponse(int http_status, std::string body) {
  HttpResponse r;
  r.status = http_status;
  r.body = std::move(body);
  return r;
}

HttpResponse ErrorResponse(int http_status, std::string_view message, std::string_view param,
                           std::string_view code) {
  return JsonResponse(http_status, ErrorBody(http_status, message, param, code));
}

HttpResponse ErrorResponse(const Status& status, const ErrorDetail& d) {
  HttpResponse r =
      JsonResponse(HttpStatusFor(status.code()), ErrorBodyFor(status, d.param, d.code));
  if (IsRetryable(status.code())) {
    r.headers.emplace_back("Retry-After", std::to_string(kRetryAfterSeconds));
  }
  return r;
}

// ---- Router -----------------------------------------------------------------------------------

namespace {

struct Route {
  const char* method;
  const char* path;
  const char* name;
};

constexpr Route kRoutes[] = {
    {"GET", "/health", "health"},
    {"GET", "/ready", "ready"},
    {"GET", "/metrics", "metrics"},
    {"GET", "/v1/models", "models"},
    {"POST", "/v1/chat/completions", "chat_completions"},
    {"POST", "/v1/completions", "completions"},
    {"POST", "/v1/responses", "responses"},
    {"POST", "/tokenize", "tokenize"},
    {"POST", "/detokenize", "detokenize"},
    {"POST", "/cancel", "cancel"},
};

constexpr char kModelsPrefix[] = "/v1/models/";

// The routes whose requests requests_total counts.
bool IsGenerationRoute(std::string_view name) {
  return name == "chat_completions" || name == "completions" || name == "responses";
}

HttpResponse NotReady() {
  return ErrorResponse(Unavailable("the model is still loading"), ErrorDetail{});
}

// llama.cpp's /tokenize piece: the string when it is valid UTF-8, else its bytes.
json PieceJson(const std::string& piece) {
  if (IsValidUtf8(piece)) return piece;
  json bytes = json::array();
  for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
  return bytes;
}

}  // namespace

Router::Router(metrics::Registry* registry) : registry_(registry), metrics_(registry) {}

Router::~Router() = default;

void Router::SetModel(std::unique_ptr<ServedModel> model) {
  owned_model_ = std::move(model);
  model_.store(owned_model_.get(), std::memory_order_release);
  metrics_.model_loaded.Set(1);
}

HttpResponse Router::Handle(const HttpRequest& request) {
  HttpResponse resp;
  try {
    resp = Dispatch(request);
  } catch (const std::exception& e) {
    spdlog::error("{} {}: unexpected exception: {}", request.method, request.path, e.what());
    resp = ErrorResponse(Internal(std::string("internal error: ") + e.what()), ErrorDetail{});
  } catch (...) {
    spdlog::error("{} {}: unexpected exception", request.method, request.path);
    resp = ErrorResponse(Internal("internal error"), ErrorDetail{});
  }
  return resp;
}

std::string Router::RouteOf(std::string_view path) {
  for (const Route& r : kRoutes) {
    if (path == r.path) return r.name;
  }
  if (path.rfind(kModelsPrefix, 0) == 0 && path.size() > sizeof(kModelsPrefix) - 1) {
    return "models";
  }
  if (path.rfind("/v1/responses/", 0) == 0) return "responses";
  return "other";
}

void Router::CountRefused(std::optional<std::string_view> path, int status) {
  const std::string route = path ? RouteOf(*path) : "other";
  metrics_.CountHttp(route, status);
  if (IsGenerationRoute(route)) {
    if (status == 503) {
      metrics_.CountRequest(kStatusRejected);
    } else if (status >= 400 && status < 500) {
      metrics_.CountRequest(kStatusInvalid);
    }
  }
}

HttpResponse Router::Dispatch(const HttpRequest& req) {
  const std::string& path = req.path;  // trailing slashes already dropped (RoutedPath)

  const Route* match = nullptr;
  std::string allow;
  for (const Route& r : kRoutes) {
    if (path != r.path) continue;
    if (req.method == r.method) {
      match = &r;
      break;
    }
    // HEAD is served wherever GET is (the session reads a HEAD as GET).
    const std::string methods = std::string_view(r.method) == "GET" ? "GET, HEAD" : r.method;
    allow += allow.empty() ? methods : ", " + methods;
  }
  // GET /v1/models/{id}
  const bool model_item =
      path.rfind(kModelsPrefix, 0) == 0 && path.size() > sizeof(kModelsPrefix) - 1;
  const bool model_get = model_item && req.method == "GET";
  if (model_item && !model_get) allow = "GET, HEAD";
  if (match == nullptr && !model_get) {
    if (path.rfind("/v1/responses/", 0) == 0) {
      // GET (retrieve), DELETE, .../cancel, .../input_items of a stored Response.
      HttpResponse r = ErrorResponse(
          404,
          "kinfer stores no responses (they are answered with \"store\": false): there is "
          "nothing at " +
              path,
          "", "not_found");
      r.route = "responses";
      return r;
    }
    if (allow.empty()) return ErrorResponse(404, "no route for " + req.method + " " + path);
    HttpResponse r = ErrorResponse(
        405, "method " + req.method + " is not allowed on " + path + " (allowed: " + allow + ")");
    r.headers.emplace_back("Allow", allow);
    r.route = RouteOf(path);  // the path's route: a GET on a POST route is that route's 405
    return r;
  }
  const std::string name = match != nullptr ? match->name : "models";

  HttpResponse resp;
  ServedModel* model = this->model();
  if (name == "health") {
    if (model != nullptr && model->engine().needs_restart()) {
      // The device failed for good: the liveness probe's answer, so the container restarts.
      resp = JsonResponse(
          503, DumpJson(json{{"status", "failed"}, {"reason", model->engine().health().message()}}));
    } else {
      resp = JsonResponse(200, R"({"status":"ok"})");
    }
  } else if (name == "ready") {
    if (model == nullptr) {
      resp = JsonResponse(503, R"({"status":"loading"})");
    } else if (Status health = model->engine().health(); !health.ok()) {
      // Loaded but unable to serve: out of the Service, with the reason for whoever looks.
      resp = JsonResponse(503, DumpJson(json{{"status", "failed"}, {"reason", health.message()}}));
    } else {
      resp = JsonResponse(200, R"({"status":"ready"})");
    }
  } else if (name == "metrics") {
    resp = Metrics();
  } else if (name == "cancel") {
    ErrorDetail d;
    StatusOr<std::string> id = ParseCancelRequest(req.body, &d);
    resp = id.ok()
               ? JsonResponse(
                     200, DumpJson(json{{"request_id", *id}, {"cancelled", cancels_.Cancel(*id)}}))
               : ErrorResponse(id.status(), d);
  } else if (model == nullptr) {
    resp = NotReady();
    if (IsGenerationRoute(name)) {
      metrics_.CountRequest(kStatusRejected);
    }
  } else if (name == "models") {
    resp = Models(path, *model);
  } else if (name == "chat_completions" || name == "completions") {
    GenerationContext ctx{model, &metrics_, &stopping_, &cancels_};
    resp = HandleGeneration(name == "chat_completions" ? ApiKind::kChat : ApiKind::kCompletion, req,
                            ctx);
  } else if (name == "responses") {
    GenerationContext ctx{model, &metrics_, &stopping_, &cancels_};
    resp = HandleResponses(req, ctx);
  } else if (name == "tokenize") {
    resp = Tokenize(req, *model);
  } else if (name == "detokenize") {
    resp = Detokenize(req, *model);
  }
  resp.route = name;
  return resp;
}

HttpResponse Router::Metrics() {
  if (ServedModel* m = model()) metrics_.UpdateFromEngine(m->engine().Stats());
  if (connection_counts_) {
    const auto [open, rejected] = connection_counts_();
    metrics_.UpdateConnections(open, rejected);
  }
  HttpResponse r = JsonResponse(200, registry_->ExposeText());
  r.content_type = metrics::kTextContentType;
  return r;
}

HttpResponse Router::Models(const std::string& path, ServedModel& model) {
  json list = ModelsJson(model.name(), model.created(), model.engine().context_length());
  if (path == "/v1/models") return JsonResponse(200, DumpJson(list));
  std::string id = path.substr(sizeof(kModelsPrefix) - 1);
  if (id != model.name()) {
    return ErrorResponse(404, "The model '" + id + "' does not exist", "model", "model_not_found");
  }
  return JsonResponse(200, DumpJson(list["data"][0]));
}

HttpResponse Router::Tokenize(const HttpRequest& req, ServedModel& model) {
  ErrorDetail d;
  StatusOr<TokenizeRequest> t = ParseTokenizeRequest(req.body, &d);
  if (!t.ok()) return ErrorResponse(t.status(), d);
  const Tokenizer& tok = model.tokenizer();
  std::vector<int32_t> ids = tok.Encode(t->content, t->add_special, t->parse_special);
  json tokens = json::array();
  for (int32_t id : ids) {
    if (t->with_pieces) {
      tokens.push_back({{"id", id}, {"piece", PieceJson(tok.TokenToPiece(id, true))}});
    } else {
      tokens.push_back(id);
    }
  }
  return JsonResponse(200, DumpJson(json{{"tokens", std::move(tokens)}}));
}

HttpResponse Router::Detokenize(const HttpRequest& req, ServedModel& model) {
  ErrorDetail d;
  StatusOr<std::vector<int32_t>> ids = ParseDetokenizeRequest(req.body, &d);
  if (!ids.ok()) return ErrorResponse(ids.status(), d);
  const Tokenizer& tok = model.tokenizer();
  for (int32_t id : *ids) {
    if (id < 0 || id >= tok.vocab_size()) {
      return ErrorResponse(
          InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                          std::to_string(tok.vocab_size() - 1) + ")"),
          ErrorDetail{"tokens", ""});
    }
  }
  std::string text = tok.Decode(*ids, /*special=*/true);
  return JsonResponse(200, DumpJson(json{{"content", text}}));
}

}  // namespace kinfer
