#include "operator/kube/client.h"

#include <cpprest/uri.h>
#include <boost/asio/ssl.hpp>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <regex>

namespace kinfer::kube {
namespace {

namespace http = web::http;

StatusCode CodeFor(int http_code) {
  switch (http_code) {
    case 400:
    case 422:
      return StatusCode::kInvalidArgument;
    case 401:
    case 403:
    case 409:
      return StatusCode::kFailedPrecondition;
    case 404:
      return StatusCode::kNotFound;
    case 410:
      return StatusCode::kOutOfRange;
    case 415:
      return StatusCode::kUnimplemented;
    case 429:
      return StatusCode::kResourceExhausted;
    case 504:
      return StatusCode::kDeadlineExceeded;
    default:
      return http_code >= 500 ? StatusCode::kUnavailable : StatusCode::kInternal;
  }
}

std::string DefaultReason(int http_code) {
  switch (http_code) {
    case 400:
      return "BadRequest";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "NotFound";
    case 405:
      return "MethodNotAllowed";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 415:
      return "UnsupportedMediaType";
    case 422:
      return "Invalid";
    case 429:
      return "TooManyRequests";
    case 500:
      return "InternalError";
    case 503:
      return "ServiceUnavailable";
    case 504:
      return "Timeout";
    default:
      return "Unknown";
  }
}

std::string Query(const std::string& key, const std::string& value) {
  return key + "=" + web::uri::encode_data_string(value);
}

void AppendQuery(std::string* path, const std::string& q) {
  if (q.empty()) return;
  *path += path->find('?') == std::string::npos ? '?' : '&';
  *path += q;
}

}  // namespace

Status StatusFromHttp(int http_code, const std::string& body,
                      const std::string& retry_after_header) {
  std::string reason = DefaultReason(http_code);
  std::string message;
  std::optional<int64_t> retry_after;
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    if (j.contains("reason") && j["reason"].is_string() &&
        !j["reason"].get<std::string>().empty()) {
      reason = j["reason"].get<std::string>();
    }
    if (j.contains("message") && j["message"].is_string()) message = j["message"];
    if (j.contains("code") && j["code"].is_number_integer()) http_code = j["code"].get<int>();
    const json* details = j.contains("details") ? &j["details"] : nullptr;
    if (details != nullptr && details->is_object() && details->contains("retryAfterSeconds") &&
        (*details)["retryAfterSeconds"].is_number_integer()) {
      retry_after = (*details)["retryAfterSeconds"].get<int64_t>();
    }
  } else {
    message = body.substr(0, 200);
  }
  if (!retry_after_header.empty()) {
    char* end = nullptr;
    long long v = std::strtoll(retry_after_header.c_str(), &end, 10);
    if (end != retry_after_header.c_str() && v >= 0) retry_after = v;
  }
  std::string text = reason + " (" + std::to_string(http_code) + "): " + message;
  if (retry_after.has_value()) text += " [retry after " + std::to_string(*retry_after) + "s]";
  return Status(CodeFor(http_code), std::move(text));
}

ApiError ErrorOf(const Status& status) {
  ApiError e;
  if (status.ok()) return e;
  static const std::regex head(R"((?:^|: )([A-Za-z]+) \((\d{3})\): )");
  static const std::regex tail(R"( \[retry after (\d+)s\]$)");
  std::smatch m;
  const std::string& msg = status.message();
  if (std::regex_search(msg, m, head)) {
    e.reason = m[1];
    e.http_code = std::stoi(m[2]);
  }
  if (std::regex_search(msg, m, tail)) e.retry_after = std::chrono::seconds(std::stoll(m[1]));
  return e;
}

Client::Client(KubeConfig config, ClientOptions options)
    : config_(std::move(config)),
      options_(std::move(options)),
      token_(config_.token),
      token_read_at_(std::chrono::steady_clock::now()) {}

std::string Client::Token() const {
  std::lock_guard<std::mutex> l(token_mu_);
  if (config_.token_file.empty()) return token_;
  const auto now = std::chrono::steady_clock::now();
  if (now - token_read_at_ < options_.token_refresh) return token_;
  token_read_at_ = now;
  std::ifstream in(config_.token_file);
  std::string fresh((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!fresh.empty() && (fresh.back() == '\n' || fresh.back() == '\r' || fresh.back() == ' ')) {
    fresh.pop_back();
  }
  if (in.good() || in.eof()) {
    if (!fresh.empty()) token_ = std::move(fresh);
  }
  return token_;
}

StatusOr<std::unique_ptr<Client>> Client::Create(const KubeConfig& config, ClientOptions options) {
  std::unique_ptr<Client> c(new Client(config, std::move(options)));
  try {
    c->http_ = std::make_unique<http::client::http_client>(
        c->config_.server, c->MakeConfig(c->options_.request_timeout));
  } catch (const std::exception& e) {
    return InvalidArgument("server \"" + config.server + "\": " + e.what());
  }
  return c;
}

http::client::http_client_config Client::MakeConfig(std::chrono::milliseconds timeout) const {
  http::client::http_client_config cfg;
  cfg.set_timeout(timeout);
  cfg.set_validate_certificates(!config_.insecure_skip_tls_verify);
  std::string ca = config_.ca_pem;
  std::string cert = config_.client_cert_pem;
  std::string key = config_.client_key_pem;
  if (!ca.empty() || !cert.empty()) {
    cfg.set_ssl_context_callback([ca, cert, key](boost::asio::ssl::context& ctx) {
      boost::system::error_code ec;
      if (!ca.empty()) ctx.add_certificate_authority(boost::asio::buffer(ca), ec);
      if (!cert.empty()) {
        ctx.use_certificate_chain(boost::asio::buffer(cert), ec);
        ctx.use_private_key(boost::asio::buffer(key), boost::asio::ssl::context::pem, ec);
      }
    });
  }
  return cfg;
}

std::string Client::Path(const ResourceType& rt, const std::string& ns, const std::string& name,
                         const std::string& subresource) {
  std::string p = rt.group.empty() ? "/api/" + rt.version : "/apis/" + rt.group + "/" + rt.version;
  if (rt.namespaced && !ns.empty()) p += "/namespaces/" + ns;
  p += "/" + rt.plural;
  if (!name.empty()) p += "/" + name;
  if (!subresource.empty()) p += "/" + subresource;
  return p;
}

StatusOr<json> Client::Do(const http::method& method, const std::string& path_and_query,
                          const json* body, const std::string& content_type) const {
  http::http_request req(method);
  req.set_request_uri(path_and_query);
  req.headers().add("Accept", "application/json");
  req.headers().add("User-Agent", options_.user_agent);
  if (std::string token = Token(); !token.empty()) {
    req.headers().add("Authorization", "Bearer " + token);
  }
  if (body != nullptr) req.set_body(body->dump(), content_type);
  std::string what = method + " " + path_and_query;
  try {
    http::http_response resp = http_->request(req).get();
    std::string text = resp.extract_string(true).get();
    int code = resp.status_code();
    if (code >= 200 && code < 300) {
      if (text.empty()) return json::object();
      json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded()) return Internal(what + ": response is not JSON");
      return j;
    }
    std::string retry_after;
    auto it = resp.headers().find("Retry-After");
    if (it != resp.headers().end()) retry_after = it->second;
    return StatusFromHttp(code, text, retry_after).WithContext(what);
  } catch (const http::http_exception& e) {
    std::string m = e.what();
    if (e.error_code() == std::errc::timed_out || m.find("timed out") != std::string::npos) {
      return DeadlineExceeded(what + ": " + m);
    }
    return Unavailable(what + ": " + m);
  } catch (const std::exception& e) {
    return Unavailable(what + ": " + e.what());
  }
}

StatusOr<json> Client::Get(const ResourceType& rt, const std::string& ns,
                           const std::string& name) const {
  return Do(http::methods::GET, Path(rt, ns, name), nullptr, {});
}

StatusOr<json> Client::List(const ResourceType& rt, const std::string& ns,
                            const ListOptions& o) const {
  std::string p = Path(rt, ns);
  if (!o.label_selector.empty()) AppendQuery(&p, Query("labelSelector", o.label_selector));
  if (!o.field_selector.empty()) AppendQuery(&p, Query("fieldSelector", o.field_selector));
  if (!o.resource_version.empty()) AppendQuery(&p, Query("resourceVersion", o.resource_version));
  if (o.limit > 0) AppendQuery(&p, "limit=" + std::to_string(o.limit));
  if (!o.continue_token.empty()) AppendQuery(&p, Query("continue", o.continue_token));
  return Do(http::methods::GET, p, nullptr, {});
}

StatusOr<json> Client::Create(const ResourceType& rt, const std::string& ns,
                              const json& object) const {
  return Do(http::methods::POST, Path(rt, ns), &object, "application/json");
}

StatusOr<json> Client::Update(const ResourceType& rt, const std::string& ns,
                              const json& object) const {
  std::string name = object.value("/metadata/name"_json_pointer, std::string());
  if (name.empty()) return InvalidArgument("update: metadata.name is empty");
  return Do(http::methods::PUT, Path(rt, ns, name), &object, "application/json");
}

StatusOr<json> Client::UpdateStatus(const ResourceType& rt, const std::string& ns,
                                    const json& object) const {
  std::string name = object.value("/metadata/name"_json_pointer, std::string());
  if (name.empty()) return InvalidArgument("update status: metadata.name is empty");
  return Do(http::methods::PUT, Path(rt, ns, name, "status"), &object, "application/json");
}

StatusOr<json> Client::MergePatch(const ResourceType& rt, const std::string& ns,
                                  const std::string& name, const json& patch,
                                  const std::string& subresource) const {
  return Do(http::methods::PATCH, Path(rt, ns, name, subresource), &patch,
            "application/merge-patch+json");
}

Status Client::Delete(const ResourceType& rt, const std::string& ns, const std::string& name,
                      const DeleteOptions& o) const {
  json body = {{"apiVersion", "v1"}, {"kind", "DeleteOptions"}};
  if (o.precondition_uid.has_value()) body["preconditions"]["uid"] = *o.precondition_uid;
  if (o.precondition_resource_version.has_value()) {
    body["preconditions"]["resourceVersion"] = *o.precondition_resource_version;
  }
  if (!o.propagation_policy.empty()) body["propagationPolicy"] = o.propagation_policy;
  return Do(http::methods::DEL, Path(rt, ns, name), &body, "application/json").status();
}

StatusOr<Client::Stream> Client::OpenStream(const std::string& path_and_query,
                                            std::chrono::milliseconds timeout,
                                            const pplx::cancellation_token& cancel) const {
  try {
    Stream s;
    s.http = std::make_shared<http::client::http_client>(config_.server, MakeConfig(timeout));
    http::http_request req(http::methods::GET);
    req.set_request_uri(path_and_query);
    req.headers().add("Accept", "application/json");
    req.headers().add("User-Agent", options_.user_agent);
    if (std::string token = Token(); !token.empty()) {
      req.headers().add("Authorization", "Bearer " + token);
    }
    s.response = s.http->request(req, cancel).get();
    return s;
  } catch (const std::exception& e) {
    return Unavailable("GET " + path_and_query + ": " + e.what());
  }
}

}  // namespace kinfer::kube
