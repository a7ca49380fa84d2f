#include "runtime/server/openai_protocol.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

#include "common/json_limits.h"
#include "common/utf8.h"
#include "runtime/server/tool_calls.h"
#include "runtime/tokenizer/unicode.h"

namespace kinfer {
namespace {

using json = nlohmann::json;

// Parses a body expected to fail; returns the detail and checks the status code.
ErrorDetail ChatError(const std::string& body, StatusCode want = StatusCode::kInvalidArgument) {
  ErrorDetail d;
  auto r = ParseChatRequest(body, &d);
  EXPECT_FALSE(r.ok()) << body;
  if (!r.ok()) {
    EXPECT_EQ(r.status().code(), want) << r.status().ToString();
  }
  return d;
}
ErrorDetail CompletionError(const std::string& body) {
  ErrorDetail d;
  auto r = ParseCompletionRequest(body, &d);
  EXPECT_FALSE(r.ok()) << body;
  return d;
}

TEST(ParseChatTest, ReadsAllSupportedFields) {
  ErrorDetail d;
  auto r = ParseChatRequest(R"({
    "model": "m", "messages": [{"role": "system", "content": "Be brief."},
                               {"role": "user", "content": [{"type": "text", "text": "Hi "},
                                                            {"type": "text", "text": "there"}]}],
    "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
    "repeat_penalty": 1.1, "frequency_penalty": 0.5, "presence_penalty": -0.5, "seed": 42,
    "stop": ["\n\n", "END"], "stream": true, "stream_options": {"include_usage": true},
    "logprobs": true, "top_logprobs": 3, "ignore_eos": true, "n": 1, "logit_bias": {},
    "user": "ignored-unknown-field"})",
                            &d);
  ASSERT_TRUE(r.ok()) << r.status().ToString() << " param=" << d.param;
  EXPECT_EQ(r->kind, ApiKind::kChat);
  EXPECT_EQ(r->model, "m");
  ASSERT_EQ(r->messages.size(), 2u);
  EXPECT_EQ(r->messages[1].content, "Hi \nthere");
  EXPECT_EQ(r->max_tokens, 7);
  EXPECT_FLOAT_EQ(r->sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r->sampling.top_p, 0.9f);
  EXPECT_EQ(r->sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r->sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(r->sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(r->sampling.seed, 42u);
  EXPECT_EQ(r->stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->sampling.logprobs, 3);
  EXPECT_TRUE(r->ignore_eos);
}

TEST(ParseChatTest, TextPartsAreJoinedWithNewlinesAsLlamaCppAndVllmJoinThem) {
  ErrorDetail d;
  auto r = ParseChatRequest(R"({"messages":[{"role":"user","content":[
      {"type":"text","text":"Summarize:"},{"type":"text","text":"line one"},{"type":"text","text":""},
      {"type":"text","text":"end"}]},{"role":"user","content":[{"type":"text","text":"alone"}]}]})",
                            &d);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->messages.size(), 2u);
  EXPECT_EQ(r->messages[0].content, "Summarize:\nline one\n\nend");
  EXPECT_EQ(r->messages[1].content, "alone");
}

TEST(ParseChatTest, ReadsLogitBiasSortedByIdAndChecksItAgainstTheVocabulary) {
  ErrorDetail d;
  auto r = ParseChatRequest(
      R"({"messages":[{"role":"user","content":"x"}],
          "logit_bias":{"300":-100,"7":2.5,"0":100,"2147483647":-100.0}})",
      &d);
  ASSERT_TRUE(r.ok()) << r.status().ToString() << " param=" << d.param;
  const std::vector<std::pair<int32_t, float>> want{
      {0, 100.0f}, {7, 2.5f}, {300, -100.0f}, {2147483647, -100.0f}};
  EXPECT_EQ(r->sampling.logit_bias, want);
  // The largest id is outside any real vocabulary; the others fit one of 301 tokens.
  EXPECT_FALSE(CheckTokenIds(*r, 301, &d).ok());
  EXPECT_EQ(d.param, "logit_bias");
  r->sampling.logit_bias.pop_back();
  EXPECT_TRUE(CheckTokenIds(*r, 301, &d).ok());
  d = {};
  Status s = CheckTokenIds(*r, 300, &d);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("300"), std::string::npos) << s.message();
  // An empty object is off, as is an absent one; the completions endpoint reads it too.
  auto e = ParseCompletionRequest(R"({"prompt":"x","logit_bias":{"5":-1}})", &d);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->sampling.logit_bias, (std::vector<std::pair<int32_t, float>>{{5, -1.0f}}));
}

TEST(ParseChatTest, ReadsNChoices) {
  ErrorDetail d;
  auto r = ParseChatRequest(R"({"messages":[{"role":"user","content":"x"}],"n":128})", &d);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->n, 128);
  auto c = ParseCompletionRequest(R"({"prompt":"x"})", &d);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->n, 1);
}

TEST(ParseChatTest, ResponseFormatJsonObjectReachesTheEngineRequest) {
  ErrorDetail d;
  auto r = ParseChatRequest(
      R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}})",
      &d);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->json_object);
  EXPECT_TRUE(ToGenerationRequest(*r, {1}, 4).json_object);
  auto t = ParseChatRequest(
      R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"text"}})", &d);
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->json_object);
  EXPECT_FALSE(ToGenerationRequest(*t, {1}, 4).json_object);
}

// The whole text is a sentence of the request's grammar.
bool GrammarMatches(const ParsedRequest& r, std::string_view text) {
  if (!r.grammar) return false;
  GrammarRecognizer g(r.grammar);
  return g.Feed(text) && g.complete();
}

TEST(ParseChatTest, ResponseFormatJsonSchemaBecomesTheRequestsGrammarInTheClientsKeyOrder) {
  ErrorDetail d;
  auto r = ParseChatRequest(R"({"messages":[{"role":"user","content":"x"}],
      "response_format":{"type":"json_schema","json_schema":{"name":"city","strict":true,
        "schema":{"type":"object","properties":{"name":{"type":"string"},"pop":{"type":"integer"}},
                  "required":["pop","name"],"additionalProperties":false}}}})",
                            &d);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->json_object);
  EXPECT_TRUE(GrammarMatches(*r, R"({"name":"Paris","pop":2100000})"));
  EXPECT_FALSE(GrammarMatches(*r, R"({"pop":2100000,"name":"Paris"})"));  // "name" came first
  EXPECT_EQ(ToGenerationRequest(*r, {1}, 4).grammar, r->grammar);

  auto g = ParseCompletionRequest(
      R"({"prompt":"x","guided_json":"{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}"})",
      &d);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(GrammarMatches(*g, "[1,2]"));
  auto rx = ParseCompletionRequest(R"({"prompt":"x","guided_regex":"[0-9]{3}"})", &d);
  ASSERT_TRUE(rx.ok()) << rx.status().ToString();
  EXPECT_TRUE(GrammarMatches(*rx, "123"));
  EXPECT_FALSE(GrammarMatches(*rx, "1234"));
  auto so = ParseCompletionRequest(
      R"({"prompt":"x","structured_outputs":{"json":{"type":"array","items":{"type":"integer"}}}})",
      &d);
  ASSERT_TRUE(so.ok()) << so.status().ToString();
  EXPECT_TRUE(GrammarMatches(*so, "[1,2]"));
  auto sc =
      ParseCompletionRequest(R"({"prompt":"x","structured_outputs":{"choice":["up","down"]}})", &d);
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  EXPECT_TRUE(GrammarMatches(*sc, "down"));
  auto c = ParseCompletionRequest(R"({"prompt":"x","guided_choice":["yes","no"]})", &d);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(GrammarMatches(*c, "yes"));
  EXPECT_TRUE(GrammarMatches(*c, "no"));
  EXPECT_FALSE(GrammarMatches(*c, "yesno"));

  const std::string m = R"("messages":[{"role":"user","content":"x"}])";
  const ErrorDetail pattern = ChatError("{" + m + R"(,"response_format":{"type":"json_schema",
      "json_schema":{"name":"n","schema":{"type":"integer","multipleOf":2}}}})");
  EXPECT_EQ(pattern.param, "response_format.json_schema.schema");
  EXPECT_EQ(
      ChatError("{" + m + R"(,"response_format":{"type":"json_schema","json_schema":{}}})").param,
      "response_format.json_schema.schema");
  EXPECT_EQ(ChatError("{" + m + R"(,"response_format":{"type":"json_schema",
      "json_schema":{"schema":{"type":"object"}}},"ignore_eos":true})")
                .param,
            "ignore_eos");
  EXPECT_EQ(ChatError("{" + m + R"(,"guided_choice":[]})").param, "guided_choice");
  EXPECT_EQ(ChatError("{" + m + R"x(,"guided_regex":"(a"})x").param, "guided_regex");
  EXPECT_EQ(ChatError("{" + m + R"(,"guided_regex":5})").param, "guided_regex");
  EXPECT_EQ(ChatError("{" + m + R"(,"structured_outputs":{"regex":"a","choice":["b"]}})").param,
            "structured_outputs");
  EXPECT_EQ(ChatError("{" + m + R"(,"structured_outputs":{"grammar":"root ::= x"}})").param,
            "structured_outputs");
  EXPECT_EQ(ChatError("{" + m + R"(,"guided_choice":["a",""]})").param, "guided_choice");
  EXPECT_EQ(ChatError("{" + m + R"(,"guided_json":"{nope"})").param, "guided_json");
  EXPECT_EQ(ChatError("{" + m + R"(,"guided_json":{"type":"integer"},
      "response_format":{"type":"json_object"}})")
                .param,
            "guided_json");
}

constexpr char kTools[] = R"("tools":[
    {"type":"function","function":{"name":"get_weather","description":"Weather in a city",
      "parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["C","F"]}},
                    "required":["city"]}}},
    {"type":"function","function":{"name":"now"}}])";

TEST(ParseChatTest, ToolsBecomeASystemTurnAndTheGrammarOfTheAnswer) {
  ErrorDetail d;
  auto r = ParseChatRequest(std::string(R"({"messages":[{"role":"system","content":"Be brief."},
      {"role":"user","content":"Weather in Paris?"}],)") +
                                kTools + "}",
                            &d);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tools.choice, ToolChoice::kAuto);
  ASSERT_EQ(r->tools.tools.size(), 2u);
  EXPECT_EQ(r->tools.tools[1].parameters.dump(), R"({"type":"object","properties":{}})");
  ASSERT_EQ(r->messages.size(), 2u);  // the tools went into the client's system turn
  EXPECT_EQ(r->messages[0].content.rfind("Be brief.\n\nYou can call these tools", 0), 0u);
  EXPECT_NE(r->messages[0].content.find("\"get_weather\""), std::string::npos);
  EXPECT_NE(r->messages[0].content.find("{\"response\":"), std::string::npos);
  EXPECT_TRUE(GrammarMatches(
      *r, R"({"tool_calls":[{"name":"get_weather","arguments":{"city":"Paris"}}]})"));
  EXPECT_TRUE(GrammarMatches(
      *r, R"({"tool_calls":[{"name":"now","arguments":{}},{"name":"now","arguments":{}}]})"));
  EXPECT_TRUE(GrammarMatches(*r, R"({"response":"Sunny."})"));
  EXPECT_FALSE(GrammarMatches(*r, R"({"tool_calls":[{"name":"get_weather","arguments":{}}]})"));

  // required, one call at a time: no answer in text, one call; no system turn: one is added.
  auto q = ParseChatRequest(std::string(R"({"messages":[{"role":"user","content":"x"}],
      "tool_choice":"required","parallel_tool_calls":false,)") +
                                kTools + "}",
                            &d);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  ASSERT_EQ(q->messages.size(), 2u);
  EXPECT_EQ(q->messages[0].role, "system");
  EXPECT_EQ(q->messages[0].content.find("{\"response\":"), std::string::npos);
  EXPECT_FALSE(GrammarMatches(*q, R"({"response":"Sunny."})"));
  EXPECT_FALSE(GrammarMatches(
      *q, R"({"tool_calls":[{"name":"now","arguments":{}},{"name":"now","arguments":{}}]})"));
  // A named function: only it.
  auto f = ParseChatRequest(std::string(R"({"messages":[{"role":"user","content":"x"}],
      "tool_choice":{"type":"function","function":{"name":"now"}},)") +
                                kTools + "}",
                            &d);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE(GrammarMatches(*f, R"({"tool_calls":[{"name":"now","arguments":{}}]})"));
  EXPECT_FALSE(
      GrammarMatches(*f, R"({"tool_calls":[{"name":"get_weather","arguments":{"city":"a"}}]})"));
  EXPECT_EQ(f->messages[0].content.find("get_weather"), std::string::npos);
  // "none": no grammar, no system text.
  auto n = ParseChatRequest(std::string(R"({"messages":[{"role":"user","content":"x"}],
      "tool_choice":"none",)") + kTools +
                                "}",
                            &d);
  ASSERT_TRUE(n.ok());
  EXPECT_FALSE(n->tools.active());
  EXPECT_EQ(n->grammar, nullptr);
  EXPECT_EQ(n->messages.size(), 1u);
}

TEST(ParseChatTest, EarlierToolCallsAndResultsAreRewrittenInTheGenericFormat) {
  ErrorDetail d;
  auto r = ParseChatRequest(R"({"messages":[{"role":"user","content":"Weather in Paris?"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",
        "function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},
      {"role":"tool","tool_call_id":"call_1","content":"22 C, sunny"}]})",
                            &d);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->messages.size(), 3u);
  EXPECT_EQ(r->messages[1].role, "assistant");
  EXPECT_EQ(r->messages[1].content,
            R"({"tool_calls":[{"name":"get_weather","arguments":{"city":"Paris"}}]})");
  EXPECT_EQ(r->messages[2].role, "user");
  EXPECT_EQ(
      r->messages[2].content,
      R"({"tool_response":{"name":"get_weather","tool_call_id":"call_1","content":"22 C, sunny"}})");
}

TEST(ParseChatTest, MalformedToolsAreBadRequestsNamingTheField) {
  const std::string m = R"("messages":[{"role":"user","content":"x"}])";
  EXPECT_EQ(ChatError("{" + m + R"(,"tools":{}})").param, "tools");
  EXPECT_EQ(
      ChatError("{" + m + R"(,"tools":[{"type":"function","function":{"name":"a b"}}]})").param,
      "tools[0].function.name");
  EXPECT_EQ(ChatError("{" + m + R"(,"tools":[{"type":"function","function":{"name":"a"}},
      {"type":"function","function":{"name":"a"}}]})")
                .param,
            "tools[1].function.name");
  EXPECT_EQ(ChatError("{" + m + "," + kTools + R"(,"tool_choice":"sometimes"})").param,
            "tool_choice");
  EXPECT_EQ(ChatError("{" + m + "," + kTools +
                      R"(,"tool_choice":{"type":"function","function":{"name":"nope"}}})")
                .param,
            "tool_choice");
  EXPECT_EQ(ChatError("{" + m + R"(,"tool_choice":"required"})").param, "tool_choice");
  EXPECT_EQ(ChatError("{" + m + "," + kTools + R"(,"parallel_tool_calls":"yes"})").param,
            "parallel_tool_calls");
  EXPECT_EQ(ChatError("{" + m + R"(,"tools":[{"type":"function","function":{"name":"f",
      "parameters":{"type":"object","properties":{"n":{"type":"integer","multipleOf":3}}}}}]})")
                .param,
            "tools[0].function.parameters");
  EXPECT_EQ(ChatError("{" + m + "," + kTools + R"(,"guided_regex":"a+"})").param, "tools");
  EXPECT_EQ(ChatError("{" + m + "," + kTools + R"(,"ignore_eos":true})").param, "ignore_eos");
  EXPECT_EQ(
      ChatError(R"({"messages":[{"role":"assistant","tool_calls":[{"function":{}}]}]})").param,
      "messages[0].tool_calls[0]");
  // A tool result names its call, as OpenAI and vLLM require.
  EXPECT_EQ(ChatError(R"({"messages":[{"role":"user","content":"x"},{"role":"tool","content":"42"}]})")
                .param,
            "messages[1].tool_call_id");
  EXPECT_EQ(ChatError(R"({"messages":[{"role":"tool","tool_call_id":7,"content":"42"}]})").param,
            "messages[0].tool_call_id");
}

TEST(ParseChatTest, ResponseFormatBesideToolsShapesTheDirectAnswer) {
  const std::string m = R"("messages":[{"role":"user","content":"x"}])";
  ErrorDetail d;
  auto r = ParseChatRequest("{" + m + "," + kTools + R"(,"response_format":{"type":"json_schema",
      "json_schema":{"name":"c","schema":{"type":"object","properties":{"z":{"type":"integer"},
      "a":{"type":"string"}}}}}})",
                            &d);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r->tools.response_schema.has_value());
  EXPECT_EQ(r->tools.response_schema->dump(),
            R"({"type":"object","properties":{"z":{"type":"integer"},"a":{"type":"string"}}})")
      << "the client's key order";
  EXPECT_FALSE(r->json_object);
  ASSERT_NE(r->grammar, nullptr);
  // The system turn tells the model the answer's schema.
  EXPECT_NE(r->messages[0].content.find("{\"response\": <your answer, a JSON value under this "
                                        "JSON Schema: {\"type\":\"object\""),
            std::string::npos)
      << r->messages[0].content;
  auto j = ParseChatRequest(
      "{" + m + "," + kTools + R"(,"response_format":{"type":"json_object"}})", &d);
  ASSERT_TRUE(j.ok()) << j.status().message();
  EXPECT_FALSE(j->json_object) << "the tool grammar holds the object";
  EXPECT_EQ(j->tools.response_schema->dump(), R"({"type":"object"})");
}

TEST(ParseChatTest, ContinueFinalMessageAndAddGenerationPrompt) {
  ErrorDetail d;
  const std::string prefill =
      R"("messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello,"}])";
  auto r = ParseChatRequest("{" + prefill + R"(,"continue_final_message":true})", &d);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->continue_final_message);
  EXPECT_FALSE(r->add_generation_prompt) << "implied by continue_final_message";
  auto plain = ParseChatRequest("{" + prefill + "}", &d);
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->add_generation_prompt);
  EXPECT_FALSE(plain->continue_final_message);
  auto no_prompt = ParseChatRequest("{" + prefill + R"(,"add_generation_prompt":false})", &d);
  ASSERT_TRUE(no_prompt.ok());
  EXPECT_FALSE(no_prompt->add_generation_prompt);
  // Both true, a last turn that is not the assistant's, with tools: 400s naming the field.
  EXPECT_EQ(ChatError("{" + prefill +
                      R"(,"continue_final_message":true,"add_generation_prompt":true})")
                .param,
            "add_generation_prompt");
  EXPECT_EQ(ChatError(R"({"messages":[{"role":"user","content":"Hi"}],"continue_final_message":true})")
                .param,
            "messages");
  EXPECT_EQ(ChatError("{" + prefill + "," + kTools + R"(,"continue_final_message":true})").param,
            "continue_final_message");
  EXPECT_EQ(ChatError("{" + prefill + "," + kTools + R"(,"echo":true})").param, "echo");
  EXPECT_EQ(ChatError("{" + prefill + R"(,"continue_final_message":1})").param,
            "continue_final_message");
}

TEST(ParseCompletionTest, BestOfIsAtLeastNAndNotStreamedAboveIt) {
  ErrorDetail d;
  auto r = ParseCompletionRequest(R"({"prompt":"x","n":2,"best_of":5})", &d);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->best_of, 5);
  EXPECT_EQ(r->generations(), 5);
  auto dflt = ParseCompletionRequest(R"({"prompt":"x","n":3})", &d);
  ASSERT_TRUE(dflt.ok());
  EXPECT_EQ(dflt->generations(), 3);
  auto streamed = ParseCompletionRequest(R"({"prompt":"x","n":2,"best_of":2,"stream":true})", &d);
  EXPECT_TRUE(streamed.ok()) << "best_of equal to n streams";
  EXPECT_EQ(CompletionError(R"({"prompt":"x","n":3,"best_of":2})").param, "best_of");
  EXPECT_EQ(CompletionError(R"({"prompt":"x","best_of":129})").param, "best_of");
  EXPECT_EQ(CompletionError(R"({"prompt":"x","best_of":3,"stream":true})").param, "best_of");
}

TEST(PromptLogprobsTest, ParsedBoundedAndWrittenAsVllmDoes) {
  ErrorDetail d;
  auto r = ParseCompletionRequest(R"({"prompt":"x","prompt_logprobs":2})", &d);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->prompt_logprobs, 2);
  EXPECT_EQ(ToGenerationRequest(*r, {1, 2}, 4).prompt_logprobs, 2);
  auto off = ParseCompletionRequest(R"({"prompt":"x","prompt_logprobs":null})", &d);
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->prompt_logprobs, -1);
  EXPECT_EQ(ToGenerationRequest(*off, {1, 2}, 4).prompt_logprobs, -1);
  // Echo with logprobs 5 and prompt_logprobs 1: one scoring, with the larger count.
  auto both =
      ParseCompletionRequest(R"({"prompt":"x","echo":true,"logprobs":5,"prompt_logprobs":1})", &d);
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(ToGenerationRequest(*both, {1, 2}, 4).prompt_logprobs, 5);
  for (const char* bad :
       {R"({"prompt":"x","prompt_logprobs":21})", R"({"prompt":"x","prompt_logprobs":-1})",
        R"({"prompt":"x","prompt_logprobs":"2"})",
        R"({"prompt":"x","prompt_logprobs":1,"stream":true})"}) {
    ErrorDetail e;
    EXPECT_FALSE(ParseCompletionRequest(bad, &e).ok()) << bad;
    EXPECT_EQ(e.param, "prompt_logprobs") << bad;
  }
  // [null, {id: {logprob, rank, decoded_token}}]: the token, then alternatives besides it.
  TokenLogprob t{7,
                 "b",
                 -1.5f,
                 {TopLogprob{3, "a", -0.5f}, TopLogprob{7, "b", -1.5f}, TopLogprob{9, "c", -2.0f}},
                 2};
  TokenLogprob inf{
      4, "z", -std::numeric_limits<float>::infinity(), {TopLogprob{3, "a", -0.1f}}, 900};
  const json j = PromptLogprobsJson({t, inf}, 2);
  ASSERT_EQ(j.size(), 3u);
  EXPECT_TRUE(j[0].is_null());
  EXPECT_EQ(j[1], json::parse(R"({"7":{"logprob":-1.5,"rank":2,"decoded_token":"b"},
                                  "3":{"logprob":-0.5,"rank":1,"decoded_token":"a"}})"));
  EXPECT_EQ(j[2]["4"]["logprob"], -9999.0);
  EXPECT_EQ(j[2]["4"]["rank"], 900);
  EXPECT_EQ(j[2].size(), 2u);
}

TEST(ToolAnswerTest, ReadsCallsIntoOpenAisFormAndAnswersIntoText) {
  auto calls = ReadToolAnswer(
      R"({"tool_calls":[{"name":"get_weather","arguments":{"city":"Paris","unit":"C"}}]})");
  ASSERT_TRUE(calls.has_value());
  ASSERT_EQ(calls->tool_calls.size(), 1u);
  const json& c = calls->tool_calls[0];
  EXPECT_EQ(c["type"], "function");
  EXPECT_EQ(c["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(c["function"]["name"], "get_weather");
  EXPECT_EQ(c["function"]["arguments"], R"({"city":"Paris","unit":"C"})");  // the model's order
  auto text = ReadToolAnswer(R"( {"response": "It is sunny."})");
  ASSERT_TRUE(text.has_value());
  EXPECT_TRUE(text->tool_calls.is_null());
  EXPECT_EQ(text->content, "It is sunny.");
  EXPECT_FALSE(ReadToolAnswer(R"({"tool_calls":[{"name":"get_wea)").has_value());
  // The whole response: content null, tool_calls, finish_reason "tool_calls".
  ChoiceOutput out{"", FinishReason::kStop, nullptr, calls->tool_calls};
  const json body = ChatCompletionJson(ResponseMeta{"chatcmpl-x", 1, "m"}, {out}, Usage{3, 4});
  EXPECT_TRUE(body["choices"][0]["message"]["content"].is_null());
  EXPECT_EQ(body["choices"][0]["message"]["tool_calls"], calls->tool_calls);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");
}

TEST(ParseChatTest, StopTokenIdsAndMinTokens) {
  ErrorDetail d;
  auto r = ParseCompletionRequest(
      R"({"prompt":"x","stop_token_ids":[7, 300],"min_tokens":5,"max_tokens":5})", &d);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stop_token_ids, (std::vector<int32_t>{7, 300}));
  EXPECT_EQ(r->min_tokens, 5);
  GenerationRequest g = ToGenerationRequest(*r, {1}, 5);
  EXPECT_EQ(g.stop_tokens, (std::vector<int32_t>{7, 300}));
  EXPECT_EQ(g.min_tokens, 5);
  EXPECT_TRUE(CheckTokenIds(*r, 301, &d).ok());
  EXPECT_FALSE(CheckTokenIds(*r, 300, &d).ok());
  EXPECT_EQ(d.param, "stop_token_ids");
  EXPECT_TRUE(CheckMinTokens(*r, 5, &d).ok());
  d = {};
  EXPECT_FALSE(CheckMinTokens(*r, 4, &d).ok());
  EXPECT_EQ(d.param, "min_tokens");
  const std::string m = R"("messages":[{"role":"user","content":"x"}])";
  EXPECT_EQ(ChatError("{" + m + R"(,"stop_token_ids":5})").param, "stop_token_ids");
  EXPECT_EQ(ChatError("{" + m + R"(,"stop_token_ids":[-1]})").param, "stop_token_ids");
  EXPECT_EQ(ChatError("{" + m + R"(,"stop_token_ids":["a"]})").param, "stop_token_ids");
  EXPECT_EQ(ChatError("{" + m + R"(,"min_tokens":-1})").param, "min_tokens");
  EXPECT_EQ(ChatError("{" + m + R"(,"min_tokens":"3"})").param, "min_tokens");
}

TEST(ParseCompletionTest, EchoAsksTheEngineForPromptLogprobsOnlyWithLogprobs) {
  ErrorDetail d;
  auto a = ParseCompletionRequest(R"({"prompt":"x","echo":true,"logprobs":3})", &d);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_TRUE(a->echo);
  EXPECT_EQ(ToGenerationRequest(*a, {1, 2}, 4).prompt_logprobs, 3);
  auto b = ParseCompletionRequest(R"({"prompt":"x","echo":true})", &d);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(ToGenerationRequest(*b, {1, 2}, 4).prompt_logprobs, -1);
  auto z = ParseCompletionRequest(R"({"prompt":"x","echo":true,"logprobs":1,"max_tokens":0})", &d);
  ASSERT_TRUE(z.ok()) << z.status().ToString();
  EXPECT_EQ(z->max_tokens, 0);
  d = {};
  EXPECT_FALSE(ParseCompletionRequest(R"({"prompt":"x","max_tokens":0})", &d).ok());
  EXPECT_EQ(d.param, "max_tokens");
  auto c = ParseCompletionRequest(R"({"prompt":"x","logprobs":0})", &d);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(ToGenerationRequest(*c, {1, 2}, 4).prompt_logprobs, -1);
}

TEST(ResponsesTest, AnUnscoredTokenHasNullLogprobs) {
  const std::vector<TokenLogprob> lps = {
      TokenLogprob{1, std::string(1, 'A'), std::numeric_limits<float>::quiet_NaN(), {}},
      TokenLogprob{3, std::string(1, 'b'), -0.5f, {TopLogprob{3, std::string(1, 'b'), -0.5f}}}};
  json j = CompletionLogprobsJson(lps, 0);
  EXPECT_TRUE(j["token_logprobs"][0].is_null());
  EXPECT_TRUE(j["top_logprobs"][0].is_null());
  EXPECT_DOUBLE_EQ(j["token_logprobs"][1].get<double>(), -0.5);
  EXPECT_EQ(j["text_offset"], json::array({0, 1}));
}

// text_offset counts characters, not bytes ("Café" is 4 characters, 5 bytes), and a token that
// ends inside a character (an emoji's 4 bytes split 2 + 2) gets that character's start; such
// tokens are "bytes:\\xNN" strings, so two of them stay two top_logprobs keys.
TEST(ResponsesTest, CompletionOffsetsCountCharactersAndSplitCharactersAreBytes) {
  auto token = [](std::string text, std::vector<TopLogprob> top = {}) {
    TokenLogprob t;
    t.text = std::move(text);
    t.logprob = -1;
    t.top = std::move(top);
    return t;
  };
  const std::vector<TokenLogprob> lps = {
      token("Caf"), token("\xc3\xa9"), token(" \xf0\x9f"),
      token("\x98\x80", {{7, "\x98\x80", -1}, {8, "\x98\x83", -2}, {9, "!", -3}}),
      token("x")};
  json j = CompletionLogprobsJson(lps, 2);
  EXPECT_EQ(j["text_offset"], json::array({2, 5, 6, 7, 8}));
  EXPECT_EQ(j["tokens"], json::array({"Caf", "\xc3\xa9", "bytes: \\xf0\\x9f",
                                      "bytes:\\x98\\x80", "x"}));
  const json& top = j["top_logprobs"][3];
  EXPECT_EQ(top.size(), 3u);
  EXPECT_DOUBLE_EQ(top["bytes:\\x98\\x80"].get<double>(), -1);
  EXPECT_DOUBLE_EQ(top["bytes:\\x98\\x83"].get<double>(), -2);
  EXPECT_EQ(utf8::CharCount("Caf\xc3\xa9 \xf0\x9f\x98\x80"), 6u);
  EXPECT_EQ(utf8::CharCount("\x80" "a"), 2u);      // a stray continuation byte: one character
  EXPECT_EQ(utf8::CharCount("\xe2\x82" "a"), 2u);  // a sequence cut short, then "a"
}

TEST(ParseChatTest, LogitBiasHasAnEntryLimit) {
  std::string body = R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{)";
  for (int i = 0; i <= kMaxLogitBias; ++i) {
    if (i > 0) body += ',';
    body += '"';
    body += std::to_string(i);
    body += "\":1";
  }
  body += "}}";
  EXPECT_EQ(ChatError(body).param, "logit_bias");
}

TEST(ParseChatTest, DefaultsWhenOptionalFieldsAbsentOrNull) {
  ErrorDetail d;
  auto r = ParseChatRequest(
      R"({"messages": [{"role": "user", "content": "x"}], "temperature": null, "stop": "s"})", &d);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->model, "");
  EXPECT_FALSE(r->max_tokens.has_value());
  EXPECT_FLOAT_EQ(r->sampling.temperature, 1.0f);
  EXPECT_EQ(r->sampling.logprobs, -1);
  EXPECT_EQ(r->stop, std::vector<std::string>{"s"});
  EXPECT_FALSE(r->stream);
}

TEST(ParseChatTest, MaxCompletionTokensWins) {
  ErrorDetail d;
  auto r = ParseChatRequest(
      R"({"messages":[{"role":"user","content":"x"}],"max_tokens":5,"max_completion_tokens":9})",
      &d);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->max_tokens, 9);
}

TEST(ParseChatTest, RejectsMalformedBodies) {
  EXPECT_EQ(ChatError("{not json").param, "");
  EXPECT_EQ(ChatError("[1,2]").param, "");
  EXPECT_EQ(ChatError(std::string("{\"messages\":\"\xff\"}")).param, "");
  EXPECT_EQ(ChatError(R"({"model":"m"})").param, "messages");
  EXPECT_EQ(ChatError(R"({"messages":[]})").param, "messages");
  EXPECT_EQ(ChatError(R"({"messages":"hi"})").param, "messages");
  EXPECT_EQ(ChatError(R"({"messages":[{"content":"x"}]})").param, "messages[0].role");
  EXPECT_EQ(ChatError(R"({"messages":[{"role":"robot","content":"x"}]})").param,
            "messages[0].role");
  EXPECT_EQ(ChatError(R"({"messages":[{"role":"user"}]})").param, "messages[0].content");
  EXPECT_EQ(ChatError(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})").param,
            "messages[0].content");
}

// A number past double's range (nlohmann's out_of_range 406, not a parse_error) and a body nested
// past kMaxJsonNesting are the client's errors: 400 invalid_request_error, never a 500.
TEST(ParseChatTest, RejectsOverflowingNumbersAndDeepNestingAsBadRequests) {
  const std::string chat = R"({"messages":[{"role":"user","content":"hi"}],)";
  for (const std::string& field :
       {std::string(R"("temperature":1e999)"), std::string(R"("max_tokens":-1e400)"),
        std::string(R"("metadata":{"a":1e999})")}) {
    ErrorDetail d;
    auto r = ParseChatRequest(chat + field + "}", &d);
    ASSERT_FALSE(r.ok()) << field;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
    EXPECT_NE(r.status().message().find("not valid JSON"), std::string::npos)
        << r.status().message();
  }
  ErrorDetail d;
  EXPECT_FALSE(ParseTokenizeRequest(R"({"content":"x","n":1e999})", &d).ok());
  EXPECT_EQ(ChatError(chat + R"("speculative":{"n_max":2,"a":1}})").param, "speculative.a");
  EXPECT_TRUE(ParseChatRequest(chat + R"("speculative":{"n_max":2}})", &d).ok());
  const std::string deep = chat + R"("x":)" + std::string(kMaxJsonNesting, '[') +
                           std::string(kMaxJsonNesting, ']') + "}";
  auto r = ParseChatRequest(deep, &d);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("deeper than"), std::string::npos) << r.status().message();
  // One level less fits (the body's own object is the first level).
  const std::string fits = chat + R"("x":)" + std::string(kMaxJsonNesting - 1, '[') +
                           std::string(kMaxJsonNesting - 1, ']') + "}";
  EXPECT_TRUE(ParseChatRequest(fits, &d).ok());
}

TEST(ParseChatTest, RejectsMistypedAndOutOfRangeFields) {
  const std::string m = R"("messages":[{"role":"user","content":"x"}])";
  EXPECT_EQ(ChatError("{" + m + R"(,"max_tokens":"10"})").param, "max_tokens");
  EXPECT_EQ(ChatError("{" + m + R"(,"max_tokens":0})").param, "max_tokens");
  EXPECT_EQ(ChatError("{" + m + R"(,"max_tokens":1.5})").param, "max_tokens");
  EXPECT_EQ(ChatError("{" + m + R"(,"temperature":"hot"})").param, "temperature");
  EXPECT_EQ(ChatError("{" + m + R"(,"temperature":3})").param, "temperature");
  EXPECT_EQ(ChatError("{" + m + R"(,"top_p":1.5})").param, "top_p");
  EXPECT_EQ(ChatError("{" + m + R"(,"n":0})").param, "n");
  EXPECT_EQ(ChatError("{" + m + R"(,"n":129})").param, "n");
  EXPECT_EQ(ChatError("{" + m + R"(,"n":2.5})").param, "n");
  EXPECT_EQ(ChatError("{" + m + R"(,"stream":"yes"})").param, "stream");
  EXPECT_EQ(ChatError("{" + m + R"(,"stream_options":{"include_usage":true}})").param,
            "stream_options");
  EXPECT_EQ(ChatError("{" + m + R"(,"stop":["a","b","c","d","e"]})").param, "stop");
  EXPECT_EQ(ChatError("{" + m + R"(,"stop":[1]})").param, "stop");
  EXPECT_EQ(ChatError("{" + m + R"(,"stop":""})").param, "stop");
  EXPECT_EQ(ChatError("{" + m + R"(,"seed":"1"})").param, "seed");
  EXPECT_EQ(ChatError("{" + m + R"(,"logit_bias":[[1,5]]})").param, "logit_bias");
  EXPECT_EQ(ChatError("{" + m + R"(,"logit_bias":{"abc":5}})").param, "logit_bias");
  EXPECT_EQ(ChatError("{" + m + R"(,"logit_bias":{"-1":5}})").param, "logit_bias");
  EXPECT_EQ(ChatError("{" + m + R"(,"logit_bias":{"12x":5}})").param, "logit_bias");
  EXPECT_EQ(ChatError("{" + m + R"(,"logit_bias":{"":5}})").param, "logit_bias");
  EXPECT_EQ(ChatError("{" + m + R"(,"logit_bias":{"4294967296":5}})").param, "logit_bias");
  EXPECT_EQ(ChatError("{" + m + R"(,"logit_bias":{"1":"5"}})").param, "logit_bias");
  EXPECT_EQ(ChatError("{" + m + R"(,"logit_bias":{"1":100.5}})").param, "logit_bias");
  EXPECT_EQ(ChatError("{" + m + R"(,"logit_bias":{"1":-101}})").param, "logit_bias");
  EXPECT_EQ(ChatError("{" + m + R"(,"logit_bias":{"1":5,"01":3}})").param, "logit_bias");
  EXPECT_EQ(ChatError("{" + m + R"(,"top_logprobs":2})").param, "top_logprobs");
  EXPECT_EQ(ChatError("{" + m + R"(,"logprobs":true,"top_logprobs":21})").param, "top_logprobs");
  EXPECT_EQ(ChatError("{" + m + R"(,"model":5})").param, "model");
  EXPECT_EQ(ChatError("{" + m + R"(,"echo":true,"max_tokens":0})").param, "max_tokens");
  EXPECT_EQ(ChatError("{" + m + R"(,"echo":"yes"})").param, "echo");
  EXPECT_EQ(ChatError("{" + m + R"(,"tools":[{"type":"function"}]})").param, "tools[0]");
  EXPECT_EQ(CompletionError(R"({"prompt":"x","tools":[{"type":"function"}]})").param, "tools");
  EXPECT_EQ(ChatError("{" + m + R"(,"response_format":{"type":"json_schema"}})").param,
            "response_format.json_schema.schema");
  EXPECT_EQ(ChatError("{" + m + R"(,"response_format":{"type":"yaml"}})").param, "response_format");
  EXPECT_EQ(ChatError("{" + m + R"(,"response_format":"json_object"})").param, "response_format");
  EXPECT_EQ(
      ChatError("{" + m + R"(,"response_format":{"type":"json_object"},"ignore_eos":true})").param,
      "ignore_eos");
}

TEST(ParseCompletionTest, AcceptsEveryPromptShape) {
  ErrorDetail d;
  auto a = ParseCompletionRequest(R"({"prompt":"Once"})", &d);
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a->prompts.size(), 1u);
  EXPECT_EQ(a->prompts[0].text, "Once");
  EXPECT_FALSE(a->prompts[0].is_ids);
  auto b = ParseCompletionRequest(R"({"prompt":["Once"]})", &d);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->prompts.size(), 1u);
  EXPECT_EQ(b->prompts[0].text, "Once");
  auto c = ParseCompletionRequest(R"({"prompt":[1,2,3]})", &d);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->prompts.size(), 1u);
  EXPECT_TRUE(c->prompts[0].is_ids);
  EXPECT_EQ(c->prompts[0].ids, (std::vector<int32_t>{1, 2, 3}));
  auto e = ParseCompletionRequest(R"({"prompt":[[4,5]],"logprobs":2})", &d);
  ASSERT_TRUE(e.ok());
  ASSERT_EQ(e->prompts.size(), 1u);
  EXPECT_EQ(e->prompts[0].ids, (std::vector<int32_t>{4, 5}));
  EXPECT_TRUE(e->logprobs);
  EXPECT_EQ(e->sampling.logprobs, 2);
  // OpenAI's batch form: several prompts, strings or id lists.
  auto f = ParseCompletionRequest(R"({"prompt":["a","b","c"]})", &d);
  ASSERT_TRUE(f.ok());
  ASSERT_EQ(f->prompts.size(), 3u);
  EXPECT_EQ(f->prompts[2].text, "c");
  auto g = ParseCompletionRequest(R"({"prompt":[[1],[2,3]]})", &d);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g->prompts.size(), 2u);
  EXPECT_EQ(g->prompts[1].ids, (std::vector<int32_t>{2, 3}));
}

TEST(ParseCompletionTest, RejectsBadPrompts) {
  EXPECT_EQ(CompletionError(R"({"max_tokens":3})").param, "prompt");
  EXPECT_EQ(CompletionError(R"({"prompt":""})").param, "prompt");
  EXPECT_EQ(CompletionError(R"({"prompt":[]})").param, "prompt");
  EXPECT_EQ(CompletionError(R"({"prompt":[[]]})").param, "prompt");
  EXPECT_EQ(CompletionError(R"({"prompt":["a",""]})").param, "prompt");
  EXPECT_EQ(CompletionError(R"({"prompt":["a",[1]]})").param, "prompt");
  EXPECT_EQ(CompletionError(R"({"prompt":[[1],[]]})").param, "prompt");
  std::string many = R"({"prompt":[)";
  for (int i = 0; i <= kMaxPrompts; ++i) many += i > 0 ? ",\"x\"" : "\"x\"";
  many += "]}";
  EXPECT_EQ(CompletionError(many).param, "prompt");
  EXPECT_EQ(CompletionError(R"({"prompt":[1,-2]})").param, "prompt");
  EXPECT_EQ(CompletionError(R"({"prompt":[1,"a"]})").param, "prompt");
  EXPECT_EQ(CompletionError(R"({"prompt":7})").param, "prompt");
  EXPECT_EQ(CompletionError(R"({"prompt":"a","logprobs":true})").param, "logprobs");
  EXPECT_EQ(CompletionError(R"({"prompt":"a","suffix":"z"})").param, "suffix");
}

TEST(CheckModelTest, UnknownModelIsNotFound) {
  ParsedRequest r;
  ErrorDetail d;
  EXPECT_TRUE(CheckModel(r, "smol", &d).ok());
  r.model = "smol";
  EXPECT_TRUE(CheckModel(r, "smol", &d).ok());
  r.model = "gpt-4";
  Status s = CheckModel(r, "smol", &d);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(d.code, "model_not_found");
  EXPECT_EQ(d.param, "model");
}

TEST(ResolveMaxTokensTest, DefaultsToRoomCappedAndRejectsOverflow) {
  ParsedRequest r;
  ErrorDetail d;
  EXPECT_EQ(*ResolveMaxTokens(r, 100, 8192, &d), kDefaultMaxTokensCap);
  EXPECT_EQ(*ResolveMaxTokens(r, 100, 300, &d), 200);
  r.max_tokens = 50;
  EXPECT_EQ(*ResolveMaxTokens(r, 100, 150, &d), 50);
  auto over = ResolveMaxTokens(r, 101, 150, &d);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(over.status().message().find("150"), std::string::npos);
  EXPECT_NE(over.status().message().find("151"), std::string::npos);
  EXPECT_NE(over.status().message().find("101"), std::string::npos);
  EXPECT_EQ(d.code, "context_length_exceeded");
  r.max_tokens.reset();
  EXPECT_FALSE(ResolveMaxTokens(r, 150, 150, &d).ok());
}

TEST(ToGenerationRequestTest, CopiesOptions) {
  ErrorDetail d;
  auto r = ParseCompletionRequest(R"({"prompt":"a","stop":"x","ignore_eos":true,"seed":3})", &d);
  ASSERT_TRUE(r.ok());
  GenerationRequest g = ToGenerationRequest(*r, {1, 2}, 9);
  EXPECT_EQ(g.prompt_tokens, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(g.max_tokens, 9);
  EXPECT_EQ(g.stop, std::vector<std::string>{"x"});
  EXPECT_TRUE(g.ignore_eos);
  EXPECT_EQ(g.sampling.seed, 3u);
}

TEST(TokenizeParseTest, DefaultsAndErrors) {
  ErrorDetail d;
  auto t = ParseTokenizeRequest(R"({"content":"hi"})", &d);
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->add_special);
  EXPECT_TRUE(t->parse_special);
  EXPECT_FALSE(t->with_pieces);
  EXPECT_FALSE(ParseTokenizeRequest(R"({"content":1})", &d).ok());
  EXPECT_FALSE(ParseTokenizeRequest(R"({})", &d).ok());
  auto ids = ParseDetokenizeRequest(R"({"tokens":[1,2]})", &d);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{1, 2}));
  EXPECT_FALSE(ParseDetokenizeRequest(R"({"tokens":"1"})", &d).ok());
  EXPECT_FALSE(ParseDetokenizeRequest(R"({"tokens":[1.5]})", &d).ok());
}

TEST(Utf8Test, ValidatesStrictly) {
  EXPECT_TRUE(IsValidUtf8("plain é 日本 😀"));
  EXPECT_FALSE(IsValidUtf8("\xff"));
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));          // overlong
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(IsValidUtf8("\xe6\x97"));          // truncated
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // > U+10FFFF
}

ResponseMeta Meta() { return {"chatcmpl-abc", 1700000000, "smol"}; }

TEST(ResponsesTest, ChatCompletionShape) {
  json j = ChatCompletionJson(Meta(), "Paris.", FinishReason::kStop, {10, 3}, nullptr);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"], "chatcmpl-abc");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "smol");
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Paris.");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"], json({{"prompt_tokens", 10},
                              {"completion_tokens", 3},
                              {"total_tokens", 13},
                              {"prompt_tokens_details", {{"cached_tokens", 0}}}}));
  json cached = ChatCompletionJson(Meta(), "Paris.", FinishReason::kStop, {10, 3, 8}, nullptr);
  EXPECT_EQ(cached["usage"]["prompt_tokens_details"]["cached_tokens"], 8);
}

TEST(ResponsesTest, SeveralChoicesAreIndexedInOrder) {
  ResponseMeta meta{"chatcmpl-x", 7, "m"};
  std::vector<TokenLogprob> lps(1);
  lps[0].token = 5;
  lps[0].text = "b";
  const std::vector<ChoiceOutput> choices = {{"a", FinishReason::kStop, nullptr, nullptr},
                                             {"b", FinishReason::kLength, &lps, nullptr}};
  json chat = ChatCompletionJson(meta, choices, Usage{3, 4});
  ASSERT_EQ(chat["choices"].size(), 2u);
  EXPECT_EQ(chat["choices"][0]["index"], 0);
  EXPECT_EQ(chat["choices"][0]["message"]["content"], "a");
  EXPECT_EQ(chat["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(chat["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(chat["choices"][1]["index"], 1);
  EXPECT_EQ(chat["choices"][1]["finish_reason"], "length");
  EXPECT_EQ(chat["choices"][1]["logprobs"]["content"].size(), 1u);
  EXPECT_EQ(chat["usage"]["total_tokens"], 7);
  json text = CompletionJson(meta, choices, Usage{3, 4});
  EXPECT_EQ(text["choices"][1]["index"], 1);
  EXPECT_EQ(text["choices"][1]["text"], "b");
  std::string t = "c";
  EXPECT_EQ(
      ChatChunkJson(meta, false, &t, nullptr, FinishReason::kNone, false, 2)["choices"][0]["index"],
      2);
  EXPECT_EQ(CompletionChunkJson(meta, t, nullptr, 0, FinishReason::kNone, false,
                                3)["choices"][0]["index"],
            3);
}

TEST(ResponsesTest, ChatLogprobsShape) {
  std::vector<TokenLogprob> lps(1);
  lps[0].token = 5;
  lps[0].text = "Hi";
  lps[0].logprob = -0.5f;
  lps[0].top = {{5, "Hi", -0.5f}, {6, "Yo", -1.5f}};
  json j = ChatCompletionJson(Meta(), "Hi", FinishReason::kLength, {1, 1}, &lps);
  json c = j["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(c["token"], "Hi");
  EXPECT_DOUBLE_EQ(c["logprob"].get<double>(), -0.5);
  EXPECT_EQ(c["bytes"], json({72, 105}));
  EXPECT_EQ(c["top_logprobs"][1]["token"], "Yo");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
}

TEST(ResponsesTest, CompletionLogprobsShapeWithOffsets) {
  std::vector<TokenLogprob> lps(2);
  lps[0].text = "ab";
  lps[0].logprob = -1;
  lps[1].text = "c";
  lps[1].logprob = -2;
  lps[1].top = {{1, "c", -2}, {2, "d", -3}};
  json l = CompletionLogprobsJson(lps, 10);
  EXPECT_EQ(l["tokens"], json({"ab", "c"}));
  EXPECT_EQ(l["text_offset"], json({10, 12}));
  // The sampled token is always there (OpenAI: up to logprobs + 1 keys), alone when no
  // alternatives were asked for; null is only for an unscored (NaN) position.
  EXPECT_EQ(l["top_logprobs"][0], json({{"ab", -1.0}}));
  EXPECT_DOUBLE_EQ(l["top_logprobs"][1]["d"].get<double>(), -3);
  EXPECT_EQ(l["top_logprobs"][1].size(), 2u);  // "c" is both the token and an alternative
  lps[0].logprob = std::nanf("");
  EXPECT_TRUE(CompletionLogprobsJson(lps, 0)["top_logprobs"][0].is_null());
  json j = CompletionJson(Meta(), "abc", FinishReason::kStop, {2, 2}, &lps);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], "abc");
}

TEST(ResponsesTest, StreamChunks) {
  json first = ChatChunkJson(Meta(), true, nullptr, nullptr, FinishReason::kNone, false);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(first.contains("usage"));
  std::string t = "Par";
  json mid = ChatChunkJson(Meta(), false, &t, nullptr, FinishReason::kNone, true);
  EXPECT_EQ(mid["choices"][0]["delta"], json({{"content", "Par"}}));
  EXPECT_TRUE(mid["usage"].is_null());
  json last = ChatChunkJson(Meta(), false, nullptr, nullptr, FinishReason::kStop, false);
  EXPECT_EQ(last["choices"][0]["delta"], json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  json usage = UsageChunkJson(Meta(), "chat.completion.chunk", {4, 2});
  EXPECT_EQ(usage["choices"], json::array());
  EXPECT_EQ(usage["usage"]["total_tokens"], 6);
  json c = CompletionChunkJson(Meta(), "x", nullptr, 0, FinishReason::kNone, false);
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["text"], "x");
  EXPECT_EQ(SseEvent("{}"), "data: {}\n\n");
}

TEST(ResponsesTest, DumpJsonReplacesInvalidUtf8) {
  json j = {{"t", std::string("a\xe6\x97")}};
  EXPECT_EQ(DumpJson(j), "{\"t\":\"a\xef\xbf\xbd\"}");
}

TEST(ResponsesTest, ModelsListAndIds) {
  json m = ModelsJson("smol", 5, 8192);
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "smol");
  EXPECT_EQ(m["data"][0]["object"], "model");
  std::string id = NewResponseId("cmpl-");
  EXPECT_EQ(id.size(), 5u + 24u);
  EXPECT_NE(id, NewResponseId("cmpl-"));
}

}  // namespace
}  // namespace kinfer

namespace kinfer {
namespace {

TEST(RequestHeadersTest, PriorityFromBodyThenHeaderThenDefault) {
  ErrorDetail d;
  ParsedRequest r;
  EXPECT_EQ(*ResolvePriority(r, "", &d), kDefaultPriority);
  EXPECT_EQ(*ResolvePriority(r, "critical", &d), 0);
  EXPECT_EQ(*ResolvePriority(r, "batch", &d), 2);
  EXPECT_EQ(*ResolvePriority(r, "-3", &d), -3);
  r.priority = 7;
  EXPECT_EQ(*ResolvePriority(r, "critical", &d), 7) << "the body wins";
  r.priority.reset();
  StatusOr<int> bad = ResolvePriority(r, "urgent", &d);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(d.param, "x-kinfer-priority");
}

TEST(RequestHeadersTest, TimeoutsParseWithUnitsAndRefuseNonsense) {
  ErrorDetail d;
  using std::chrono::milliseconds;
  EXPECT_FALSE(ParseRequestTimeout("", &d)->has_value());
  EXPECT_EQ(**ParseRequestTimeout("500ms", &d), milliseconds(500));
  EXPECT_EQ(**ParseRequestTimeout("2s", &d), milliseconds(2000));
  EXPECT_EQ(**ParseRequestTimeout("1.5", &d), milliseconds(1500));
  EXPECT_EQ(**ParseRequestTimeout("1m", &d), milliseconds(60000));
  for (const char* bad : {"0", "-1s", "soon", "5h", "1e9"}) {
    ErrorDetail e;
    EXPECT_FALSE(ParseRequestTimeout(bad, &e).ok()) << bad;
    EXPECT_EQ(e.param, "x-kinfer-timeout") << bad;
  }
}

TEST(RequestHeadersTest, TenantSaltsAreStableDistinctAndNeverTheSharedOne) {
  EXPECT_EQ(CacheSaltFor(""), 0u);
  EXPECT_NE(CacheSaltFor("a"), 0u);
  EXPECT_EQ(CacheSaltFor("team-a"), CacheSaltFor("team-a"));
  EXPECT_NE(CacheSaltFor("team-a"), CacheSaltFor("team-b"));
  // Every name's salt is in the tenants' range (top bits 01: the private salts of
  // cache_prompt=false, 10..., and of prompt scoring, 11..., are out of reach), and no two names
  // share one (they are numbered, not hashed: a hash could be forced to collide).
  std::set<uint64_t> seen;
  for (int i = 0; i < 10000; ++i) {
    const uint64_t salt = CacheSaltFor("tenant-" + std::to_string(i));
    ASSERT_EQ(salt >> 62, 1u) << i;
    ASSERT_TRUE(seen.insert(salt).second) << i;
    ASSERT_EQ(CacheSaltFor("tenant-" + std::to_string(i)), salt) << i;
  }
}

TEST(RequestHeadersTest, PriorityBodyFieldIsValidated) {
  ErrorDetail d;
  auto ok = ParseChatRequest(R"({"messages":[{"role":"user","content":"hi"}],"priority":2})", &d);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->priority, 2);
  auto bad =
      ParseChatRequest(R"({"messages":[{"role":"user","content":"hi"}],"priority":"high"})", &d);
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(d.param, "priority");
}

TEST(SpeculativeFieldTest, BooleanObjectAndLlamaCppFlatKey) {
  ErrorDetail d;
  auto parse = [&](const std::string& extra) {
    return ParseChatRequest(R"({"messages":[{"role":"user","content":"hi"}])" + extra + "}", &d);
  };
  auto none = parse("");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->speculative_tokens, -1);  // the server's default
  auto on = parse(R"(,"speculative":true)");
  ASSERT_TRUE(on.ok());
  EXPECT_EQ(on->speculative_tokens, kSpeculativeServerMax);
  auto off = parse(R"(,"speculative":false)");
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->speculative_tokens, 0);
  auto n = parse(R"(,"speculative":{"n_max":5})");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->speculative_tokens, 5);
  auto flat = parse(R"(,"speculative.n_max":2)");
  ASSERT_TRUE(flat.ok());
  EXPECT_EQ(flat->speculative_tokens, 2);
  EXPECT_EQ(ToGenerationRequest(*flat, {1, 2}, 4).speculative_tokens, 2);

  EXPECT_FALSE(parse(R"(,"speculative":"yes")").ok());
  EXPECT_EQ(d.param, "speculative");
  EXPECT_FALSE(parse(R"(,"speculative":{"n_max":-1})").ok());
  EXPECT_EQ(d.param, "speculative.n_max");
  EXPECT_FALSE(parse(R"(,"speculative":{"n_max":1000})").ok());
  EXPECT_EQ(d.param, "speculative.n_max");
  EXPECT_FALSE(parse(R"(,"speculative.n_max":1.5)").ok());
  EXPECT_EQ(d.param, "speculative.n_max");
}

}  // namespace
}  // namespace kinfer
