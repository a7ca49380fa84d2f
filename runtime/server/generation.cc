#include "runtime/server/generation.h"

#include <atomic>

#include <spdlog/spdlog.h>

#include <chrono>
#include <functional>
#include <memory>

#include "common/http_errors.h"
#include "runtime/server/cancel_registry.h"
#include "runtime/server/served_model.h"
#include "runtime/tokenizer/tokenizer.h"

namespace kinfer {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;
constexpr std::chrono::milliseconds kPollInterval{50};

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Latency and token bookkeeping of one request, fed with its stream events.
class RequestTimer {
 public:
  RequestTimer(RuntimeMetrics* m, Clock::time_point received) : m_(m), received_(received) {}

  void OnEvent(const StreamEvent& ev) {
    const Clock::time_point now = Clock::now();
    if (ev.queue_seconds >= 0 && !queue_seen_) {
      m_->queue_time.Observe(ev.queue_seconds);
      queue_seen_ = true;
    }
    size_t n = ev.tokens.size();
    if (n == 0) return;
    if (!first_seen_) {
      m_->ttft.Observe(Seconds(now - received_));
      first_seen_ = true;
    } else {
      // Tokens held back (partial UTF-8, possible stop string) arrive together: spread the gap.
      const double each = Seconds(now - last_) / static_cast<double>(n);
      for (size_t i = 0; i < n; ++i) m_->itl.Observe(each);
    }
    last_ = now;
  }

  void Finish(const StreamEvent& final_event, const char* status) {
    m_->prompt_tokens.Inc(final_event.prompt_tokens);
    m_->generation_tokens.Inc(final_event.completion_tokens);
    if (std::string_view(status) == kStatusOk) m_->e2e.Observe(Seconds(Clock::now() - received_));
    m_->CountRequest(status);
  }

 private:
  RuntimeMetrics* m_;
  Clock::time_point received_;
  Clock::time_point last_;
  bool first_seen_ = false;
  bool queue_seen_ = false;
};

const char* StatusLabelFor(FinishReason r) {
  switch (r) {
    case FinishReason::kCancelled:
      return kStatusCancelled;
    case FinishReason::kError:
      return kStatusError;
    default:
      return kStatusOk;
  }
}

HttpResponse Reject(RuntimeMetrics* m, const Status& s, const ErrorDetail& d) {
  m->CountRequest(IsRetryable(s.code()) ? kStatusRejected : kStatusInvalid);
  return ErrorResponse(s, d);
}

// The prompt's token ids: the rendered chat template or the completion prompt, encoded like
// llama.cpp's server (add_special and parse_special both true), or the client's ids checked
// against the vocabulary.
StatusOr<std::vector<int32_t>> PromptTokens(const ParsedRequest& r, const ServedModel& model,
                                            ErrorDetail* d) {
  const Tokenizer& tok = model.tokenizer();
  std::vector<int32_t> ids;
  if (r.kind == ApiKind::kChat) {
    StatusOr<std::string> text = model.chat().Render(r.messages);
    if (!text.ok()) {
      d->param = "messages";
      return InvalidArgument("cannot apply the chat template: " + text.status().message());
    }
    ids = tok.Encode(*text, /*add_special=*/true, /*parse_special=*/true);
  } else if (r.prompt_is_ids) {
    for (int32_t id : r.prompt_ids) {
      if (id < 0 || id >= tok.vocab_size()) {
        d->param = "prompt";
        return InvalidArgument("prompt token id " + std::to_string(id) +
                               " is outside the vocabulary (0.." +
                               std::to_string(tok.vocab_size() - 1) + ")");
      }
    }
    ids = r.prompt_ids;
  } else {
    ids = tok.Encode(r.prompt, /*add_special=*/true, /*parse_special=*/true);
  }
  if (ids.empty()) {
    d->param = r.kind == ApiKind::kChat ? "messages" : "prompt";
    return InvalidArgument("the prompt is empty after tokenization");
  }
  return ids;
}

void AppendLogprobs(std::vector<TokenLogprob>* all, std::vector<TokenLogprob>& add) {
  for (TokenLogprob& t : add) all->push_back(std::move(t));
}

HttpResponse WholeResponse(const ParsedRequest& r, const ResponseMeta& meta,
                           std::shared_ptr<RequestStream> stream, RequestTimer timer,
                           const GenerationContext& ctx, const std::function<bool()>& client_gone) {
  std::string text;
  std::vector<TokenLogprob> lps;
  StreamEvent ev;
  bool gone = false;
  while (true) {
    // Checked every turn, not only when no event came: a generation that streams steadily would
    // otherwise run on past the server's shutdown (or its client's departure).
    if (ctx.stopping->load()) stream->Cancel();
    if (!gone && client_gone && client_gone()) {
      gone = true;
      stream->Cancel();
    }
    if (!stream->Next(&ev, kPollInterval)) continue;
    timer.OnEvent(ev);
    text += ev.text;
    AppendLogprobs(&lps, ev.logprobs);
    if (ev.finish != FinishReason::kNone) break;
  }
  timer.Finish(ev, gone ? kStatusCancelled : StatusLabelFor(ev.finish));
  if (gone) {
    spdlog::info("{} {}: client went away; generation cancelled after {} tokens", meta.id,
                 r.kind == ApiKind::kChat ? "chat" : "completion", ev.completion_tokens);
    // Nobody reads this answer; 499 keeps the HTTP metrics honest.
    return ErrorResponse(Cancelled("the client closed the connection"), ErrorDetail{});
  }
  if (ev.finish == FinishReason::kError) {
    Status s = ev.error.ok() ? Internal("generation failed") : ev.error;
    return ErrorResponse(s, ErrorDetail{});
  }
  if (ev.finish == FinishReason::kCancelled) {
    return ErrorResponse(ctx.stopping->load()
                             ? Unavailable("the server is shutting down")
                             : Cancelled("the request was cancelled (POST /cancel)"),
                         ErrorDetail{});
  }
  Usage usage{ev.prompt_tokens, ev.completion_tokens};
  const std::vector<TokenLogprob>* lp = r.logprobs ? &lps : nullptr;
  json body = r.kind == ApiKind::kChat ? ChatCompletionJson(meta, text, ev.finish, usage, lp)
                                       : CompletionJson(meta, text, ev.finish, usage, lp);
  return JsonResponse(200, DumpJson(body));
}

// Writes the SSE stream: chunks as events arrive, then the finish chunk, the usage chunk when
// asked, and [DONE]. Cancels the engine request when the client goes away.
void StreamResponse(const ParsedRequest& r, const ResponseMeta& meta,
                    const std::shared_ptr<RequestStream>& stream, RequestTimer& timer,
                    const GenerationContext& ctx, ChunkSink& sink) {
  const bool chat = r.kind == ApiKind::kChat;
  const bool iu = r.include_usage;
  bool client_gone = false;
  auto send = [&](const json& j) {
    if (client_gone) return;
    if (!sink.Write(SseEvent(DumpJson(j)))) {
      client_gone = true;
      stream->Cancel();
    }
  };
  if (chat) send(ChatChunkJson(meta, true, nullptr, nullptr, FinishReason::kNone, iu));

  size_t offset = 0;
  StreamEvent ev;
  while (true) {
    if (ctx.stopping->load()) stream->Cancel();  // every turn (see WholeResponse)
    if (!stream->Next(&ev, kPollInterval)) {
      if (sink.Closed()) {
        client_gone = true;
        stream->Cancel();
      }
      continue;
    }
    timer.OnEvent(ev);
    if (!ev.text.empty() || !ev.logprobs.empty()) {
      const std::vector<TokenLogprob>* lp = r.logprobs ? &ev.logprobs : nullptr;
      send(chat ? ChatChunkJson(meta, false, &ev.text, lp, FinishReason::kNone, iu)
                : CompletionChunkJson(meta, ev.text, lp, offset, FinishReason::kNone, iu));
      offset += ev.text.size();
    }
    if (ev.finish != FinishReason::kNone) break;
  }
  timer.Finish(ev, client_gone ? kStatusCancelled : StatusLabelFor(ev.finish));
  if (client_gone) {
    spdlog::info("{} {}: client went away; generation cancelled after {} tokens", meta.id,
                 chat ? "chat" : "completion", ev.completion_tokens);
    return;
  }
  if (ev.finish == FinishReason::kError || ev.finish == FinishReason::kCancelled) {
    // kCancelled here: the server is stopping, or POST /cancel (the client is still there).
    Status s = ev.finish == FinishReason::kCancelled
                   ? (ctx.stopping->load() ? Unavailable("the server is shutting down")
                                           : Cancelled("the request was cancelled (POST /cancel)"))
               : ev.error.ok() ? Internal("generation failed")
                               : ev.error;
    sink.Write(SseEvent(ErrorBodyFor(s)));
  } else {
    std::string empty;
    send(chat ? ChatChunkJson(meta, false, nullptr, nullptr, ev.finish, iu)
              : CompletionChunkJson(meta, empty, nullptr, offset, ev.finish, iu));
    if (iu) {
      send(UsageChunkJson(meta, chat ? "chat.completion.chunk" : "text_completion",
                          Usage{ev.prompt_tokens, ev.completion_tokens}));
    }
  }
  if (!client_gone) sink.Write(kSseDone);
}

}  // namespace

HttpResponse HandleGeneration(ApiKind kind, const HttpRequest& request,
                              const GenerationContext& ctx) {
  RuntimeMetrics* m = ctx.metrics;
  ErrorDetail d;
  StatusOr<ParsedRequest> parsed = kind == ApiKind::kChat
                                       ? ParseChatRequest(request.body, &d)
                                       : ParseCompletionRequest(request.body, &d);
  if (!parsed.ok()) return Reject(m, parsed.status(), d);
  ParsedRequest& r = parsed.value();
  ServedModel& model = *ctx.model;
  if (Status s = CheckModel(r, model.name(), &d); !s.ok()) return Reject(m, s, d);
  if (Status s = CheckLogitBias(r, model.tokenizer().vocab_size(), &d); !s.ok()) {
    return Reject(m, s, d);
  }

  StatusOr<std::vector<int32_t>> prompt = PromptTokens(r, model, &d);
  if (!prompt.ok()) return Reject(m, prompt.status(), d);
  const int n_prompt = static_cast<int>(prompt->size());
  StatusOr<int> max_tokens = ResolveMaxTokens(r, n_prompt, model.engine().context_length(), &d);
  if (!max_tokens.ok()) return Reject(m, max_tokens.status(), d);

  StatusOr<int> priority = ResolvePriority(r, request.priority_header, &d);
  if (!priority.ok()) return Reject(m, priority.status(), d);
  StatusOr<std::optional<std::chrono::milliseconds>> timeout =
      ParseRequestTimeout(request.timeout_header, &d);
  if (!timeout.ok()) return Reject(m, timeout.status(), d);

  if (ctx.stopping->load()) return Reject(m, Unavailable("the server is shutting down"), d);
  GenerationRequest g = ToGenerationRequest(r, std::move(prompt).value(), *max_tokens);
  g.priority = *priority;
  g.cache_salt = CacheSaltFor(request.tenant_header);
  if (!r.cache_prompt) {
    // A salt no other request has: no cached block matches it, and its blocks match nobody.
    static std::atomic<uint64_t> private_salts{0};
    g.cache_salt = (uint64_t{1} << 63) | private_salts.fetch_add(1, std::memory_order_relaxed);
  }
  if (*timeout) g.deadline = request.received + **timeout;
  StatusOr<std::shared_ptr<RequestStream>> stream = model.engine().Submit(std::move(g));
  if (!stream.ok()) return Reject(m, stream.status(), d);

  ResponseMeta meta;
  meta.id = NewResponseId(kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-");
  meta.created = std::chrono::duration_cast<std::chrono::seconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
  meta.model = model.name();
  RequestTimer timer(m, request.received);
  spdlog::debug("{}: {} prompt tokens, max_tokens {}, stream {}", meta.id, n_prompt, *max_tokens,
                r.stream);

  // Held until the response is done: POST /cancel with this id reaches the generation.
  std::shared_ptr<void> registration =
      ctx.cancels != nullptr ? ctx.cancels->Register(request.request_id, *stream) : nullptr;
  if (!r.stream) {
    return WholeResponse(r, meta, std::move(stream).value(), timer, ctx, request.client_gone);
  }

  HttpResponse resp;
  resp.status = 200;
  resp.content_type = "text/event-stream";
  resp.headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
  // The stream function owns what it needs; it runs after this function returns.
  auto owned = std::make_shared<ParsedRequest>(std::move(r));
  resp.stream = [owned, meta, s = std::move(stream).value(), timer, ctx, registration](
                    ChunkSink& sink) mutable { StreamResponse(*owned, meta, s, timer, ctx, sink); };
  return resp;
}

}  // namespace kinfer
