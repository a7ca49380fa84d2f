#include "runtime/tokenizer/chat_template.h"

#include <utility>

#include "runtime/tokenizer/jinja_eval.h"
#include "runtime/tokenizer/jinja_lexer.h"
#include "runtime/tokenizer/jinja_parser.h"

namespace kinfer {

StatusOr<ChatTemplate> ChatTemplate::Parse(std::string source, std::string bos_token, std::string eos_token) {
  return Parse(std::move(source), std::move(bos_token), std::move(eos_token), ChatTemplateOptions{});
}

StatusOr<ChatTemplate> ChatTemplate::Parse(std::string source, std::string bos_token, std::string eos_token,
                                           const ChatTemplateOptions& options) {
  jinja::LexOptions lex;
  lex.trim_blocks = options.trim_blocks;
  lex.lstrip_blocks = options.lstrip_blocks;
  KINFER_ASSIGN_OR_RETURN(std::vector<jinja::Token> tokens, jinja::Lex(source, lex));
  KINFER_ASSIGN_OR_RETURN(jinja::NodeList nodes, jinja::Parse(tokens));
  ChatTemplate t;
  t.source_ = std::move(source);
  t.bos_token_ = std::move(bos_token);
  t.eos_token_ = std::move(eos_token);
  t.nodes_ = std::make_shared<const jinja::NodeList>(std::move(nodes));
  return t;
}

StatusOr<std::string> ChatTemplate::Render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  using jinja::Value;
  jinja::ValueList list;
  list.reserve(messages.size());
  for (const ChatMessage& m : messages) {
    list.push_back(Value::Dict({{"role", Value::String(m.role)}, {"content", Value::String(m.content)}}));
  }
  const jinja::ValueDict globals = {
      {"messages", Value::List(std::move(list))},
      {"add_generation_prompt", Value::Bool(add_generation_prompt)},
      {"bos_token", Value::String(bos_token_)},
      {"eos_token", Value::String(eos_token_)},
      {"functions", Value::None()},
      {"function_call", Value::None()},
      {"tools", Value::None()},
      {"tool_choice", Value::None()},
      {"strftime_now", Value::Function("strftime_now")},
  };
  return jinja::Render(*nodes_, globals);
}

}  // namespace kinfer
