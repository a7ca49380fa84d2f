#include "runtime/server/generation.h"

#include <atomic>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "common/http_errors.h"
#include "common/utf8.h"
#include "runtime/server/cancel_registry.h"
#include "runtime/server/choice_streams.h"
#include "runtime/server/served_model.h"
#include "runtime/server/tool_answer_stream.h"
#include "runtime/server/tool_calls.h"
#include "runtime/tokenizer/tokenizer.h"

namespace kinfer {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;
constexpr std::chrono::milliseconds kPollInterval{50};

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Latency and token bookkeeping of one request (all its choices), fed with its stream events.
class RequestTimer {
 public:
  // `prompt_tokens`: every prompt's, once (as usage counts them); `per_prompt`: the choices of
  // each prompt (choice i answers prompt i / per_prompt). `score_only` (max_tokens 0): the one
  // token each choice computes is not the client's, so it is no completion token, no first
  // token and no inter-token latency.
  RequestTimer(RuntimeMetrics* m, Clock::time_point received, int choices, int prompt_tokens,
               int per_prompt, bool score_only)
      : m_(m),
        received_(received),
        last_(static_cast<size_t>(choices)),
        prompt_tokens_(prompt_tokens),
        per_prompt_(std::max(per_prompt, 1)),
        score_only_(score_only) {}

  void OnEvent(const StreamEvent& ev, int choice) {
    const Clock::time_point now = Clock::now();
    if (ev.queue_seconds >= 0 && !queue_seen_) {
      m_->queue_time.Observe(ev.queue_seconds);
      queue_seen_ = true;
    }
    if (ev.finish != FinishReason::kNone) {
      completion_tokens_ += ev.completion_tokens;
      // A prompt's cached tokens are its first choice's (the others reuse that one's prefix).
      if (choice % per_prompt_ == 0) cached_prompt_tokens_ += ev.cached_prompt_tokens;
    }
    size_t n = ev.tokens.size();
    if (n == 0 || score_only_) return;
    std::optional<Clock::time_point>& last = last_[static_cast<size_t>(choice)];
    if (!first_seen_) {
      m_->ttft.Observe(Seconds(now - received_));  // the request's first token, of any choice
      first_seen_ = true;
    } else if (last) {
      // Tokens held back (partial UTF-8, possible stop string) arrive together: spread the gap.
      const double each = Seconds(now - *last) / static_cast<double>(n);
      for (size_t i = 0; i < n; ++i) m_->itl.Observe(each);
    }
    last = now;
  }

  int prompt_tokens() const { return prompt_tokens_; }
  int completion_tokens() const { return completion_tokens_; }  // every choice's, so far
  // Usage: every prompt's and every choice's tokens (`cached`: the prefix cache's, per prompt).
  Usage usage() const {
    return Usage{prompt_tokens_, score_only_ ? 0 : completion_tokens_, cached_prompt_tokens_};
  }

  void Finish(const char* status) {
    m_->prompt_tokens.Inc(prompt_tokens_);
    m_->generation_tokens.Inc(usage().completion_tokens);
    if (std::string_view(status) == kStatusOk) m_->e2e.Observe(Seconds(Clock::now() - received_));
    m_->CountRequest(status);
  }

 private:
  RuntimeMetrics* m_;
  Clock::time_point received_;
  std::vector<std::optional<Clock::time_point>> last_;  // per choice: its previous token's time
  bool first_seen_ = false;
  bool queue_seen_ = false;
  int prompt_tokens_ = 0;
  int completion_tokens_ = 0;
  int cached_prompt_tokens_ = 0;
  int per_prompt_;
  bool score_only_;
};

HttpResponse Reject(RuntimeMetrics* m, const Status& s, const ErrorDetail& d) {
  m->CountRequest(RequestStatusLabel(FinishReason::kError, s));
  return ErrorResponse(s, d);
}

// The prompt's token ids: the rendered chat template or the completion prompt, encoded like
// llama.cpp's server (add_special and parse_special both true), or the client's ids checked
// against the vocabulary.
StatusOr<std::vector<int32_t>> PromptTokens(const ParsedRequest& r, const CompletionPrompt* p,
                                            const ServedModel& model, ErrorDetail* d) {
  const Tokenizer& tok = model.tokenizer();
  std::vector<int32_t> ids;
  if (r.kind == ApiKind::kChat) {
    StatusOr<std::string> text =
        model.chat().Render(r.messages, r.add_generation_prompt, r.continue_final_message);
    if (!text.ok()) {
      d->param = "messages";
      return InvalidArgument("cannot apply the chat template: " + text.status().message());
    }
    ids = tok.Encode(*text, /*add_special=*/true, /*parse_special=*/true);
  } else if (p->is_ids) {
    for (int32_t id : p->ids) {
      if (id < 0 || id >= tok.vocab_size()) {
        d->param = "prompt";
        return InvalidArgument("prompt token id " + std::to_string(id) +
                               " is outside the vocabulary (0.." +
                               std::to_string(tok.vocab_size() - 1) + ")");
      }
    }
    ids = p->ids;
  } else {
    ids = tok.Encode(p->text, /*add_special=*/true, /*parse_special=*/true);
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

// Completions' echo: what goes before each choice's own text and logprobs.
struct Echo {
  bool on = false;
  std::string text;                   // the prompt as the client gave it (ids: decoded)
  std::optional<TokenLogprob> first;  // with logprobs: the first prompt token, unscored (NaN)
  // max_tokens 0 (legacy scoring): the engine still draws one token (it needs max_tokens >= 1),
  // which the answer leaves out: no completion text, usage 0, finish_reason "length".
  bool score_only = false;

  // The echo's logprobs: the first prompt token, then the engine's for the others.
  std::vector<TokenLogprob> Logprobs(std::vector<TokenLogprob>& scored) const {
    std::vector<TokenLogprob> out;
    out.reserve(scored.size() + 1);
    if (first) out.push_back(*first);
    for (TokenLogprob& t : scored) out.push_back(std::move(t));
    return out;
  }
};

Echo MakeEcho(const ParsedRequest& r, const CompletionPrompt* p, const std::vector<int32_t>& prompt,
              const Tokenizer& tok) {
  Echo e;
  if (r.kind == ApiKind::kChat) {
    // vLLM's chat echo: the last message's text, when it is the assistant's (the turn the answer
    // continues or follows).
    e.on = r.echo && !r.messages.empty() && r.messages.back().role == "assistant";
    if (e.on) e.text = r.messages.back().content;
    return e;
  }
  e.on = r.echo && p != nullptr;
  if (!e.on) return e;
  e.score_only = r.max_tokens.has_value() && *r.max_tokens == 0;
  // Special tokens rendered, as the echoed tokens are (and as a string prompt holds them).
  e.text = p->is_ids ? tok.Decode(prompt, /*special=*/true) : p->text;
  if (r.logprobs && !prompt.empty()) {
    TokenLogprob t;
    t.token = prompt[0];
    t.text = tok.TokenToPiece(prompt[0], true);
    t.logprob = std::numeric_limits<float>::quiet_NaN();
    e.first = std::move(t);
  }
  return e;
}

// How a request whose choices have all ended went: the first error, else the first
// cancellation, else kStop (every choice ended as it should).
struct Outcome {
  FinishReason finish = FinishReason::kStop;
  Status error;

  void Add(const StreamEvent& final_event) {
    if (finish == FinishReason::kError) return;
    if (final_event.finish == FinishReason::kError ||
        (final_event.finish == FinishReason::kCancelled && finish != FinishReason::kCancelled)) {
      finish = final_event.finish;
      error = final_event.error;
    }
  }
  bool failed() const {
    return finish == FinishReason::kError || finish == FinishReason::kCancelled;
  }
  const char* status_label() const { return RequestStatusLabel(finish, error); }
  // The error to answer with. REQUIRES: failed().
  Status ToStatus(bool stopping) const {
    if (finish == FinishReason::kCancelled) {
      return stopping ? Unavailable("the server is shutting down")
                      : Cancelled("the request was cancelled (POST /cancel)");
    }
    return error.ok() ? Internal("generation failed") : error;
  }
};

// A whole tool-format answer (tool_calls.h) into the choice's calls or text; an answer that is
// not one (it cannot be, once the grammar let it end) stays as it is.
void ReadTools(ChoiceOutput* c) {
  if (c->finish == FinishReason::kStop) {
    std::optional<ToolAnswer> a = ReadToolAnswer(c->text);
    if (!a) return;
    c->tool_calls = std::move(a->tool_calls);
    c->text = std::move(a->content);
    return;
  }
  if (c->finish != FinishReason::kLength) return;
  // Cut by max_tokens: what a stream of it would have sent, as OpenAI gives a cut call (its
  // arguments as far as they got, finish "length"); text not yet read as a call or an answer
  // stays as it is.
  ToolAnswerStream reader;
  std::vector<ToolAnswerStream::Delta> deltas;
  reader.Feed(c->text, &deltas);
  if (reader.answer() == ToolAnswerStream::Answer::kUnknown ||
      reader.answer() == ToolAnswerStream::Answer::kNotToolFormat) {
    return;
  }
  std::string content;
  json calls = json::array();
  for (ToolAnswerStream::Delta& d : deltas) {
    using Kind = ToolAnswerStream::Delta::Kind;
    if (d.kind == Kind::kContent) {
      content += d.text;
    } else if (d.kind == Kind::kCallStart) {
      calls.push_back(NewToolCall(d.text));
    } else if (d.index >= 0 && static_cast<size_t>(d.index) < calls.size()) {
      std::string& args = calls[static_cast<size_t>(d.index)]["function"]["arguments"]
                              .get_ref<std::string&>();
      args += d.text;
    }
  }
  c->text = std::move(content);
  if (!calls.empty()) c->tool_calls = std::move(calls);
}

// The mean logprob of a generation's tokens (-inf for none): best_of's ranking.
double MeanLogprob(const std::vector<TokenLogprob>& lps) {
  if (lps.empty()) return -std::numeric_limits<double>::infinity();
  double sum = 0.0;
  for (const TokenLogprob& t : lps) sum += static_cast<double>(t.logprob);
  return sum / static_cast<double>(lps.size());
}

// best_of: each prompt's n generations with the highest `scores` (MeanLogprob of their own
// tokens; ties: the earlier), in that order.
std::vector<ChoiceOutput> BestOf(const ParsedRequest& r, std::vector<ChoiceOutput> all,
                                 const std::vector<double>& scores) {
  const size_t per = static_cast<size_t>(r.generations());
  std::vector<ChoiceOutput> out;
  for (size_t k = 0; k * per < all.size(); ++k) {
    std::vector<std::pair<double, size_t>> ranked;
    for (size_t j = 0; j < per; ++j) ranked.emplace_back(-scores[k * per + j], j);
    std::stable_sort(ranked.begin(), ranked.end());
    for (int j = 0; j < r.n; ++j) {
      out.push_back(std::move(all[k * per + ranked[static_cast<size_t>(j)].second]));
    }
  }
  return out;
}

// `echoes`: one per prompt; generation i is prompt i / r.generations()'s. With best_of above n,
// the n of each prompt's generations with the highest mean token logprob are the choices.
HttpResponse WholeResponse(const ParsedRequest& r, const std::vector<Echo>& echoes,
                           const ResponseMeta& meta, ChoiceStreams& cs, RequestTimer timer,
                           const GenerationContext& ctx, const std::function<bool()>& client_gone) {
  std::vector<ChoiceOutput> choices(cs.size());
  std::vector<std::vector<TokenLogprob>> lps(cs.size());
  std::vector<std::vector<TokenLogprob>> prompt_lps(cs.size());
  Outcome outcome;
  StreamEvent ev;
  bool gone = false;
  while (!cs.done()) {
    // Checked every turn, not only when no event came: a generation that streams steadily would
    // otherwise run on past the server's shutdown (or its client's departure).
    if (ctx.stopping->load()) cs.CancelAll();
    if (!gone && client_gone && client_gone()) {
      gone = true;
      cs.CancelAll();
    }
    int i = 0;
    if (!cs.Next(&i, &ev, kPollInterval)) continue;
    timer.OnEvent(ev, i);
    choices[static_cast<size_t>(i)].text += ev.text;
    AppendLogprobs(&lps[static_cast<size_t>(i)], ev.logprobs);
    AppendLogprobs(&prompt_lps[static_cast<size_t>(i)], ev.prompt_logprobs);
    if (ev.finish == FinishReason::kNone) continue;
    choices[static_cast<size_t>(i)].finish = ev.finish;
    outcome.Add(ev);
    if (outcome.failed()) cs.CancelAll();  // one choice failed: the answer is an error
  }
  timer.Finish(gone ? kStatusCancelled : outcome.status_label());
  if (gone) {
    spdlog::info("{} {}: client went away; generation cancelled after {} tokens", meta.id,
                 r.kind == ApiKind::kChat ? "chat" : "completion", timer.completion_tokens());
    // Nobody reads this answer; 499 keeps the HTTP metrics honest.
    return ErrorResponse(Cancelled("the client closed the connection"), ErrorDetail{});
  }
  if (outcome.failed()) return ErrorResponse(outcome.ToStatus(ctx.stopping->load()), ErrorDetail{});
  std::vector<double> scores;  // best_of's, from the generated tokens alone (before any echo)
  if (r.best_of > r.n) {
    for (const std::vector<TokenLogprob>& l : lps) scores.push_back(MeanLogprob(l));
  }
  // prompt_logprobs: one per prompt (its generations score the same prompt), from its first.
  const size_t per_prompt = static_cast<size_t>(r.generations());
  std::vector<json> prompt_json(r.prompt_logprobs >= 0 ? echoes.size() : 0);
  for (size_t i = 0; i < choices.size(); ++i) {
    const Echo& echo = echoes[i / per_prompt];
    if (r.prompt_logprobs >= 0) {
      if (i % per_prompt == 0) {
        prompt_json[i / per_prompt] = PromptLogprobsJson(prompt_lps[i], r.prompt_logprobs);
      }
      // The scoring had the larger of the two numbers of alternatives: the echo keeps its own.
      for (TokenLogprob& t : prompt_lps[i]) {
        t.top.resize(std::min(t.top.size(), static_cast<size_t>(std::max(r.top_logprobs, 0))));
      }
    }
    if (echo.score_only) {
      choices[i].text.clear();
      choices[i].finish = FinishReason::kLength;
      lps[i].clear();
    }
    if (echo.on) {
      choices[i].text = echo.text + choices[i].text;
      if (r.logprobs && r.kind == ApiKind::kCompletion) {
        std::vector<TokenLogprob> all = echo.Logprobs(prompt_lps[i]);
        AppendLogprobs(&all, lps[i]);
        lps[i] = std::move(all);
      }
    }
    if (r.logprobs) choices[i].logprobs = &lps[i];
    if (r.tools.active()) ReadTools(&choices[i]);
  }
  if (r.best_of > r.n) {
    choices = BestOf(r, std::move(choices), scores);
    if (!r.logprobs) {
      for (ChoiceOutput& c : choices) c.logprobs = nullptr;
    }
  }
  Usage usage = timer.usage();
  json body = r.kind == ApiKind::kChat ? ChatCompletionJson(meta, choices, usage)
                                       : CompletionJson(meta, choices, usage);
  if (r.prompt_logprobs >= 0) {
    // vLLM's places: chat, the response's (its one prompt); completions, each choice's.
    if (r.kind == ApiKind::kChat) {
      body["prompt_logprobs"] = std::move(prompt_json[0]);
    } else {
      for (size_t i = 0; i < choices.size(); ++i) {
        body["choices"][i]["prompt_logprobs"] = prompt_json[i / static_cast<size_t>(r.n)];
      }
    }
  }
  return JsonResponse(200, DumpJson(body));
}

// One event of a tools request's choice `i`, streamed: the chunks of what the event adds to the
// answer (the event's logprobs ride on the first of them, or on a chunk of their own), and at
// its end the finish chunk ("tool_calls" for calls). Text that is not a tool answer (cut before
// its kind is known) goes out as it is at the end. True when the event failed the request.
bool StreamToolEvent(const ResponseMeta& meta, bool iu, int i, bool logprobs, StreamEvent* ev,
                     ToolAnswerStream* reader, Outcome* outcome,
                     const std::function<void(const json&)>& send) {
  std::vector<ToolAnswerStream::Delta> deltas;
  reader->Feed(ev->text, &deltas);
  if (ev->finish != FinishReason::kNone) {
    outcome->Add(*ev);
    if (outcome->failed()) return true;
  }
  const std::vector<TokenLogprob>* lp = logprobs && !ev->logprobs.empty() ? &ev->logprobs : nullptr;
  const bool finished = ev->finish != FinishReason::kNone;
  if (finished && (reader->answer() == ToolAnswerStream::Answer::kUnknown ||
                   reader->answer() == ToolAnswerStream::Answer::kNotToolFormat)) {
    deltas.push_back({ToolAnswerStream::Delta::Kind::kContent, 0, reader->raw()});
  }
  for (ToolAnswerStream::Delta& d : deltas) {
    using Kind = ToolAnswerStream::Delta::Kind;
    if (d.kind == Kind::kContent) {
      send(ChatChunkJson(meta, false, &d.text, lp, FinishReason::kNone, iu, i));
    } else {
      json call = d.kind == Kind::kCallStart
                      ? NewToolCall(d.text)
                      : json{{"function", {{"arguments", std::move(d.text)}}}};
      call["index"] = d.index;
      send(ChatToolCallsChunkJson(meta, json::array({std::move(call)}), lp, iu, i));
    }
    lp = nullptr;
  }
  if (lp != nullptr) send(ChatChunkJson(meta, false, nullptr, lp, FinishReason::kNone, iu, i));
  if (!finished) return false;
  if (ev->finish == FinishReason::kStop && reader->answer() == ToolAnswerStream::Answer::kCalls) {
    send(ChatToolCallsFinishChunkJson(meta, iu, i));
  } else {
    send(ChatChunkJson(meta, false, nullptr, nullptr, ev->finish, iu, i));
  }
  return false;
}

// Writes the SSE stream: each choice's chunks as its events arrive (n > 1: interleaved, each with
// its index), its finish chunk when it ends, then the usage chunk when asked, and [DONE]. Cancels
// every choice when the client goes away or one choice fails (then an error event ends the
// stream).
void StreamResponse(const ParsedRequest& r, const std::vector<Echo>& echoes,
                    const ResponseMeta& meta, ChoiceStreams& cs, RequestTimer& timer,
                    const GenerationContext& ctx, ChunkSink& sink) {
  const bool score_only = echoes[0].score_only;
  const bool chat = r.kind == ApiKind::kChat;
  const bool iu = r.include_usage;
  bool client_gone = false;
  Outcome outcome;
  int generated = 0;  // tokens so far, every choice's (continuous usage)
  auto send = [&](const json& j) {
    if (client_gone || outcome.failed()) return;
    std::string text;
    if (r.continuous_usage && j.contains("choices") && !j["choices"].empty()) {
      json with = j;
      const int done = score_only ? 0 : generated;
      with["usage"] = {{"prompt_tokens", timer.prompt_tokens()},
                       {"completion_tokens", done},
                       {"total_tokens", timer.prompt_tokens() + done}};
      text = DumpJson(with);
    } else {
      text = DumpJson(j);
    }
    if (!sink.Write(SseEvent(text))) {
      client_gone = true;
      cs.CancelAll();
    }
  };
  if (chat) {
    // An answer that can only be calls ("required", a named function) has no content: its role
    // chunk says null, as OpenAI's does (the client's stream helpers then see no text).
    const bool calls_only =
        r.tools.choice == ToolChoice::kRequired || r.tools.choice == ToolChoice::kFunction;
    for (size_t i = 0; i < cs.size(); ++i) {
      json role = ChatChunkJson(meta, true, nullptr, nullptr, FinishReason::kNone, iu,
                                static_cast<int>(i));
      if (calls_only) role["choices"][0]["delta"]["content"] = nullptr;
      send(role);
    }
  }

  std::vector<size_t> offsets(cs.size(), 0);
  std::vector<bool> echoed(cs.size(), !echoes[0].on);
  // With tools, each choice's answer is read as it comes (ToolAnswerStream): a call's name as
  // soon as it is known, then its arguments piece by piece, or a direct answer's text.
  const bool tools = chat && r.tools.active();
  std::vector<ToolAnswerStream> readers(tools ? cs.size() : 0);
  StreamEvent ev;
  while (!cs.done()) {
    if (ctx.stopping->load()) cs.CancelAll();  // every turn (see WholeResponse)
    // Every turn, not only when no event came: events that send nothing (text held back for a
    // stop string, a tool answer not yet told apart) would otherwise run a departed client's
    // generation on to max_tokens.
    if (!client_gone && sink.Closed()) {
      client_gone = true;
      cs.CancelAll();
    }
    int i = 0;
    if (!cs.Next(&i, &ev, kPollInterval)) continue;
    timer.OnEvent(ev, i);
    generated += static_cast<int>(ev.tokens.size());
    size_t& offset = offsets[static_cast<size_t>(i)];
    if (!echoed[static_cast<size_t>(i)] && ev.finish != FinishReason::kError &&
        ev.finish != FinishReason::kCancelled) {
      // The echo goes first, as its own chunk, with the prompt's logprobs when asked.
      const Echo& echo = echoes[static_cast<size_t>(i / r.generations())];
      echoed[static_cast<size_t>(i)] = true;
      if (chat) {
        send(ChatChunkJson(meta, false, &echo.text, nullptr, FinishReason::kNone, iu, i));
      } else {
        std::vector<TokenLogprob> head = echo.Logprobs(ev.prompt_logprobs);
        send(CompletionChunkJson(meta, echo.text, r.logprobs ? &head : nullptr, 0,
                                 FinishReason::kNone, iu, i));
        offset = utf8::CharCount(echo.text);
      }
    }
    if (score_only && !outcome.failed()) {
      ev.text.clear();
      ev.logprobs.clear();
      if (ev.finish == FinishReason::kStop) ev.finish = FinishReason::kLength;
    }
    if (tools) {
      if (StreamToolEvent(meta, iu, i, r.logprobs, &ev, &readers[static_cast<size_t>(i)], &outcome,
                          send)) {
        cs.CancelAll();
      }
      continue;
    }
    if (!ev.text.empty() || !ev.logprobs.empty()) {
      const std::vector<TokenLogprob>* lp = r.logprobs ? &ev.logprobs : nullptr;
      send(chat ? ChatChunkJson(meta, false, &ev.text, lp, FinishReason::kNone, iu, i)
                : CompletionChunkJson(meta, ev.text, lp, offset, FinishReason::kNone, iu, i));
      offset += utf8::CharCount(ev.text);  // never splits a character
    }
    if (ev.finish == FinishReason::kNone) continue;
    outcome.Add(ev);
    if (outcome.failed()) {
      cs.CancelAll();  // the others end too; their events are read but not sent
      continue;
    }
    std::string empty;
    send(chat ? ChatChunkJson(meta, false, nullptr, nullptr, ev.finish, iu, i)
              : CompletionChunkJson(meta, empty, nullptr, offset, ev.finish, iu, i));
  }
  timer.Finish(client_gone ? kStatusCancelled : outcome.status_label());
  if (client_gone) {
    spdlog::info("{} {}: client went away; generation cancelled after {} tokens", meta.id,
                 chat ? "chat" : "completion", timer.completion_tokens());
    return;
  }
  if (outcome.failed()) {
    // kCancelled here: the server is stopping, or POST /cancel (the client is still there).
    sink.Write(SseEvent(ErrorBodyFor(outcome.ToStatus(ctx.stopping->load()))));
  } else if (iu) {
    send(UsageChunkJson(meta, chat ? "chat.completion.chunk" : "text_completion",
                        timer.usage()));
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
  if (Status s = CheckTokenIds(r, model.tokenizer().vocab_size(), &d); !s.ok()) {
    return Reject(m, s, d);
  }

  // Each prompt's tokens and generation budget (chat: the one rendered conversation).
  const size_t num_prompts = r.kind == ApiKind::kChat ? 1 : r.prompts.size();
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int> budgets;
  int prompt_tokens = 0;
  for (size_t k = 0; k < num_prompts; ++k) {
    const CompletionPrompt* cp = r.kind == ApiKind::kChat ? nullptr : &r.prompts[k];
    StatusOr<std::vector<int32_t>> ids = PromptTokens(r, cp, model, &d);
    if (!ids.ok()) return Reject(m, ids.status(), d);
    const int n_prompt = static_cast<int>(ids->size());
    StatusOr<int> max_tokens = ResolveMaxTokens(r, n_prompt, model.engine().context_length(), &d);
    if (!max_tokens.ok()) return Reject(m, max_tokens.status(), d);
    if (Status s = CheckMinTokens(r, *max_tokens, &d); !s.ok()) return Reject(m, s, d);
    prompt_tokens += n_prompt;
    prompts.push_back(std::move(ids).value());
    budgets.push_back(*max_tokens);
  }

  StatusOr<int> priority = ResolvePriority(r, request.priority_header, &d);
  if (!priority.ok()) return Reject(m, priority.status(), d);
  StatusOr<std::optional<std::chrono::milliseconds>> timeout =
      ParseRequestTimeout(request.timeout_header, &d);
  if (!timeout.ok()) return Reject(m, timeout.status(), d);

  const int per_prompt = r.generations();
  const int engine_requests = static_cast<int>(num_prompts) * per_prompt;
  // The field that multiplies the prompts, and the one a too-large request is blamed on.
  const std::string per_field = r.best_of > r.n ? "best_of" : "n";
  const std::string group_param = num_prompts > 1 ? "prompt" : per_field;
  if (engine_requests > model.engine().max_queued_requests()) {
    d.param = group_param;
    return Reject(
        m,
        InvalidArgument(std::to_string(num_prompts) + " prompt(s) x " + per_field + " = " +
                        std::to_string(per_prompt) +
                        " is more generations than this server "
                        "queues at once (--max-queued " +
                        std::to_string(model.engine().max_queued_requests()) + ")"),
        d);
  }
  // Every choice waits with its whole prompt: a request whose choices together pass the waiting
  // limit could never be queued at once, so it is a 400 (a 503 would be retried in vain).
  const int64_t group_tokens = int64_t{prompt_tokens} * per_prompt;
  if (group_tokens > model.engine().max_waiting_prompt_tokens()) {
    d.param = group_param;
    return Reject(m,
                  InvalidArgument(std::to_string(prompt_tokens) + " prompt tokens x " + per_field +
                                  " " +
                                  std::to_string(per_prompt) + " = " +
                                  std::to_string(group_tokens) +
                                  " prompt tokens, more than this server queues at once (" +
                                  std::to_string(model.engine().max_waiting_prompt_tokens()) +
                                  ")"),
                  d);
  }
  if (ctx.stopping->load()) return Reject(m, Unavailable("the server is shutting down"), d);

  // n choices of each prompt: one engine request each (the prefix cache shares what it can). A
  // seeded request gives choice j of a prompt the seed + j, so each choice is reproducible and
  // they differ.
  std::vector<Echo> echoes;
  std::vector<std::shared_ptr<RequestStream>> streams;
  streams.reserve(static_cast<size_t>(engine_requests));
  for (size_t k = 0; k < num_prompts; ++k) {
    const CompletionPrompt* cp = r.kind == ApiKind::kChat ? nullptr : &r.prompts[k];
    echoes.push_back(MakeEcho(r, cp, prompts[k], model.tokenizer()));
    GenerationRequest g =
        ToGenerationRequest(r, std::move(prompts[k]), echoes.back().score_only ? 1 : budgets[k]);
    g.priority = *priority;
    g.cache_salt = CacheSaltFor(request.tenant_header);
    if (!r.cache_prompt) {
      // A salt no other request has: no cached block matches it, and its blocks match nobody.
      static std::atomic<uint64_t> private_salts{0};
      g.cache_salt = (uint64_t{1} << 63) | private_salts.fetch_add(1, std::memory_order_relaxed);
    }
    if (*timeout) g.deadline = request.received + **timeout;
    // best_of ranks the generations by their tokens' logprobs: asked for, if the client did not.
    if (r.best_of > r.n && g.sampling.logprobs < 0) g.sampling.logprobs = 0;
    for (int j = 0; j < per_prompt; ++j) {
      GenerationRequest gj = j + 1 < per_prompt ? g : std::move(g);
      if (gj.sampling.seed) *gj.sampling.seed += static_cast<uint64_t>(j);
      StatusOr<std::shared_ptr<RequestStream>> stream = model.engine().Submit(std::move(gj));
      if (!stream.ok()) {
        for (const auto& st : streams) st->Cancel();  // all of the request or none of it
        return Reject(m, stream.status(), d);
      }
      streams.push_back(std::move(stream).value());
    }
  }

  ResponseMeta meta;
  meta.id = NewResponseId(kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-");
  meta.created = std::chrono::duration_cast<std::chrono::seconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
  meta.model = model.name();
  RequestTimer timer(m, request.received, engine_requests, prompt_tokens, per_prompt,
                     echoes[0].score_only);
  spdlog::debug("{}: {} prompt(s), {} prompt tokens, max_tokens {}, n {}, stream {}", meta.id,
                num_prompts, prompt_tokens, budgets[0], r.n, r.stream);

  // Held until the response is done: POST /cancel with this id reaches every choice.
  std::vector<std::shared_ptr<void>> registrations;
  if (ctx.cancels != nullptr) {
    for (const auto& s : streams)
      registrations.push_back(ctx.cancels->Register(request.request_id, s));
  }
  auto choices = std::make_shared<ChoiceStreams>(std::move(streams));
  if (!r.stream) return WholeResponse(r, echoes, meta, *choices, timer, ctx, request.client_gone);

  HttpResponse resp;
  resp.status = 200;
  resp.content_type = "text/event-stream";
  resp.headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
  // The stream function owns what it needs; it runs after this function returns.
  auto owned = std::make_shared<ParsedRequest>(std::move(r));
  resp.stream = [owned, echoes = std::move(echoes), meta, choices, timer, ctx,
                 registrations = std::move(registrations)](ChunkSink& sink) mutable {
    StreamResponse(*owned, echoes, meta, *choices, timer, ctx, sink);
  };
  return resp;
}

}  // namespace kinfer
