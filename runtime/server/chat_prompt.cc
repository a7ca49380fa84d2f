#include "runtime/server/chat_prompt.h"

#include "runtime/tokenizer/jinja_eval.h"
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
  if (tok.add_bos()) p.added_bos_ = bos;
  if (tok.add_eos()) p.added_eos_ = eos;
  return p;
}

StatusOr<std::string> ChatPrompt::Render(const std::vector<ChatTurn>& turns,
                                         bool add_generation_prompt,
                                         bool continue_final_message) const {
  const bool generation_prompt = add_generation_prompt && !continue_final_message;
  std::string out;
  if (!template_.has_value()) {
    // ChatML, as llama.cpp falls back to.
    for (const ChatTurn& t : turns) {
      out += "<|im_start|>";
      out += t.role == "developer" ? "system" : t.role;
      out += "\n";
      out += t.content;
      out += "<|im_end|>\n";
    }
    if (generation_prompt) out += "<|im_start|>assistant\n";
  } else {
    std::vector<ChatMessage> messages;
    messages.reserve(turns.size());
    for (const ChatTurn& t : turns) {
      messages.push_back(ChatMessage{t.role == "developer" ? "system" : t.role, t.content});
    }
    StatusOr<std::string> text = template_->Render(messages, generation_prompt);
    if (!text.ok()) return text.status();
    out = std::move(text).value();
    // Templates that write {{ bos_token }} themselves (Llama 2/3, Mistral, Gemma) would give a
    // second BOS once the tokenizer adds its own; llama.cpp drops the text, and so does this.
    if (!added_bos_.empty() && out.starts_with(added_bos_)) out.erase(0, added_bos_.size());
    if (!added_eos_.empty() && out.ends_with(added_eos_)) out.resize(out.size() - added_eos_.size());
  }
  if (!continue_final_message) return out;
  const std::string& last = turns.back().content;
  size_t at = out.rfind(last);
  size_t shown = last.size();
  if (at == std::string::npos) {
    // Templates that trim turns (Gemma's and Llama 3's `| trim`) show the text without its outer
    // whitespace: continue after what they show, as transformers does ("Sure, here is " ends
    // the prompt with "Sure, here is").
    const std::string stripped = jinja::PyStrip(last, nullptr, /*left=*/true, /*right=*/true);
    at = stripped.empty() ? std::string::npos : out.rfind(stripped);
    shown = stripped.size();
  }
  if (last.empty() || at == std::string::npos) {
    return InvalidArgument(
        "the chat template does not show the final assistant message's text (even without its "
        "outer whitespace), so it cannot be continued");
  }
  out.resize(at + shown);
  return out;
}

}  // namespace kinfer
