#include "runtime/sample/token_constraint.h"

#include <algorithm>
#include <cmath>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/sample/draw.h"
#include "runtime/sample/sampler.h"

namespace kinfer {
namespace {

// A toy vocabulary: end-of-generation 0, a control token 1, then text pieces.
std::shared_ptr<const ConstraintVocab> Vocab() {
  auto v = std::make_shared<ConstraintVocab>();
  auto add = [&](std::string bytes, uint8_t kind) {
    v->bytes.push_back(std::move(bytes));
    v->kind.push_back(kind);
  };
  add("", ConstraintVocab::kEndOfGeneration);
  add("", ConstraintVocab::kNever);
  for (const char* p : {"{", "}", "{\"",  "\":", "\"", "a",  "b c",   "1",  "0",     ",",  " ", "[",
                        "]", ":", "true", "nul", "l",  "}}", "Hello", "\n", "\":\"", "\"}"}) {
    add(p, ConstraintVocab::kText);
  }
  return v;
}

int32_t IdOf(const ConstraintVocab& v, std::string_view bytes) {
  for (size_t i = 0; i < v.bytes.size(); ++i) {
    if (v.kind[i] == ConstraintVocab::kText && v.bytes[i] == bytes) return static_cast<int32_t>(i);
  }
  return -1;
}

std::vector<std::string> Allowed(const JsonObjectConstraint& c, const ConstraintVocab& v) {
  std::vector<float> logits(v.bytes.size(), 0.0f);
  c.Mask(logits);
  std::vector<std::string> out;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!std::isinf(logits[i]))
      out.push_back(v.kind[i] == ConstraintVocab::kEndOfGeneration ? "<eog>" : v.bytes[i]);
  }
  return out;
}

TEST(JsonObjectConstraintTest, MasksToWhatCanComeNextAndEndsOnlyWhenComplete) {
  auto v = Vocab();
  JsonObjectConstraint c(v);
  EXPECT_EQ(Allowed(c, *v), (std::vector<std::string>{"{", "{\"", " ", "\n"}));
  c.Accept(IdOf(*v, "{\""));
  // Inside a key: any text without a raw control character ("\n"), and not a closing quote
  // followed by anything but a colon ("\"}").
  EXPECT_EQ(Allowed(c, *v),
            (std::vector<std::string>{"{",    "}",   "{\"", "\":", "\"",    "a",    "b c",
                                      "1",    "0",   ",",   " ",   "[",     "]",    ":",
                                      "true", "nul", "l",   "}}",  "Hello", "\":\""}));
  c.Accept(IdOf(*v, "a"));
  c.Accept(IdOf(*v, "\":"));
  c.Accept(IdOf(*v, "1"));
  c.Accept(IdOf(*v, "0"));
  EXPECT_FALSE(c.complete());
  EXPECT_EQ(Allowed(c, *v), (std::vector<std::string>{"}", "1", "0", ",", " ", "\n"}));
  c.Accept(IdOf(*v, "}"));
  EXPECT_TRUE(c.complete());
  EXPECT_EQ(Allowed(c, *v), (std::vector<std::string>{"<eog>"}));
}

TEST(JsonObjectConstraintTest, SampledTextIsAlwaysAValidObject) {
  // Random logits, hot sampling: every run that ends by end-of-generation is one JSON object.
  auto v = Vocab();
  std::mt19937 rng(11);
  std::normal_distribution<float> noise(0.0f, 3.0f);
  int completed = 0;
  for (int run = 0; run < 300; ++run) {
    SamplingParams p;
    p.seed = static_cast<uint64_t>(run);
    p.temperature = 1.5f;
    Sampler s(p, std::make_unique<JsonObjectConstraint>(v));
    EXPECT_FALSE(s.IsPlainDraw());
    std::string text;
    for (int step = 0; step < 200; ++step) {
      std::vector<float> logits(v->bytes.size());
      for (float& l : logits) l = noise(rng);
      const int32_t tok = s.Sample(logits, {}, nullptr);
      ASSERT_NE(v->kind[static_cast<size_t>(tok)], ConstraintVocab::kNever);
      if (v->kind[static_cast<size_t>(tok)] == ConstraintVocab::kEndOfGeneration) {
        ++completed;
        EXPECT_TRUE(nlohmann::json::parse(text).is_object()) << text;
        break;
      }
      text += v->bytes[static_cast<size_t>(tok)];
    }
  }
  EXPECT_GT(completed, 50);
}

TEST(JsonObjectConstraintTest, AnIndexedVocabularyMasksExactlyAsFeedingEveryByte) {
  // The same hot runs through two constraints, one over an indexed vocabulary (plain string
  // tokens answered by a flag) and one feeding every byte: the same mask at every step.
  // (The toy vocabulary and tokens with escapes, UTF-8 and shared prefixes, so that the indexed
  // path's trie walk, its plain-string skipping and its mask cache all have work.)
  auto base = Vocab();
  auto plain = std::make_shared<ConstraintVocab>(*base);
  for (const char* p : {"\\", "\\\"", "\\u00e9", "\\u", "00", "e9", "\xc3\xa9", "caf\xc3\xa9\"",
                        "\t", "\"a", "\"ab", "\"abc\":", "-", "-1.5e", "+", "2]", "false"}) {
    plain->bytes.emplace_back(p);
    plain->kind.push_back(ConstraintVocab::kText);
  }
  auto indexed = std::make_shared<ConstraintVocab>(*plain);
  indexed->Index();
  ASSERT_EQ(indexed->json_plain.size(), indexed->kind.size());
  EXPECT_EQ(indexed->json_plain[static_cast<size_t>(IdOf(*indexed, "b c"))], 1);
  EXPECT_EQ(indexed->json_plain[static_cast<size_t>(IdOf(*indexed, "\":"))], 0);
  EXPECT_EQ(indexed->json_plain[static_cast<size_t>(IdOf(*indexed, "\n"))], 0);
  std::mt19937 rng(5);
  std::normal_distribution<float> noise(0.0f, 3.0f);
  int steps = 0;
  for (int run = 0; run < 100; ++run) {
    JsonObjectConstraint a(plain), b(indexed);
    for (int step = 0; step < 100 && !a.complete(); ++step) {
      std::vector<float> la(plain->bytes.size());
      for (float& l : la) l = noise(rng);
      std::vector<float> lb = la;
      a.Mask(la);
      b.Mask(lb);
      ASSERT_EQ(la, lb) << "run " << run << " step " << step;
      const auto best = std::max_element(la.begin(), la.end()) - la.begin();
      const auto tok = static_cast<int32_t>(best);
      if (plain->kind[static_cast<size_t>(tok)] == ConstraintVocab::kEndOfGeneration) break;
      ++steps;
      a.Accept(tok);
      b.Accept(tok);
    }
  }
  EXPECT_GT(steps, 100);  // the runs do get going
}

TEST(JsonObjectConstraintTest, WithNothingAllowedItEndsInsteadOfDrawingFromNothing) {
  // A vocabulary whose only text is whitespace: once the whitespace bound is reached nothing can
  // follow, and end-of-generation is offered.
  auto v = std::make_shared<ConstraintVocab>();
  v->bytes = {"", std::string(JsonRecognizer::kMaxWhitespaceRun, ' ')};
  v->kind = {ConstraintVocab::kEndOfGeneration, ConstraintVocab::kText};
  JsonObjectConstraint c(v);
  std::vector<float> logits = {0.0f, 0.0f};
  c.Mask(logits);
  EXPECT_TRUE(std::isinf(logits[0]));
  EXPECT_FALSE(std::isinf(logits[1]));
  c.Accept(1);
  logits = {-5.0f, 0.0f};
  c.Mask(logits);
  EXPECT_FALSE(std::isinf(logits[0]));
  EXPECT_TRUE(std::isinf(logits[1]));
}

// The mask as bits (AppendAllowed, what a backend applies where the logits are) is what Mask
// leaves: over a run of states, for JSON mode (indexed and not) and a grammar, with as many ids
// as the vocabulary, more (the padding stays clear) and fewer; appended after what the vector
// held.
TEST(TokenConstraintTest, TheMaskAsBitsIsWhatMaskLeaves) {
  auto plain = std::make_shared<ConstraintVocab>(*Vocab());
  auto indexed = std::make_shared<ConstraintVocab>(*plain);
  indexed->Index();
  GrammarBuilder gb;
  const int32_t items = gb.NewRule();  // root ::= "{" ("a" | "1" | " ")* "}"
  gb.AddAlternative(items, {gb.Range({{'a', 'a'}, {'1', '1'}, {' ', ' '}}), GrammarBuilder::Ref(items)});
  gb.AddAlternative(items, {});
  GrammarBuilder::Sequence root = gb.Literal("{");
  root.push_back(GrammarBuilder::Ref(items));
  gb.AppendLiteral("}", &root);
  auto grammar = gb.Build(gb.Rule({root}));
  const size_t nv = plain->kind.size();
  std::mt19937 rng(9);
  std::normal_distribution<float> noise(0.0f, 3.0f);
  int checked = 0;
  for (int kind = 0; kind < 3; ++kind) {
    std::unique_ptr<TokenConstraint> c;
    if (kind == 0) c = std::make_unique<JsonObjectConstraint>(plain);
    if (kind == 1) c = std::make_unique<JsonObjectConstraint>(indexed);
    if (kind == 2) c = std::make_unique<GrammarConstraint>(indexed, grammar);
    ASSERT_TRUE(c->MasksAsBits());
    ASSERT_EQ(c->fallback().size(), 1u);
    EXPECT_EQ(c->fallback()[0], 0);  // the end-of-generation id
    for (int step = 0; step < 40; ++step) {
      for (size_t n : {nv, nv + 70, nv - 3}) {
        std::vector<uint64_t> bits = {7, 9};
        c->AppendAllowed(n, &bits);
        ASSERT_EQ(bits.size(), 2 + (n + 63) / 64);
        EXPECT_EQ(bits[0], 7u);
        std::vector<float> logits(n, 1.0f);
        c->Mask(logits);
        for (size_t id = 0; id < (n + 63) / 64 * 64; ++id) {
          const bool bit = ((bits[2 + id / 64] >> (id % 64)) & 1u) != 0;
          const bool left = id < n && !std::isinf(logits[id]);
          ASSERT_EQ(bit, left) << "kind " << kind << " step " << step << " n " << n << " id " << id;
          if (id >= nv) {
            ASSERT_FALSE(bit);
          }
        }
        std::vector<float> again(n);
        for (float& l : again) l = noise(rng);
        std::vector<float> want = again;
        c->Mask(want);
        ApplyTokenMask(std::span<const uint64_t>(bits).subspan(2), c->fallback(), again);
        ASSERT_EQ(again, want);
        ++checked;
      }
      // The best allowed token goes on (an end ends the run).
      std::vector<float> l(nv);
      for (float& x : l) x = noise(rng);
      c->Mask(l);
      const auto tok = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
      if (tok == 0) break;
      c->Accept(tok);
    }
  }
  EXPECT_GT(checked, 30);
}

}  // namespace
}  // namespace kinfer
