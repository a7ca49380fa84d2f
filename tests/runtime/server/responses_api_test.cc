#include "runtime/server/responses_api.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace kinfer {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

ojson Chat(const std::string& body, ResponsesRequest* rr = nullptr) {
  ResponsesRequest local;
  ErrorDetail d;
  auto out = ResponsesToChatBody(body, rr != nullptr ? rr : &local, &d);
  EXPECT_TRUE(out.ok()) << out.status().message();
  return out.ok() ? ojson::parse(*out) : ojson();
}

std::string ErrorParam(const std::string& body) {
  ResponsesRequest rr;
  ErrorDetail d;
  auto out = ResponsesToChatBody(body, &rr, &d);
  EXPECT_FALSE(out.ok()) << body;
  return d.param;
}

TEST(ResponsesToChatTest, InputInstructionsAndSamplingBecomeTheChatRequest) {
  ResponsesRequest rr;
  const ojson c = Chat(R"({"model":"m","instructions":"Be brief.","input":"Hi","temperature":0.2,
      "top_p":0.9,"max_output_tokens":50,"seed":3,"metadata":{"k":"v"}})",
                       &rr);
  EXPECT_EQ(c["model"], "m");
  EXPECT_EQ(c["messages"], ojson::parse(R"([{"role":"system","content":"Be brief."},
                                            {"role":"user","content":"Hi"}])"));
  EXPECT_EQ(c["max_completion_tokens"], 50);
  EXPECT_EQ(c["temperature"], 0.2);
  EXPECT_EQ(c["seed"], 3);
  EXPECT_FALSE(c.contains("stream"));
  EXPECT_FALSE(rr.stream);
  // Echoed by the Response: as given, or the defaults.
  EXPECT_EQ(rr.echo["instructions"], "Be brief.");
  EXPECT_EQ(rr.echo["metadata"], json::parse(R"({"k":"v"})"));
  EXPECT_EQ(rr.echo["tool_choice"], "auto");
  EXPECT_EQ(rr.echo["tools"], json::array());
  EXPECT_EQ(rr.echo["store"], false);
  EXPECT_EQ(rr.echo["max_output_tokens"], 50);
}

TEST(ResponsesToChatTest, ItemsBecomeTurnsCallsAndToolResults) {
  const ojson c = Chat(R"({"input":[
      {"role":"user","content":[{"type":"input_text","text":"Weather"},{"type":"input_text","text":"in Paris?"}]},
      {"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},
      {"type":"function_call","call_id":"call_2","name":"get_time","arguments":"{}"},
      {"type":"function_call_output","call_id":"call_1","output":"22 C"},
      {"type":"message","role":"assistant","content":[{"type":"output_text","text":"It is 22 C."}]},
      {"role":"developer","content":"Answer in French."}]})");
  EXPECT_EQ(c["messages"], ojson::parse(R"([
      {"role":"user","content":"Weather\nin Paris?"},
      {"role":"assistant","content":null,"tool_calls":[
        {"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},
        {"id":"call_2","type":"function","function":{"name":"get_time","arguments":"{}"}}]},
      {"role":"tool","tool_call_id":"call_1","content":"22 C"},
      {"role":"assistant","content":"It is 22 C."},
      {"role":"developer","content":"Answer in French."}])"));
}

TEST(ResponsesToChatTest, ToolsFormatAndStreamAreTheChatOnes) {
  ResponsesRequest rr;
  const ojson c = Chat(R"({"input":"x","stream":true,"parallel_tool_calls":false,
      "tools":[{"type":"function","name":"f","description":"d","strict":true,
                "parameters":{"type":"object","properties":{"b":{},"a":{}}}}],
      "tool_choice":{"type":"function","name":"f"},
      "text":{"format":{"type":"json_schema","name":"n","strict":true,
                        "schema":{"type":"object","properties":{"z":{},"y":{}}}}}})",
                       &rr);
  EXPECT_TRUE(rr.stream);
  EXPECT_EQ(c["stream"], true);
  EXPECT_EQ(c["stream_options"], ojson::parse(R"({"include_usage":true})"));
  // The client's key order survives (schemas generate their properties in it).
  EXPECT_EQ(
      c["tools"].dump(),
      R"([{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object","properties":{"b":{},"a":{}}}}}])");
  EXPECT_EQ(c["tool_choice"].dump(), R"({"type":"function","function":{"name":"f"}})");
  EXPECT_EQ(c["parallel_tool_calls"], false);
  EXPECT_EQ(
      c["response_format"].dump(),
      R"({"type":"json_schema","json_schema":{"name":"n","schema":{"type":"object","properties":{"z":{},"y":{}}},"strict":true}})");
  EXPECT_EQ(rr.echo["parallel_tool_calls"], false);
  EXPECT_EQ(Chat(R"({"input":"x","text":{"format":{"type":"json_object"}}})")["response_format"],
            ojson::parse(R"({"type":"json_object"})"));
  EXPECT_EQ(Chat(R"({"input":"x","max_tool_calls":1})")["parallel_tool_calls"], false);
}

TEST(ResponsesToChatTest, LogprobsAreAskedByIncludeWithTopLogprobs) {
  ResponsesRequest rr;
  const ojson c =
      Chat(R"({"input":"x","include":["message.output_text.logprobs"],"top_logprobs":3})", &rr);
  EXPECT_EQ(c["logprobs"], true);
  EXPECT_EQ(c["top_logprobs"], 3);
  EXPECT_EQ(rr.echo["top_logprobs"], 3);
  EXPECT_EQ(Chat(R"({"input":"x","include":["message.output_text.logprobs"]})")["logprobs"], true);
  EXPECT_FALSE(Chat(R"({"input":"x","top_logprobs":0})").contains("logprobs"));
}

TEST(ResponsesToChatTest, WhatKinferCannotDoIsA400NamingTheField) {
  EXPECT_EQ(ErrorParam(R"({"input":"x","previous_response_id":"resp_1"})"), "previous_response_id");
  EXPECT_EQ(ErrorParam(R"({"input":"x","conversation":"conv_1"})"), "conversation");
  EXPECT_EQ(ErrorParam(R"({"input":"x","background":true})"), "background");
  EXPECT_EQ(ErrorParam(R"({"input":"x","reasoning":{"effort":"high"}})"), "reasoning");
  EXPECT_EQ(ErrorParam(R"({"input":"x","include":["reasoning.encrypted_content"]})"), "include");
  EXPECT_EQ(ErrorParam(R"({"input":"x","tools":[{"type":"web_search"}]})"), "tools[0].type");
  EXPECT_EQ(ErrorParam(R"({"input":"x","tool_choice":{"type":"web_search"}})"), "tool_choice");
  EXPECT_EQ(ErrorParam(R"({"input":"x","text":{"format":{"type":"yaml"}}})"), "text.format");
  EXPECT_EQ(
      ErrorParam(
          R"({"input":[{"role":"user","content":[{"type":"input_image","image_url":"u"}]}]})"),
      "input[0].content[0].type");
  EXPECT_EQ(ErrorParam(R"({"input":[{"type":"item_reference","id":"msg_1"}]})"), "input[0].type");
  EXPECT_EQ(ErrorParam(R"({"input":[{"type":"function_call","name":"f"}]})"), "input[0]");
  EXPECT_EQ(ErrorParam(R"({"model":"m"})"), "input");
  EXPECT_EQ(ErrorParam(R"({"input":[]})"), "input");
  EXPECT_EQ(ErrorParam(R"({"input":"x","stream":"yes"})"), "stream");
  EXPECT_EQ(ErrorParam(R"([1])"), "");
  // Accepted as no-ops: store, an empty include, reasoning without an effort, background false.
  Chat(R"({"input":"x","store":true,"include":[],"reasoning":{"effort":null},"background":false})");
}

TEST(ResponsesToChatTest, ChatErrorParamsAreNamedAsTheResponsesRequestNamesThem) {
  EXPECT_EQ(ResponsesParam("max_tokens"), "max_output_tokens");
  EXPECT_EQ(ResponsesParam("max_completion_tokens"), "max_output_tokens");
  EXPECT_EQ(ResponsesParam("messages[1].content"), "input");
  EXPECT_EQ(ResponsesParam("response_format.json_schema.schema"), "text.format");
  EXPECT_EQ(ResponsesParam("tools[2].function.parameters"), "tools[2].parameters");
  EXPECT_EQ(ResponsesParam("temperature"), "temperature");
}

TEST(ResponseFromChatTest, TextAndCallsBecomeOutputItems) {
  ResponsesRequest rr;
  Chat(R"({"input":"x","instructions":"I"})", &rr);
  const json chat = json::parse(R"({"id":"chatcmpl-1","model":"m","choices":[{"index":0,
      "message":{"role":"assistant","content":"Paris."},"finish_reason":"stop"}],
      "usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}})");
  const json r = ResponseFromChat(chat, rr, "resp_abc", 100);
  EXPECT_EQ(r["id"], "resp_abc");
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["model"], "m");
  EXPECT_EQ(r["created_at"], 100);
  EXPECT_EQ(r["instructions"], "I");
  ASSERT_EQ(r["output"].size(), 1u);
  EXPECT_EQ(r["output"][0]["type"], "message");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "Paris.");
  EXPECT_EQ(r["output"][0]["content"][0]["type"], "output_text");
  EXPECT_EQ(r["usage"]["input_tokens"], 5);
  EXPECT_EQ(r["usage"]["output_tokens"], 2);
  EXPECT_EQ(r["usage"]["total_tokens"], 7);
  EXPECT_TRUE(r["incomplete_details"].is_null());

  const json calls =
      json::parse(R"({"model":"m","choices":[{"index":0,"message":{"role":"assistant",
      "content":null,"tool_calls":[{"id":"call_9","type":"function","function":{"name":"f",
      "arguments":"{\"a\":1}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":1,
      "completion_tokens":1}})");
  const json rc = ResponseFromChat(calls, rr, "resp_x", 1);
  ASSERT_EQ(rc["output"].size(), 1u);
  EXPECT_EQ(rc["output"][0]["type"], "function_call");
  EXPECT_EQ(rc["output"][0]["call_id"], "call_9");
  EXPECT_EQ(rc["output"][0]["name"], "f");
  EXPECT_EQ(rc["output"][0]["arguments"], R"({"a":1})");

  const json cut = json::parse(R"({"model":"m","choices":[{"index":0,"message":{"role":"assistant",
      "content":"Par"},"finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":1}})");
  const json rl = ResponseFromChat(cut, rr, "resp_y", 1);
  EXPECT_EQ(rl["status"], "incomplete");
  EXPECT_EQ(rl["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(rl["output"][0]["status"], "incomplete");
}

// The events of a translated chat stream, parsed: (type, data).
std::vector<std::pair<std::string, json>> Events(ResponsesStreamTranslator* t,
                                                 const std::vector<std::string>& chat) {
  std::vector<std::pair<std::string, json>> out;
  for (const std::string& c : chat) {
    for (const std::string& e : t->Translate("data: " + c + "\n\n")) {
      EXPECT_EQ(e.rfind("event: ", 0), 0u) << e;
      const size_t nl = e.find('\n');
      const std::string type = e.substr(7, nl - 7);
      EXPECT_EQ(e.substr(nl + 1, 6), "data: ");
      const json data = json::parse(e.substr(nl + 7));
      EXPECT_EQ(data["type"], type);
      out.emplace_back(type, data);
    }
  }
  return out;
}

std::vector<std::string> Types(const std::vector<std::pair<std::string, json>>& evs) {
  std::vector<std::string> out;
  for (const auto& [type, data] : evs) out.push_back(type);
  return out;
}

std::string Chunk(const std::string& delta, const char* finish = nullptr) {
  json c = {{"id", "chatcmpl-1"},
            {"object", "chat.completion.chunk"},
            {"model", "m"},
            {"choices", json::array({{{"index", 0},
                                      {"delta", json::parse(delta)},
                                      {"finish_reason", finish ? json(finish) : json(nullptr)}}})}};
  return c.dump();
}

const char kUsage[] =
    R"({"id":"chatcmpl-1","model":"m","choices":[],"usage":{"prompt_tokens":4,"completion_tokens":3}})";

TEST(ResponsesStreamTest, TextStreamsAsOneMessageItemThenCompletes) {
  ResponsesRequest rr;
  Chat(R"({"input":"x","stream":true})", &rr);
  ResponsesStreamTranslator t(rr, "resp_abc", 5);
  const auto evs =
      Events(&t, {Chunk(R"({"role":"assistant","content":""})"), Chunk(R"({"content":"Par"})"),
                  Chunk(R"({"content":"is."})"), Chunk("{}", "stop"), kUsage, "[DONE]"});
  EXPECT_EQ(Types(evs),
            (std::vector<std::string>{"response.created", "response.in_progress",
                                      "response.output_item.added", "response.content_part.added",
                                      "response.output_text.delta", "response.output_text.delta",
                                      "response.output_text.done", "response.content_part.done",
                                      "response.output_item.done", "response.completed"}));
  for (size_t i = 0; i < evs.size(); ++i) EXPECT_EQ(evs[i].second["sequence_number"], i);
  EXPECT_EQ(evs[0].second["response"]["status"], "in_progress");
  EXPECT_EQ(evs[0].second["response"]["id"], "resp_abc");
  const std::string item = evs[2].second["item"]["id"];
  EXPECT_EQ(item.rfind("msg_", 0), 0u);
  for (size_t i = 3; i < 9; ++i) {
    if (evs[i].second.contains("item_id")) {
      EXPECT_EQ(evs[i].second["item_id"], item);
    }
  }
  EXPECT_EQ(evs[4].second["delta"], "Par");
  EXPECT_EQ(evs[6].second["text"], "Paris.");
  const json& done = evs.back().second["response"];
  EXPECT_EQ(done["status"], "completed");
  EXPECT_EQ(done["output"][0]["content"][0]["text"], "Paris.");
  EXPECT_EQ(done["output"][0]["status"], "completed");
  EXPECT_EQ(done["output"][0]["id"], item);
  EXPECT_EQ(done["usage"]["output_tokens"], 3);
  EXPECT_EQ(done["model"], "m");
  EXPECT_TRUE(t.Translate("data: [DONE]\n\n").empty()) << "nothing after the end";
}

TEST(ResponsesStreamTest, CallsStreamTheirArgumentsAndAMaxTokensCutIsIncomplete) {
  ResponsesRequest rr;
  Chat(R"({"input":"x","stream":true})", &rr);
  ResponsesStreamTranslator t(rr, "resp_abc", 5);
  const auto evs = Events(
      &t,
      {Chunk(R"({"role":"assistant","content":""})"),
       Chunk(
           R"({"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}}]})"),
       Chunk(R"({"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":"}}]})"),
       Chunk(R"({"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]})"),
       Chunk(
           R"({"tool_calls":[{"index":1,"id":"call_2","type":"function","function":{"name":"g","arguments":""}}]})"),
       Chunk(R"({"tool_calls":[{"index":1,"function":{"arguments":"{}"}}]})"),
       Chunk("{}", "tool_calls"), kUsage, "[DONE]"});
  EXPECT_EQ(Types(evs),
            (std::vector<std::string>{
                "response.created", "response.in_progress", "response.output_item.added",
                "response.function_call_arguments.delta", "response.function_call_arguments.delta",
                "response.function_call_arguments.done", "response.output_item.done",
                "response.output_item.added", "response.function_call_arguments.delta",
                "response.function_call_arguments.done", "response.output_item.done",
                "response.completed"}));
  EXPECT_EQ(evs[2].second["item"]["call_id"], "call_1");
  EXPECT_EQ(evs[2].second["item"]["name"], "f");
  EXPECT_EQ(evs[5].second["arguments"], R"({"a":1})");
  EXPECT_EQ(evs[7].second["output_index"], 1);
  const json& out = evs.back().second["response"]["output"];
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1]["arguments"], "{}");
  EXPECT_EQ(out[1]["status"], "completed");

  ResponsesStreamTranslator cut(rr, "resp_def", 5);
  const auto ev2 =
      Events(&cut, {Chunk(R"({"content":"Pa"})"), Chunk("{}", "length"), kUsage, "[DONE]"});
  EXPECT_EQ(ev2.back().first, "response.incomplete");
  EXPECT_EQ(ev2.back().second["response"]["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(ev2.back().second["response"]["output"][0]["status"], "incomplete");
}

TEST(ResponsesStreamTest, LogprobsRideTheTextTheyGave) {
  ResponsesRequest rr;
  Chat(R"({"input":"x","stream":true,"include":["message.output_text.logprobs"]})", &rr);
  ResponsesStreamTranslator t(rr, "resp_abc", 5);
  auto chunk = [](const std::string& content, const std::string& token) {
    json c = json::parse(Chunk(content.empty() ? "{}" : R"({"content":")" + content + "\"}"));
    c["choices"][0]["logprobs"] = {{"content", json::array({{{"token", token},
                                                             {"logprob", -0.5},
                                                             {"bytes", json::array()},
                                                             {"top_logprobs", json::array()}}})}};
    return c.dump();
  };
  // The first token gives no text yet (held bytes): its logprob goes with the next text.
  const auto evs =
      Events(&t, {chunk("", "\u00e2"), chunk("Hi", "Hi"), Chunk("{}", "stop"), kUsage, "[DONE]"});
  std::vector<json> deltas;
  for (const auto& [type, data] : evs) {
    if (type == "response.output_text.delta") deltas.push_back(data);
  }
  ASSERT_EQ(deltas.size(), 1u);
  ASSERT_EQ(deltas[0]["logprobs"].size(), 2u);
  EXPECT_EQ(deltas[0]["logprobs"][1]["token"], "Hi");
  const json& part = evs.back().second["response"]["output"][0]["content"][0];
  EXPECT_EQ(part["logprobs"].size(), 2u);
  EXPECT_EQ(part["logprobs"][0]["logprob"], -0.5);
}

TEST(ResponsesStreamTest, AChatErrorEndsTheStreamFailed) {
  ResponsesRequest rr;
  Chat(R"({"input":"x","stream":true})", &rr);
  ResponsesStreamTranslator t(rr, "resp_abc", 5);
  const auto evs = Events(
      &t,
      {Chunk(R"({"content":"Pa"})"),
       R"({"error":{"message":"the server is shutting down","type":"server_error","code":null}})"});
  ASSERT_GE(evs.size(), 2u);
  EXPECT_EQ(evs[evs.size() - 2].first, "error");
  EXPECT_EQ(evs[evs.size() - 2].second["message"], "the server is shutting down");
  EXPECT_EQ(evs.back().first, "response.failed");
  EXPECT_EQ(evs.back().second["response"]["status"], "failed");
  EXPECT_EQ(evs.back().second["response"]["error"]["message"], "the server is shutting down");
  EXPECT_TRUE(t.Translate("data: [DONE]\n\n").empty());
}

}  // namespace
}  // namespace kinfer
