// ChatTemplate: renders a model's chat template (tokenizer.chat_template, a Jinja template)
// into the prompt text, byte-identical to llama-cpp-python's Jinja2ChatFormatter (jinja2 with
// trim_blocks and lstrip_blocks on, autoescape off) for the supported Jinja subset (see
// jinja_parser.h). The template sees: messages (list of {role, content}), add_generation_prompt,
// bos_token, eos_token, raise_exception(msg), namespace(...), range(...), strftime_now(fmt), and
// functions / function_call / tools / tool_choice set to none, as llama-cpp-python passes them.
//
// Thread safety: immutable after Parse; Render may be called concurrently. Copies share the
// parsed template.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace kinfer {

namespace jinja {
struct Node;
}  // namespace jinja

struct ChatMessage {
  std::string role;
  std::string content;
};

struct ChatTemplateOptions {
  bool trim_blocks = true;    // llama-cpp-python and transformers use true; jinja2's default is false
  bool lstrip_blocks = true;
};

class ChatTemplate {
 public:
  // Parses the Jinja template. INVALID_ARGUMENT "chat template line L, column C: ..." when it is
  // malformed or uses something unsupported (a tag, filter or test outside the subset).
  static StatusOr<ChatTemplate> Parse(std::string source, std::string bos_token, std::string eos_token);
  static StatusOr<ChatTemplate> Parse(std::string source, std::string bos_token, std::string eos_token,
                                      const ChatTemplateOptions& options);

  // Renders the conversation. INVALID_ARGUMENT with the template's message when it calls
  // raise_exception (e.g. roles not alternating), or "line L, column C: ..." on a type error.
  StatusOr<std::string> Render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

  const std::string& source() const { return source_; }

 private:
  ChatTemplate() = default;

  std::string source_;
  std::string bos_token_;
  std::string eos_token_;
  std::shared_ptr<const std::vector<std::unique_ptr<jinja::Node>>> nodes_;
};

}  // namespace kinfer
