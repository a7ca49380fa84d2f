// ChatPrompt over a tiny in-memory vocab (tests/runtime/tokenizer/tiny_tokenizer.h), whose BOS is
// "<|im_start|>" (id 1) and EOS "<|im_end|>" (id 2), with chat templates set per test.
#include "runtime/server/chat_prompt.h"

#include <algorithm>

#include <gtest/gtest.h>

#include "tests/runtime/tokenizer/tiny_tokenizer.h"

namespace kinfer {
namespace {

constexpr int32_t kBos = 1;
constexpr int32_t kEos = 2;

// Llama-2 / Mistral / Gemma style: the template writes bos_token first, and eos_token after
// each assistant turn.
const char kBosTemplate[] =
    "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content | trim }}"
    "{% if m.role == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}[assistant]{% endif %}";

struct Vocab {
  std::unique_ptr<Tokenizer> tok;
  ChatPrompt prompt;
};

Vocab Make(const std::string& chat_template, bool add_bos, bool add_eos = false) {
  TokenizerData d = testing::TinyTokenizerData();
  d.chat_template = chat_template;
  d.add_bos = add_bos;
  d.add_eos = add_eos;
  auto tok = Tokenizer::Create(std::move(d));
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  auto prompt = ChatPrompt::FromTokenizer(**tok);
  EXPECT_TRUE(prompt.ok()) << prompt.status().ToString();
  return Vocab{std::move(*tok), std::move(*prompt)};
}

// The prompt ids as generation.cc encodes them.
std::vector<int32_t> PromptIds(const Vocab& v, const std::vector<ChatTurn>& turns, bool gen = true,
                               bool cont = false) {
  auto text = v.prompt.Render(turns, gen, cont);
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  return text.ok() ? v.tok->Encode(*text, /*add_special=*/true, /*parse_special=*/true) : std::vector<int32_t>{};
}

TEST(ChatPromptTest, TemplateBosIsNotDoubledWhenTheVocabAddsBos) {
  const Vocab v = Make(kBosTemplate, /*add_bos=*/true);
  auto text = v.prompt.Render({{"user", "hi"}});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "[user]hi[assistant]");
  const std::vector<int32_t> ids = PromptIds(v, {{"user", "hi"}});
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], kBos);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), kBos), 1) << "one BOS, the tokenizer's";
}

TEST(ChatPromptTest, TemplateBosStaysWhenTheVocabDoesNotAddBos) {
  const Vocab v = Make(kBosTemplate, /*add_bos=*/false);
  auto text = v.prompt.Render({{"user", "hi"}});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "<|im_start|>[user]hi[assistant]");
  const std::vector<int32_t> ids = PromptIds(v, {{"user", "hi"}});
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], kBos);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), kBos), 1);
}

TEST(ChatPromptTest, OnlyALeadingBosAndATrailingEosAreDropped) {
  // A template without bos_token first keeps its text; a BOS text elsewhere is the template's.
  const Vocab mid = Make("[x]{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}", true);
  EXPECT_EQ(*mid.prompt.Render({{"user", "hi"}}), "[x]<|im_start|>hi");
  // With add_eos the closing EOS text is the tokenizer's to add; one earlier in the prompt stays.
  const Vocab eos = Make(kBosTemplate, /*add_bos=*/true, /*add_eos=*/true);
  const std::vector<ChatTurn> turns = {{"user", "a"}, {"assistant", "b"}, {"user", "c"}, {"assistant", "d"}};
  EXPECT_EQ(*eos.prompt.Render(turns, false), "[user]a[assistant]b<|im_end|>[user]c[assistant]d");
  const std::vector<int32_t> ids = PromptIds(eos, turns, false);
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids.front(), kBos);
  EXPECT_EQ(ids.back(), kEos);
  EXPECT_NE(ids[ids.size() - 2], kEos) << "one EOS at the end, the tokenizer's";
  EXPECT_EQ(std::count(ids.begin(), ids.end(), kEos), 2);
}

TEST(ChatPromptTest, ContinueFinalMessageCutsAfterTheTrimmedTextWhenTheTemplateTrims) {
  // kBosTemplate trims each turn, as Gemma's and Llama 3's templates do.
  const Vocab v = Make(kBosTemplate, /*add_bos=*/false);
  auto trimmed = v.prompt.Render({{"user", "hi"}, {"assistant", "Sure, here is "}}, false, true);
  ASSERT_TRUE(trimmed.ok()) << trimmed.status().ToString();
  EXPECT_EQ(*trimmed, "<|im_start|>[user]hi[assistant]Sure, here is");
  auto both_sides = v.prompt.Render({{"user", "hi"}, {"assistant", "\n  Sure\t"}}, false, true);
  ASSERT_TRUE(both_sides.ok()) << both_sides.status().ToString();
  EXPECT_EQ(*both_sides, "<|im_start|>[user]hi[assistant]Sure");
  // A template that keeps the text keeps its whitespace in the prompt.
  const Vocab keep = Make("{% for m in messages %}[{{ m.role }}]{{ m.content }}<|im_end|>{% endfor %}", false);
  EXPECT_EQ(*keep.prompt.Render({{"user", "hi"}, {"assistant", "Sure, here is "}}, false, true),
            "[user]hi<|im_end|>[assistant]Sure, here is ");
}

TEST(ChatPromptTest, ContinueFinalMessageFailsWhenTheTemplateDropsTheText) {
  const Vocab v = Make("{% for m in messages %}[{{ m.role }}]{{ m.content[:3] }}{% endfor %}", false);
  auto r = v.prompt.Render({{"user", "hi"}, {"assistant", "Sure, here is"}}, false, true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  auto blank = Make(kBosTemplate, false).prompt.Render({{"user", "hi"}, {"assistant", "  "}}, false, true);
  EXPECT_FALSE(blank.ok()) << "nothing of a blank turn is shown to continue from";
}

TEST(ChatPromptTest, ChatMlFallbackIsUnchanged) {
  const Vocab v = Make("", /*add_bos=*/true);
  EXPECT_TRUE(v.prompt.uses_fallback());
  EXPECT_EQ(*v.prompt.Render({{"user", "hi"}}), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

}  // namespace
}  // namespace kinfer
