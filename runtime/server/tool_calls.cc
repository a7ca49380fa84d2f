#include "runtime/server/tool_calls.h"

#include <set>

#include "common/json_limits.h"
#include "runtime/sample/json_schema_grammar.h"
#include "runtime/server/request_fields.h"
#include "runtime/server/tool_answer_stream.h"

namespace kinfer {
namespace {

using request_fields::Field;
using request_fields::Invalid;

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

bool ValidName(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

Status ParseTools(const ojson& body, ParsedRequest* r, ErrorDetail* d) {
  ToolRequest& t = r->tools;
  const ojson* tools = Field(body, "tools");
  if (tools != nullptr) {
    if (!tools->is_array() || tools->size() > kMaxTools) {
      return Invalid(d, "tools",
                     "'tools' must be an array of at most " + std::to_string(kMaxTools) +
                         " {\"type\": \"function\", \"function\": {...}} objects");
    }
    std::set<std::string> names;
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string at = "tools[" + std::to_string(i) + "]";
      const ojson& tool = (*tools)[i];
      const ojson* type = tool.is_object() ? Field(tool, "type") : nullptr;
      const ojson* fn = tool.is_object() ? Field(tool, "function") : nullptr;
      if (type == nullptr || *type != "function" || fn == nullptr || !fn->is_object()) {
        return Invalid(d, at, "'" + at + "' must be {\"type\": \"function\", \"function\": {...}}");
      }
      ToolSpec spec;
      const ojson* name = Field(*fn, "name");
      if (name == nullptr || !name->is_string() || !ValidName(name->get<std::string>())) {
        return Invalid(d, at + ".function.name",
                       "'" + at + ".function.name' must be 1 to 64 letters, digits, '_' or '-'");
      }
      spec.name = name->get<std::string>();
      if (!names.insert(spec.name).second) {
        return Invalid(d, at + ".function.name", "tool '" + spec.name + "' is given twice");
      }
      if (const ojson* desc = Field(*fn, "description")) {
        if (!desc->is_string()) {
          return Invalid(d, at + ".function.description",
                         "'" + at + ".function.description' must be a string");
        }
        spec.description = desc->get<std::string>();
      }
      // No parameters: a function of no arguments, as OpenAI.
      spec.parameters = ojson{{"type", "object"}, {"properties", ojson::object()}};
      if (const ojson* params = Field(*fn, "parameters")) spec.parameters = *params;
      t.tools.push_back(std::move(spec));
    }
  }
  t.choice = t.tools.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
  if (const ojson* choice = Field(body, "tool_choice")) {
    const std::string bad =
        "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
        "\"function\": {\"name\": ...}}";
    if (choice->is_string()) {
      const std::string c = choice->get<std::string>();
      if (c == "none") {
        t.choice = ToolChoice::kNone;
      } else if (c == "auto" || c == "required") {
        if (t.tools.empty()) {
          return Invalid(d, "tool_choice", "'tool_choice' \"" + c + "\" needs 'tools'");
        }
        t.choice = c == "auto" ? ToolChoice::kAuto : ToolChoice::kRequired;
      } else {
        return Invalid(d, "tool_choice", bad);
      }
    } else if (choice->is_object()) {
      const ojson* fn = Field(*choice, "function");
      const ojson* name = fn != nullptr && fn->is_object() ? Field(*fn, "name") : nullptr;
      if (Field(*choice, "type") == nullptr || (*choice)["type"] != "function" || name == nullptr ||
          !name->is_string()) {
        return Invalid(d, "tool_choice", bad);
      }
      t.function = name->get<std::string>();
      bool found = false;
      for (const ToolSpec& s : t.tools) found |= s.name == t.function;
      if (!found) {
        return Invalid(d, "tool_choice",
                       "'tool_choice' names '" + t.function + "', which is not in 'tools'");
      }
      t.choice = ToolChoice::kFunction;
    } else {
      return Invalid(d, "tool_choice", bad);
    }
  }
  if (const ojson* p = Field(body, "parallel_tool_calls")) {
    if (!p->is_boolean()) {
      return Invalid(d, "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    }
    t.parallel = p->get<bool>();
  }
  if (!t.active()) return Status::Ok();
  // response_format beside tools shapes the direct answer (read from the ordered body: the
  // schema's properties are generated in the client's order).
  if (const ojson* rf = Field(body, "response_format"); rf != nullptr && rf->is_object()) {
    const ojson* type = Field(*rf, "type");
    if (type != nullptr && *type == "json_object") {
      t.response_schema = ojson{{"type", "object"}};
    } else if (type != nullptr && *type == "json_schema") {
      t.response_schema = (*rf)["json_schema"]["schema"];  // checked by ParseCommon
    }
  }
  std::vector<ToolSchema> schemas;
  for (size_t i = 0; i < t.tools.size(); ++i) {
    if (t.choice == ToolChoice::kFunction && t.tools[i].name != t.function) continue;
    schemas.push_back({t.tools[i].name, &t.tools[i].parameters,
                       "tools[" + std::to_string(i) + "].function.parameters"});
  }
  const ToolSchema response{"", t.response_schema ? &*t.response_schema : nullptr,
                            "response_format.json_schema.schema"};
  auto g = ToolCallGrammar(schemas, /*may_answer=*/t.choice == ToolChoice::kAuto,
                           /*parallel=*/t.parallel && t.choice != ToolChoice::kFunction,
                           t.response_schema ? &response : nullptr);
  if (!g.ok()) {
    const std::string m = g.status().message();
    return Invalid(d, m.substr(0, m.find(':')), m);
  }
  r->grammar = *std::move(g);
  return Status::Ok();
}

std::string ToolSystemPrompt(const ToolRequest& t) {
  ojson list = ojson::array();
  for (const ToolSpec& s : t.tools) {
    if (t.choice == ToolChoice::kFunction && s.name != t.function) continue;
    ojson tool = {{"name", s.name}};
    if (!s.description.empty()) tool["description"] = s.description;
    tool["parameters"] = s.parameters;
    list.push_back(std::move(tool));
  }
  std::string out =
      "You can call these tools (the JSON Schema of each tool's arguments is its "
      "\"parameters\"):\n";
  out += list.dump(2);
  out += "\n\nAnswer with one JSON object. ";
  const std::string call =
      t.parallel && t.choice != ToolChoice::kFunction
          ? "{\"tool_calls\": [{\"name\": \"<tool name>\", \"arguments\": {<its arguments>}}]} "
            "(one entry per call)"
          : "{\"tool_calls\": [{\"name\": \"<tool name>\", \"arguments\": {<its arguments>}}]}";
  switch (t.choice) {
    case ToolChoice::kAuto:
      out += "To call tools: " + call + ". To answer the user directly: ";
      if (t.response_schema) {
        out += "{\"response\": <your answer, a JSON value under this JSON Schema: " +
               t.response_schema->dump() + ">}.";
      } else {
        out += "{\"response\": \"<your answer>\"}.";
      }
      break;
    case ToolChoice::kRequired:
      out += "Call one or more of the tools: " + call + ".";
      break;
    case ToolChoice::kFunction:
      out += "Call the tool " + t.function + ": " + call + ".";
      break;
    case ToolChoice::kNone:
      break;
  }
  return out;
}

StatusOr<std::string> AssistantToolCallsText(const json& tool_calls, const std::string& content,
                                             const std::string& param, ErrorDetail* d) {
  if (!tool_calls.is_array() || tool_calls.empty()) {
    return Invalid(d, param, "'" + param + "' must be a non-empty array");
  }
  ojson calls = ojson::array();
  for (size_t i = 0; i < tool_calls.size(); ++i) {
    const json& c = tool_calls[i];
    const std::string at = param + "[" + std::to_string(i) + "]";
    const json* fn = nullptr;
    if (c.is_object() && c.contains("function") && c["function"].is_object()) fn = &c["function"];
    if (fn == nullptr || !fn->contains("name") || !(*fn)["name"].is_string()) {
      return Invalid(d, at,
                     "'" + at +
                         "' must be {\"id\", \"type\": \"function\", \"function\": "
                         "{\"name\", \"arguments\"}}");
    }
    ojson args = ojson::object();
    if (fn->contains("arguments")) {
      const json& a = (*fn)["arguments"];
      if (a.is_string()) {
        // OpenAI sends the arguments as JSON text; a text that is not JSON stays a string, and
        // so does one nested deeper than a request may be (dump() below recurses once per level:
        // 80,000 nested arrays in a string overflowed the stack).
        const std::string& text = a.get_ref<const std::string&>();
        try {
          args = JsonNestingWithin(text) ? ojson::parse(text) : ojson(text);
        } catch (const ojson::exception&) {
          args = text;
        }
      } else {
        args = ojson::parse(a.dump());
      }
    }
    calls.push_back({{"name", (*fn)["name"].get<std::string>()}, {"arguments", std::move(args)}});
  }
  std::string out = content;
  if (!out.empty()) out += "\n";
  out += ojson{{"tool_calls", std::move(calls)}}.dump();
  return out;
}

std::string ToolResultText(const std::string& tool_call_id, const std::string& name,
                           const std::string& content) {
  ojson r = ojson::object();
  if (!name.empty()) r["name"] = name;
  if (!tool_call_id.empty()) r["tool_call_id"] = tool_call_id;
  r["content"] = content;
  return ojson{{"tool_response", std::move(r)}}.dump();
}

std::optional<ToolAnswer> ReadToolAnswer(std::string_view text) {
  // The whole text must be one JSON object (the grammar's sentence); its parts are read by the
  // same reader as a stream's, so a streamed answer adds up to this one.
  if (!json::accept(text.begin(), text.end())) return std::nullopt;
  ToolAnswerStream reader;
  std::vector<ToolAnswerStream::Delta> deltas;
  reader.Feed(text, &deltas);
  if (!reader.complete()) return std::nullopt;
  ToolAnswer a;
  if (reader.answer() == ToolAnswerStream::Answer::kResponse) {
    for (const ToolAnswerStream::Delta& d : deltas) a.content += d.text;
    return a;
  }
  if (reader.answer() != ToolAnswerStream::Answer::kCalls || reader.calls() == 0) {
    return std::nullopt;
  }
  // Every call must have its name.
  if (reader.named_calls() != reader.calls()) return std::nullopt;
  a.tool_calls = json::array();
  std::vector<std::string> args(static_cast<size_t>(reader.calls()));
  for (const ToolAnswerStream::Delta& d : deltas) {
    if (d.kind == ToolAnswerStream::Delta::Kind::kCallStart) {
      a.tool_calls.push_back(NewToolCall(d.text));
    } else if (d.kind == ToolAnswerStream::Delta::Kind::kArguments) {
      args[static_cast<size_t>(d.index)] += d.text;
    }
  }
  for (size_t i = 0; i < args.size(); ++i) {
    a.tool_calls[i]["function"]["arguments"] = args[i].empty() ? "{}" : args[i];
  }
  return a;
}

json NewToolCall(const std::string& name) {
  return {{"id", NewResponseId("call_")},
          {"type", "function"},
          {"function", {{"name", name}, {"arguments", ""}}}};
}

}  // namespace kinfer
