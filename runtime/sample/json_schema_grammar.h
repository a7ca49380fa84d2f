// The grammar of the JSON texts that a JSON Schema accepts, for OpenAI's response_format
// {"type": "json_schema", "json_schema": {"schema": ...}} (docs/api.md, "Structured outputs").
//
// What a schema may use (the rest of JSON Schema is a clear error, never ignored):
//   type (one or a list): object, array, string, number, integer, boolean, null; OpenAPI's
//     nullable: true; no type: any JSON value (or what properties / items imply)
//   object: properties (generated in the schema's order; those not in `required` may be left
//     out), required, additionalProperties (false, true or a schema; unset means false where
//     `properties` is given, as in OpenAI's strict mode, and any properties where it is not)
//   array: items, prefixItems (tuples), minItems, maxItems
//   string: minLength, maxLength (in code points), pattern (regex_grammar.h's syntax; unanchored
//     unless it starts with ^ or ends with $, as JSON Schema's); enum, const (any JSON values, as
//     written by a compact serializer); anyOf and oneOf (as anyOf); allOf of one schema; $ref to a
//     JSON pointer inside the schema ("#", "#/$defs/Name", "#/definitions/Name"), recursion
//     included
// Annotations are ignored: title, description, default, examples, format (an annotation unless a
// validator opts in, per JSON Schema 2020-12), $schema, $id, $comment, ...
//   integer: minimum, maximum, exclusiveMinimum, exclusiveMaximum (exactly the integers in range)
// Refused (INVALID_ARGUMENT naming the keyword and where): patternProperties, the bounds on
// numbers and untyped schemas, multipleOf, not, if/then/else, dependentRequired,
// dependentSchemas, propertyNames, contains, uniqueItems: true, minProperties, maxProperties,
// unevaluatedProperties, unevaluatedItems, $dynamicRef, remote $refs, allOf of several schemas.
//
// The text is the value with optional whitespace before it and between tokens (one space, or a
// newline and at most kSchemaMaxWhitespaceRun spaces or tabs of indentation, as llama.cpp's JSON
// grammars), and nothing after it. Numbers have at most 16 integer
// digits, 16 fraction digits and 2 exponent digits (a model cannot run on writing digits, and
// every number fits a double).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "runtime/sample/grammar.h"

namespace kinfer {

inline constexpr int kSchemaMaxWhitespaceRun = 20;
// Limits on what one schema may expand to.
inline constexpr size_t kMaxSchemaGrammarElements = 200000;
inline constexpr int kMaxSchemaRepeat = 1000;  // minItems, maxItems, minLength, maxLength

StatusOr<std::shared_ptr<const Grammar>> JsonSchemaGrammar(const nlohmann::ordered_json& schema);

// vLLM's guided_regex: the whole output matches `pattern` (regex_grammar.h), as raw text.
StatusOr<std::shared_ptr<const Grammar>> RegexGrammar(std::string_view pattern);

// Function calling (docs/api.md, "Tools"): the one JSON object a model answers with,
//   {"tool_calls": [{"name": "<a tool's name>", "arguments": <that tool's parameters>}, ...]}
// (one call, or with `parallel` one or more), or, when `may_answer`, {"response": "<text>"} (or,
// given a `response_schema`, {"response": <a JSON value that schema accepts>}: tools beside
// response_format). Keys in that order. Each tool's parameters is a schema document of its own (its
// $refs resolve inside it); an error names the tool's `param` ("tools[2].function.parameters:
// json_schema:
// ...").
struct ToolSchema {
  std::string name;
  const nlohmann::ordered_json* parameters = nullptr;  // REQUIRES: non-null, outlives the call
  std::string param;
};
StatusOr<std::shared_ptr<const Grammar>> ToolCallGrammar(
    const std::vector<ToolSchema>& tools, bool may_answer, bool parallel,
    const ToolSchema* response_schema = nullptr);

}  // namespace kinfer
