#include "runtime/server/chat_prompt.h"

#include "runtime/tokenizer/tokenizer.h"

namespace kinfer {

StatusOr<ChatPrompt> ChatPrompt::FromTokenizer(const Tokenizer& tok) {
  ChatPrompt p;
  std::optional<std::string> source = tok.chat_template();
  if (!source.has_value() || source->empty()) return p;
  std::string bos = tok.bos_id() >= 0 ? tok.TokenToPiece(tok.bos_id(), true) : std::string();
  std::string eos = tok.eos_id() >= 0 ? tok.TokenToPiece(tok.eos_id(), true) : std::string();
  StatusOr<ChatTemplate> t = ChatTemplate::Parse(*source, bos, eos);
  if (!t.ok()) return t.status().WithContext("tokenizer.chat_template");
  p.template_ = std::move(t).value();
  return p;
}

StatusOr<std::string> ChatPrompt::Render(const std::vector<ChatTurn>& turns) const {
  if (!template_.has_value()) {
    // ChatML, as llama.cpp falls back to.
    std::string out;
    for (const ChatTurn& t : turns) {
      out += "<|im_start|>";
      out += t.role == "developer" ? "system" : t.role;
      out += "\n";
      out += t.content;
      out += "<|im_end|>\n";
    }
    out += "<|im_start|>assistant\n";
    return out;
  }
  std::vector<ChatMessage> messages;
  messages.reserve(turns.size());
  for (const ChatTurn& t : turns) {
    messages.push_back(ChatMessage{t.role == "developer" ? "system" : t.role, t.content});
  }
  return template_->Render(messages, /*add_generation_prompt=*/true);
}

}  // namespace kinfer
