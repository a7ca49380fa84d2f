// ChatPrompt: renders OpenAI chat turns into the model's prompt text with the chat template
// stored in the GGUF file (tokenizer.chat_template), or ChatML when the file has none.
//
// Thread safety: immutable after FromTokenizer; Render may be called from any thread.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/server/openai_protocol.h"
#include "runtime/tokenizer/chat_template.h"

namespace kinfer {

class Tokenizer;

class ChatPrompt {
 public:
  // Parses the tokenizer's template. An unparsable template is an error (INVALID_ARGUMENT from
  // the template parser); no template selects the ChatML fallback.
  static StatusOr<ChatPrompt> FromTokenizer(const Tokenizer& tokenizer);

  // The prompt text, ending with the assistant's generation prompt when `add_generation_prompt`.
  // Meant to be encoded with add_special: when the vocab adds BOS (tokenizer.ggml.add_bos_token)
  // a leading bos_token text the template wrote is left out, as is a trailing eos_token text
  // when it adds EOS (as llama.cpp does), so the prompt does not start with two BOS tokens.
  // With `continue_final_message` (REQUIRES: the last turn is the assistant's, with text) it ends
  // with that turn's text instead, unclosed, so the model continues it: the conversation is
  // rendered without a generation prompt and cut after the last occurrence of that text (as
  // vLLM does), or, when the template trims it (`| trim`), after the last occurrence of the text
  // without its leading and trailing whitespace (as transformers does). "developer" turns are
  // given to the template as "system". INVALID_ARGUMENT when the template rejects the
  // conversation (for example roles that do not alternate) or shows the final turn's text
  // neither as it is nor stripped.
  StatusOr<std::string> Render(const std::vector<ChatTurn>& turns, bool add_generation_prompt = true,
                               bool continue_final_message = false) const;

  bool uses_fallback() const { return !template_.has_value(); }

 private:
  std::optional<ChatTemplate> template_;
  std::string added_bos_;  // the BOS text when the tokenizer adds BOS itself, else empty
  std::string added_eos_;  // the EOS text when the tokenizer adds EOS itself, else empty
};

}  // namespace kinfer
