#include "runtime/server/responses_api.h"

#include "common/json_limits.h"
#include "runtime/server/request_fields.h"

namespace kinfer {
namespace {

using request_fields::Field;
using request_fields::Invalid;

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

// Text content: a string, or an array of text parts ({"type": "input_text" | "output_text" |
// "text", "text": ...}) joined with "\n", as the chat API joins its parts.
Status TextOf(const ojson& content, const std::string& param, std::string* out, ErrorDetail* d) {
  if (content.is_string()) {
    *out = content.get<std::string>();
    return Status::Ok();
  }
  if (!content.is_array()) {
    return Invalid(d, param, "'" + param + "' must be a string or an array of text parts");
  }
  out->clear();
  for (size_t j = 0; j < content.size(); ++j) {
    const ojson& part = content[j];
    const std::string at = param + "[" + std::to_string(j) + "]";
    const ojson* type = part.is_object() ? Field(part, "type") : nullptr;
    const std::string t = type != nullptr && type->is_string() ? type->get<std::string>() : "";
    if (t != "input_text" && t != "output_text" && t != "text") {
      return Invalid(d, at + ".type",
                     "'" + at +
                         ".type' must be \"input_text\" or \"output_text\" (kinfer serves "
                         "text models: images, files and audio are not supported)");
    }
    const ojson* text = Field(part, "text");
    if (text == nullptr || !text->is_string()) {
      return Invalid(d, at + ".text", "'" + at + ".text' must be a string");
    }
    if (j > 0) *out += '\n';
    *out += text->get<std::string>();
  }
  return Status::Ok();
}

Status RefuseIfSet(const ojson& in, const char* name, const char* why, ErrorDetail* d) {
  const ojson* v = Field(in, name);
  if (v == nullptr || (v->is_boolean() && !v->get<bool>())) return Status::Ok();
  if ((v->is_array() || v->is_object()) && v->empty()) return Status::Ok();
  return Invalid(d, name, std::string("'") + name + "' is not supported: " + why);
}

// input[] into chat messages (appended to *messages).
Status InputItems(const ojson& input, ojson* messages, ErrorDetail* d) {
  for (size_t i = 0; i < input.size(); ++i) {
    const ojson& item = input[i];
    const std::string at = "input[" + std::to_string(i) + "]";
    if (!item.is_object()) return Invalid(d, at, "'" + at + "' must be an object");
    const ojson* type = Field(item, "type");
    const std::string t =
        type != nullptr && type->is_string() ? type->get<std::string>() : "message";
    if (t == "message") {
      const ojson* role = Field(item, "role");
      if (role == nullptr || !role->is_string()) {
        return Invalid(d, at + ".role", "'" + at + ".role' must be a string");
      }
      const ojson* content = Field(item, "content");
      if (content == nullptr)
        return Invalid(d, at + ".content", "'" + at + ".content' is required");
      std::string text;
      KINFER_RETURN_IF_ERROR(TextOf(*content, at + ".content", &text, d));
      messages->push_back({{"role", *role}, {"content", text}});
    } else if (t == "function_call") {
      const ojson* call_id = Field(item, "call_id");
      const ojson* name = Field(item, "name");
      const ojson* args = Field(item, "arguments");
      if (call_id == nullptr || !call_id->is_string() || name == nullptr || !name->is_string()) {
        return Invalid(d, at, "'" + at + "' must have string 'call_id', 'name' and 'arguments'");
      }
      ojson call = {
          {"id", *call_id},
          {"type", "function"},
          {"function", {{"name", *name}, {"arguments", args != nullptr ? *args : ojson("{}")}}}};
      // Calls after an assistant turn belong to it (the chat form: one turn, its tool_calls).
      if (messages->empty() || (*messages)[messages->size() - 1]["role"] != "assistant") {
        messages->push_back({{"role", "assistant"}, {"content", nullptr}});
      }
      ojson& turn = (*messages)[messages->size() - 1];
      if (!turn.contains("tool_calls")) turn["tool_calls"] = ojson::array();
      turn["tool_calls"].push_back(std::move(call));
    } else if (t == "function_call_output") {
      const ojson* call_id = Field(item, "call_id");
      const ojson* output = Field(item, "output");
      if (call_id == nullptr || !call_id->is_string() || output == nullptr) {
        return Invalid(d, at, "'" + at + "' must have a string 'call_id' and an 'output'");
      }
      std::string text;
      KINFER_RETURN_IF_ERROR(TextOf(*output, at + ".output", &text, d));
      messages->push_back({{"role", "tool"}, {"tool_call_id", *call_id}, {"content", text}});
    } else {
      return Invalid(d, at + ".type",
                     "'" + at + ".type' \"" + t +
                         "\" is not supported (message, function_call and function_call_output "
                         "are; kinfer stores nothing, so item references cannot be resolved)");
    }
  }
  return Status::Ok();
}

// The Responses tools into chat tools; other than function tools: 400.
Status Tools(const ojson& tools, ojson* out, ErrorDetail* d) {
  if (!tools.is_array()) return Invalid(d, "tools", "'tools' must be an array");
  *out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& tool = tools[i];
    const std::string at = "tools[" + std::to_string(i) + "]";
    const ojson* type = tool.is_object() ? Field(tool, "type") : nullptr;
    if (type == nullptr || *type != "function") {
      return Invalid(d, at + ".type",
                     "'" + at +
                         ".type' must be \"function\" (built-in tools such as web and "
                         "file search are not part of kinfer)");
    }
    ojson fn = ojson::object();
    for (const char* k : {"name", "description", "parameters"}) {
      if (const ojson* v = Field(tool, k)) fn[k] = *v;
    }
    out->push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return Status::Ok();
}

json UsageJson(const json& chat_usage) {
  const int64_t in = chat_usage.value("prompt_tokens", int64_t{0});
  const int64_t out = chat_usage.value("completion_tokens", int64_t{0});
  int64_t cached = 0;
  if (auto d = chat_usage.find("prompt_tokens_details");
      d != chat_usage.end() && d->is_object()) {
    cached = d->value("cached_tokens", int64_t{0});
  }
  return {{"input_tokens", in},
          {"input_tokens_details", {{"cached_tokens", cached}}},
          {"output_tokens", out},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", in + out}};
}

// The Response object around `output`.
json ResponseObject(const ResponsesRequest& req, const std::string& id, int64_t created_at,
                    const std::string& model, const std::string& status, json output,
                    const json& usage) {
  json r = {{"id", id},
            {"object", "response"},
            {"created_at", created_at},
            {"status", status},
            {"model", model},
            {"output", std::move(output)},
            {"error", nullptr},
            {"incomplete_details", nullptr}};
  if (status == "incomplete") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
  if (req.echo.is_object()) r.update(req.echo);
  r["usage"] = usage.is_null() ? json(nullptr) : UsageJson(usage);
  return r;
}

json MessageItem(const std::string& id, const std::string& status, const std::string& text) {
  return {{"id", id},
          {"type", "message"},
          {"status", status},
          {"role", "assistant"},
          {"content", json::array({{{"type", "output_text"},
                                    {"text", text},
                                    {"annotations", json::array()},
                                    {"logprobs", json::array()}}})}};
}

json CallItem(const std::string& id, const std::string& status, const json& call_id,
              const json& name, const std::string& arguments) {
  return {{"id", id},     {"type", "function_call"}, {"status", status}, {"call_id", call_id},
          {"name", name}, {"arguments", arguments}};
}

}  // namespace

StatusOr<std::string> ResponsesToChatBody(std::string_view body, ResponsesRequest* req,
                                          ErrorDetail* d) {
  // As every body (ParseObject): dump() below recurses once per level, and 100,000 nested
  // arrays in `metadata` overflowed the stack.
  if (!JsonNestingWithin(body)) {
    return Invalid(d, "",
                   "request body nests arrays and objects deeper than " +
                       std::to_string(kMaxJsonNesting) + " levels");
  }
  ojson in;
  try {
    in = ojson::parse(body.begin(), body.end());
  } catch (const ojson::exception&) {
    return Invalid(d, "", "the request body is not valid JSON");
  }
  if (!in.is_object()) return Invalid(d, "", "the request body must be a JSON object");
  const char* kStateless = "kinfer stores no responses; send the whole conversation in 'input'";
  KINFER_RETURN_IF_ERROR(RefuseIfSet(in, "previous_response_id", kStateless, d));
  KINFER_RETURN_IF_ERROR(RefuseIfSet(in, "conversation", kStateless, d));
  KINFER_RETURN_IF_ERROR(RefuseIfSet(in, "prompt", kStateless, d));
  KINFER_RETURN_IF_ERROR(RefuseIfSet(in, "background", "responses are answered in the request", d));
  // metadata is echoed on the response: OpenAI's shape (at most 16 string pairs, keys up to 64
  // characters, values up to 512) or nothing, not any JSON a client sends.
  if (const ojson* md = Field(in, "metadata")) {
    bool ok = md->is_object() && md->size() <= 16;
    for (auto it = ok ? md->begin() : md->end(); ok && it != md->end(); ++it) {
      ok = it.key().size() <= 64 && it.value().is_string() &&
           it.value().get_ref<const std::string&>().size() <= 512;
    }
    if (!ok) {
      return Invalid(d, "metadata",
                     "'metadata' must be an object of at most 16 string values (keys up to 64 "
                     "characters, values up to 512)");
    }
  }
  // include: only the output text's logprobs are there to include.
  bool want_logprobs = false;
  if (const ojson* inc = Field(in, "include")) {
    if (!inc->is_array()) return Invalid(d, "include", "'include' must be an array of strings");
    for (const ojson& x : *inc) {
      if (x != "message.output_text.logprobs") {
        return Invalid(d, "include",
                       "'include' may only hold \"message.output_text.logprobs\" (kinfer has no "
                       "reasoning, tool or file outputs to include)");
      }
      want_logprobs = true;
    }
  }
  // A reasoning object that asks for no reasoning (no effort, null or "none"; a summary of none
  // is nothing) is accepted, as clients send it by default; an effort is refused.
  if (const ojson* r = Field(in, "reasoning"); r != nullptr) {
    const auto effort = r->is_object() ? r->find("effort") : r->end();
    if (!r->is_object() ||
        (effort != r->end() && !effort->is_null() && *effort != "none")) {
      return Invalid(d, "reasoning",
                     "'reasoning' with an effort is not supported: the served model does not "
                     "reason");
    }
  }

  ojson chat = ojson::object();
  if (const ojson* m = Field(in, "model")) chat["model"] = *m;
  ojson messages = ojson::array();
  const ojson* instructions = Field(in, "instructions");
  if (instructions != nullptr) {
    if (!instructions->is_string()) {
      return Invalid(d, "instructions", "'instructions' must be a string");
    }
    messages.push_back({{"role", "system"}, {"content", *instructions}});
  }
  const ojson* input = Field(in, "input");
  if (input == nullptr) return Invalid(d, "input", "'input' is required");
  if (input->is_string()) {
    messages.push_back({{"role", "user"}, {"content", *input}});
  } else if (input->is_array()) {
    KINFER_RETURN_IF_ERROR(InputItems(*input, &messages, d));
  } else {
    return Invalid(d, "input", "'input' must be a string or an array of input items");
  }
  if (messages.empty()) return Invalid(d, "input", "'input' must not be empty");
  chat["messages"] = std::move(messages);

  if (const ojson* v = Field(in, "max_output_tokens")) chat["max_completion_tokens"] = *v;
  // Logprobs: asked by include, with top_logprobs alternatives (the chat field's range).
  const ojson* top = Field(in, "top_logprobs");
  if (want_logprobs || (top != nullptr && !(top->is_number() && *top == 0))) {
    chat["logprobs"] = true;
    if (top != nullptr) chat["top_logprobs"] = *top;
  }
  // Sampling, and the vLLM/kinfer extensions the chat endpoint takes, as they are.
  for (const char* k :
       {"temperature", "top_p", "parallel_tool_calls", "seed", "top_k", "min_p",
        "repetition_penalty", "frequency_penalty", "presence_penalty", "stop", "logit_bias",
        "priority", "min_tokens", "stop_token_ids", "speculative", "user"}) {
    if (const ojson* v = Field(in, k)) chat[k] = *v;
  }
  if (const ojson* v = Field(in, "max_tool_calls")) {
    if (!v->is_number_integer() || v->get<int64_t>() < 1) {
      return Invalid(d, "max_tool_calls", "'max_tool_calls' must be an integer >= 1");
    }
    if (v->get<int64_t>() == 1) chat["parallel_tool_calls"] = false;
  }
  if (const ojson* tools = Field(in, "tools")) {
    ojson t;
    KINFER_RETURN_IF_ERROR(Tools(*tools, &t, d));
    if (!t.empty()) chat["tools"] = std::move(t);
  }
  if (const ojson* tc = Field(in, "tool_choice")) {
    if (tc->is_string()) {
      chat["tool_choice"] = *tc;
    } else if (tc->is_object() && Field(*tc, "type") != nullptr && (*tc)["type"] == "function" &&
               Field(*tc, "name") != nullptr) {
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*tc)["name"]}}}};
    } else {
      return Invalid(d, "tool_choice",
                     "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": "
                     "\"function\", \"name\": ...}");
    }
  }
  if (const ojson* text = Field(in, "text")) {
    const ojson* format = text->is_object() ? Field(*text, "format") : nullptr;
    if (format != nullptr) {
      const ojson* type = format->is_object() ? Field(*format, "type") : nullptr;
      if (type != nullptr && *type == "json_schema") {
        ojson js = ojson::object();
        for (const char* k : {"name", "schema", "strict", "description"}) {
          if (const ojson* v = Field(*format, k)) js[k] = *v;
        }
        chat["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(js)}};
      } else if (type != nullptr && (*type == "json_object" || *type == "text")) {
        chat["response_format"] = {{"type", *type}};
      } else {
        return Invalid(d, "text.format",
                       "'text.format' must be {\"type\": \"text\"}, {\"type\": \"json_object\"} "
                       "or {\"type\": \"json_schema\", \"name\": ..., \"schema\": {...}}");
      }
    }
  }
  const ojson* stream = Field(in, "stream");
  if (stream != nullptr && !stream->is_boolean()) {
    return Invalid(d, "stream", "'stream' must be a boolean");
  }
  req->stream = stream != nullptr && stream->get<bool>();
  if (req->stream) {
    chat["stream"] = true;
    chat["stream_options"] = {{"include_usage", true}};
  }

  // What the Response echoes (as `json` once here: a Response's keys are sorted anyway).
  ojson e = ojson::object();
  e["instructions"] = instructions != nullptr ? *instructions : ojson(nullptr);
  e["tools"] = Field(in, "tools") != nullptr ? in["tools"] : ojson::array();
  e["tool_choice"] = Field(in, "tool_choice") != nullptr ? in["tool_choice"] : ojson("auto");
  e["parallel_tool_calls"] =
      chat.contains("parallel_tool_calls") ? chat["parallel_tool_calls"] : ojson(true);
  e["temperature"] = Field(in, "temperature") != nullptr ? in["temperature"] : ojson(1.0);
  e["top_p"] = Field(in, "top_p") != nullptr ? in["top_p"] : ojson(1.0);
  e["max_output_tokens"] =
      Field(in, "max_output_tokens") != nullptr ? in["max_output_tokens"] : ojson(nullptr);
  e["metadata"] = Field(in, "metadata") != nullptr ? in["metadata"] : ojson::object();
  e["text"] = Field(in, "text") != nullptr ? in["text"] : ojson{{"format", {{"type", "text"}}}};
  e["top_logprobs"] = top != nullptr ? *top : ojson(0);
  e["truncation"] = "disabled";
  e["store"] = false;
  e["previous_response_id"] = nullptr;
  e["reasoning"] = nullptr;
  if (const ojson* u = Field(in, "user")) e["user"] = *u;
  req->echo = json::parse(e.dump());
  return chat.dump();
}

std::string ResponsesParam(std::string_view p) {
  auto starts = [&](std::string_view s) { return p.substr(0, s.size()) == s; };
  if (p == "max_tokens" || p == "max_completion_tokens") return "max_output_tokens";
  if (starts("messages")) return "input";
  if (starts("response_format")) return "text.format";
  if (starts("tools[")) {
    std::string out(p);
    const size_t f = out.find(".function");
    if (f != std::string::npos) out.erase(f, sizeof(".function") - 1);
    return out;
  }
  return std::string(p);
}

json ResponseFromChat(const json& chat, const ResponsesRequest& req, const std::string& id,
                      int64_t created_at) {
  json output = json::array();
  std::string finish;
  if (chat.contains("choices") && chat["choices"].is_array() && !chat["choices"].empty()) {
    const json& choice = chat["choices"][0];
    finish = choice.value("finish_reason", "");
    const std::string item_status = finish == "length" ? "incomplete" : "completed";
    const json& msg = choice["message"];
    const bool calls = msg.contains("tool_calls") && msg["tool_calls"].is_array();
    if (msg.contains("content") && msg["content"].is_string() &&
        (!calls || !msg["content"].get_ref<const std::string&>().empty())) {
      json item = MessageItem(NewResponseId("msg_"), item_status, msg["content"]);
      if (choice.contains("logprobs") && choice["logprobs"].is_object() &&
          choice["logprobs"].contains("content") && choice["logprobs"]["content"].is_array()) {
        item["content"][0]["logprobs"] = choice["logprobs"]["content"];  // the same shape
      }
      output.push_back(std::move(item));
    }
    if (calls) {
      for (const json& tc : msg["tool_calls"]) {
        output.push_back(CallItem(NewResponseId("fc_"), "completed", tc["id"],
                                  tc["function"]["name"], tc["function"]["arguments"]));
      }
    }
  }
  return ResponseObject(req, id, created_at, chat.value("model", ""),
                        finish == "length" ? "incomplete" : "completed", std::move(output),
                        chat.contains("usage") ? chat["usage"] : json(nullptr));
}

// ---- streaming ---------------------------------------------------------------------------------

ResponsesStreamTranslator::ResponsesStreamTranslator(ResponsesRequest req, std::string id,
                                                     int64_t created_at)
    : req_(std::move(req)), id_(std::move(id)), created_at_(created_at) {}

void ResponsesStreamTranslator::Emit(const std::string& type, json event,
                                     std::vector<std::string>* out) {
  event["type"] = type;
  event["sequence_number"] = sequence_++;
  out->push_back("event: " + type + "\ndata: " + DumpJson(event) + "\n\n");
}

namespace {
// An output item's id: "msg_" / "fc_", the response id's own part, the item's index.
std::string ItemId(const char* prefix, const std::string& response_id, size_t index) {
  const size_t us = response_id.find('_');
  std::string out = prefix;  // (appended: GCC 12 warns falsely on prefix + std::string)
  out += response_id.substr(us == std::string::npos ? 0 : us + 1);
  out += '_';
  out += std::to_string(index);
  return out;
}
}  // namespace

json ResponsesStreamTranslator::Snapshot(const char* status) const {
  return ResponseObject(req_, id_, created_at_, model_, status, output_, usage_);
}

void ResponsesStreamTranslator::Open(std::vector<std::string>* out) {
  opened_ = true;
  Emit("response.created", {{"response", Snapshot("in_progress")}}, out);
  Emit("response.in_progress", {{"response", Snapshot("in_progress")}}, out);
}

void ResponsesStreamTranslator::CloseItem(std::vector<std::string>* out) {
  if (!item_open_) return;
  item_open_ = false;
  const size_t index = output_.size() - 1;
  json& item = output_[index];
  const std::string item_id = item["id"];
  if (item["type"] == "message") {
    item["status"] = finish_reason_ == "length" ? "incomplete" : "completed";
    json& part = item["content"][0];
    // Logprobs of tokens that gave no text yet (the last ones' held bytes) join the part.
    for (const json& lp : pending_logprobs_) part["logprobs"].push_back(lp);
    pending_logprobs_ = json::array();
    Emit("response.output_text.done",
         {{"item_id", item_id},
          {"output_index", index},
          {"content_index", 0},
          {"text", part["text"]},
          {"logprobs", part["logprobs"]}},
         out);
    Emit("response.content_part.done",
         {{"item_id", item_id}, {"output_index", index}, {"content_index", 0}, {"part", part}},
         out);
  } else {
    item["status"] = "completed";
    Emit("response.function_call_arguments.done",
         {{"item_id", item_id},
          {"output_index", index},
          {"name", item["name"]},
          {"arguments", item["arguments"]}},
         out);
  }
  Emit("response.output_item.done", {{"output_index", index}, {"item", item}}, out);
}

void ResponsesStreamTranslator::Finish(std::vector<std::string>* out) {
  finished_ = true;
  CloseItem(out);
  const bool cut = finish_reason_ == "length";
  Emit(cut ? "response.incomplete" : "response.completed",
       {{"response", Snapshot(cut ? "incomplete" : "completed")}}, out);
}

std::vector<std::string> ResponsesStreamTranslator::Translate(std::string_view chat_event) {
  std::vector<std::string> out;
  if (finished_) return out;
  std::string_view payload = chat_event;
  if (payload.substr(0, 6) == "data: ") payload.remove_prefix(6);
  while (!payload.empty() && (payload.back() == '\n' || payload.back() == '\r')) {
    payload.remove_suffix(1);
  }
  if (payload == "[DONE]") {
    if (!opened_) Open(&out);
    Finish(&out);
    return out;
  }
  json chunk = json::parse(payload.begin(), payload.end(), nullptr, /*allow_exceptions=*/false);
  if (chunk.is_discarded() || !chunk.is_object()) return out;
  if (model_.empty() && chunk.contains("model") && chunk["model"].is_string()) {
    model_ = chunk["model"].get<std::string>();
  }
  if (!opened_) Open(&out);
  if (chunk.contains("error")) {
    // The generation failed (or the server is stopping): the error, then the failed response.
    const json& e = chunk["error"];
    Emit("error",
         {{"code", e.value("code", json(nullptr))},
          {"message", e.value("message", "generation failed")},
          {"param", e.value("param", json(nullptr))}},
         &out);
    json failed = Snapshot("failed");
    failed["error"] = {
        {"code", e.contains("code") && e["code"].is_string() ? e["code"] : json("server_error")},
        {"message", e.value("message", "generation failed")}};
    Emit("response.failed", {{"response", std::move(failed)}}, &out);
    finished_ = true;
    return out;
  }
  if (chunk.contains("usage") && chunk["usage"].is_object()) usage_ = chunk["usage"];
  if (!chunk.contains("choices") || !chunk["choices"].is_array() || chunk["choices"].empty()) {
    return out;
  }
  const json& choice = chunk["choices"][0];
  const json& delta = choice.contains("delta") ? choice["delta"] : json::object();
  // A chunk's logprobs (chat's entries have the Responses shape) go out with the next text.
  if (choice.contains("logprobs") && choice["logprobs"].is_object() &&
      choice["logprobs"].contains("content") && choice["logprobs"]["content"].is_array()) {
    for (const json& lp : choice["logprobs"]["content"]) pending_logprobs_.push_back(lp);
  }
  if (delta.contains("content") && delta["content"].is_string() &&
      !delta["content"].get_ref<const std::string&>().empty()) {
    if (item_open_ && output_[output_.size() - 1]["type"] != "message") CloseItem(&out);
    const size_t index = item_open_ ? output_.size() - 1 : output_.size();
    if (!item_open_) {
      json item = MessageItem(ItemId("msg_", id_, index), "in_progress", "");
      json part = item["content"][0];
      item["content"] = json::array();
      Emit("response.output_item.added", {{"output_index", index}, {"item", item}}, &out);
      Emit("response.content_part.added",
           {{"item_id", item["id"]}, {"output_index", index}, {"content_index", 0}, {"part", part}},
           &out);
      item["content"].push_back(std::move(part));
      output_.push_back(std::move(item));
      item_open_ = true;
    }
    json& part = output_[index]["content"][0];
    part["text"] = part["text"].get<std::string>() + delta["content"].get<std::string>();
    for (const json& lp : pending_logprobs_) part["logprobs"].push_back(lp);
    Emit("response.output_text.delta",
         {{"item_id", output_[index]["id"]},
          {"output_index", index},
          {"content_index", 0},
          {"delta", delta["content"]},
          {"logprobs", std::move(pending_logprobs_)}},
         &out);
    pending_logprobs_ = json::array();
  }
  if (delta.contains("tool_calls") && delta["tool_calls"].is_array()) {
    for (const json& tc : delta["tool_calls"]) {
      const json fn = tc.contains("function") ? tc["function"] : json::object();
      if (tc.contains("id") && tc["id"].is_string()) {
        CloseItem(&out);  // a new call: the item before it is done
        const size_t index = output_.size();
        json item =
            CallItem(ItemId("fc_", id_, index), "in_progress", tc["id"], fn.value("name", ""), "");
        Emit("response.output_item.added", {{"output_index", index}, {"item", item}}, &out);
        output_.push_back(std::move(item));
        item_open_ = true;
      }
      const std::string args = fn.value("arguments", "");
      if (args.empty() || !item_open_ || output_[output_.size() - 1]["type"] != "function_call") {
        continue;
      }
      const size_t index = output_.size() - 1;
      json& a = output_[index]["arguments"];
      a = a.get<std::string>() + args;
      Emit("response.function_call_arguments.delta",
           {{"item_id", output_[index]["id"]}, {"output_index", index}, {"delta", args}}, &out);
    }
  }
  if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
    finish_reason_ = choice["finish_reason"].get<std::string>();
  }
  return out;
}

}  // namespace kinfer
