// ChatTemplate against jinja2 renders recorded by scripts/record_tokenizer_fixtures.py.
#include "runtime/tokenizer/chat_template.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/runtime/test_model_path.h"

namespace kinfer {
namespace {

const char* const kTemplateFixtures[] = {"smollm2", "chatml", "llama3_style", "gemma_style", "features"};

nlohmann::json LoadJson(const std::string& rel) {
  std::ifstream in(testing::SourcePath(rel));
  EXPECT_TRUE(in.good()) << rel;
  return in.good() ? nlohmann::json::parse(in) : nlohmann::json::object();
}

class ChatTemplateFixtureTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ChatTemplateFixtureTest, RendersByteIdenticalToJinja2) {
  const nlohmann::json j = LoadJson(std::string("tests/fixtures/chat_template/") + GetParam() + ".json");
  ASSERT_TRUE(j.contains("cases"));
  auto tmpl = ChatTemplate::Parse(j["template"].get<std::string>(), j["bos_token"].get<std::string>(),
                                  j["eos_token"].get<std::string>());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().ToString();
  int matched = 0;
  for (const auto& c : j["cases"]) {
    std::vector<ChatMessage> messages;
    for (const auto& m : c["messages"]) messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    auto out = tmpl->Render(messages, c["add_generation_prompt"].get<bool>());
    ASSERT_TRUE(out.ok()) << c["name"] << ": " << out.status().ToString();
    EXPECT_EQ(*out, c["expected"].get<std::string>()) << c["name"];
    matched += *out == c["expected"].get<std::string>();
  }
  std::printf("%s: %d/%zu renders match jinja2\n", GetParam(), matched, j["cases"].size());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ChatTemplateFixtureTest, ::testing::ValuesIn(kTemplateFixtures));

std::string RenderOrDie(const std::string& src, const std::vector<ChatMessage>& messages = {}, bool gen = false) {
  auto t = ChatTemplate::Parse(src, "<s>", "</s>");
  if (!t.ok()) return "PARSE ERROR: " + t.status().ToString();
  auto out = t->Render(messages, gen);
  return out.ok() ? *out : "RENDER ERROR: " + out.status().ToString();
}

TEST(ChatTemplateTest, UnsupportedTagFailsAtParseWithPosition) {
  auto t = ChatTemplate::Parse("hello\n{% macro m() %}x{% endmacro %}", "", "");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("line 2"), std::string::npos) << t.status().message();
  EXPECT_NE(t.status().message().find("macro"), std::string::npos) << t.status().message();
}

TEST(ChatTemplateTest, UnsupportedFilterFailsAtParse) {
  auto t = ChatTemplate::Parse("{{ messages | selectattr('role') }}", "", "");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("selectattr"), std::string::npos) << t.status().message();
}

TEST(ChatTemplateTest, MalformedTemplatesFailAtParse) {
  for (const char* src : {"{% if x %}never closed", "{{ 'unterminated }}", "{{ x ", "{# comment", "{% endfor %}",
                          "{{ a b }}", "{% for in xs %}{% endfor %}"}) {
    auto t = ChatTemplate::Parse(src, "", "");
    EXPECT_FALSE(t.ok()) << src;
    if (!t.ok()) {
      EXPECT_NE(t.status().message().find("line 1"), std::string::npos) << t.status().message();
    }
  }
}

TEST(ChatTemplateTest, RaiseExceptionBecomesAnError) {
  auto t = ChatTemplate::Parse("{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}ok",
                               "", "");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto bad = t->Render({{"assistant", "hi"}}, false);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "first must be user");
  auto good = t->Render({{"user", "hi"}}, false);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, "ok");
}

TEST(ChatTemplateTest, UndefinedPrintsEmptyButAttributeOfUndefinedFails) {
  EXPECT_EQ(RenderOrDie("[{{ nothing }}]"), "[]");
  EXPECT_NE(RenderOrDie("{{ nothing.field }}").find("RENDER ERROR"), std::string::npos);
  EXPECT_EQ(RenderOrDie("{{ tools is none }} {{ tools is defined }}"), "True True");
}

TEST(ChatTemplateTest, WhitespaceControlAndTrimBlocks) {
  EXPECT_EQ(RenderOrDie("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(RenderOrDie("{% if true %}\nline\n{% endif %}\n"), "line\n");
  EXPECT_EQ(RenderOrDie("    {% if true %}x{% endif %}"), "x");       // lstrip_blocks
  EXPECT_EQ(RenderOrDie("    {{ 'x' }}"), "    x");                     // not for {{ }}
  EXPECT_EQ(RenderOrDie("{{ 'a' }}\n{{ 'b' }}\n"), "a\nb");            // trailing newline dropped
}

TEST(ChatTemplateTest, ExpressionsFollowPythonSemantics) {
  EXPECT_EQ(RenderOrDie("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 / 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 'ab' * 2 }}"),
            "3 -4 3.5 2 1024 abab");
  EXPECT_EQ(RenderOrDie("{{ [1, 'a', 2.50, none, true] }} {{ {'k': [1]} }} {{ 0.1 + 0.2 }} {{ 1e20 }}"),
            "[1, 'a', 2.5, None, True] {'k': [1]} 0.30000000000000004 1e+20");
  EXPECT_EQ(RenderOrDie("{{ 'abc'[1:] }} {{ [1, 2, 3][::-1] }} {{ 'x' if false }}|{{ 1 == 1.0 }} {{ 'b' in 'abc' }}"),
            "bc [3, 2, 1] |True True");
  EXPECT_EQ(RenderOrDie("{{ '  hi  ' | trim | upper }} {{ 'A\\tB\\n' | length }} {{ 'a' ~ 1 ~ none }}"),
            "HI 4 a1None");
  EXPECT_EQ(RenderOrDie("{{ '\\u00e9\\x41\\'\"' }}"), "\xC3\xA9" "A'\"");
}

TEST(ChatTemplateTest, NamespaceAndLoopScoping) {
  EXPECT_EQ(RenderOrDie("{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"),
            "3");
  // A plain {% set %} inside a loop lasts one iteration (jinja2 scoping).
  EXPECT_EQ(RenderOrDie("{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + 10 %}{{ x }},{% endfor %}{{ x }}"),
            "111,111,1");
  EXPECT_EQ(RenderOrDie("{% for i in [1, 2, 3, 4] %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}"), "12");
  EXPECT_EQ(RenderOrDie("{% for i in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(RenderOrDie("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"), "a=1;b=2;");
}

TEST(ChatTemplateTest, RendersTheModelsOwnTemplate) {
  KINFER_REQUIRE_MODEL();
  const nlohmann::json j = LoadJson("tests/fixtures/chat_template/smollm2.json");
  auto tmpl = ChatTemplate::Parse(j["template"].get<std::string>(), "<|im_start|>", "<|im_end|>");
  ASSERT_TRUE(tmpl.ok());
  auto out = tmpl->Render({{"user", "Hi"}}, true);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

}  // namespace
}  // namespace kinfer
