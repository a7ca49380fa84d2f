// libFuzzer target: a request's JSON Schema (untrusted, compiled on the HTTP thread) and a text
// fed through its grammar (what a model writes). Input: the schema's JSON, a NUL byte, the text.
// Checks that compiling never crashes, hangs or blows up, that the recognizer stays within its
// stack bound and never accepts text it then calls dead, and that the constraint's trie walk
// masks exactly as feeding every token of a small vocabulary would.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "runtime/sample/grammar.h"
#include "runtime/sample/json_schema_grammar.h"
#include "runtime/sample/token_constraint.h"

namespace {

std::shared_ptr<const kinfer::ConstraintVocab> Vocab() {
  static const auto v = [] {
    auto vocab = std::make_shared<kinfer::ConstraintVocab>();
    vocab->bytes.push_back("");
    vocab->kind.push_back(kinfer::ConstraintVocab::kEndOfGeneration);
    for (const char* p : {"{", "}", "[", "]", "\"", ":", ",", " ", "\n", "a", "ab", "\"a\"", "1",
                          "-", ".", "e", "true", "null", "\\", "\\u", "00", "\xC3", "\xA9",
                          "\xC3\xA9", "\":", "\",\"", "{\"", "\"}", "x y"}) {
      vocab->bytes.push_back(p);
      vocab->kind.push_back(kinfer::ConstraintVocab::kText);
    }
    vocab->Index();
    return vocab;
  }();
  return v;
}

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string_view schema_text = in.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos ? "" : in.substr(nul + 1);
  const nlohmann::ordered_json schema =
      nlohmann::ordered_json::parse(schema_text.begin(), schema_text.end(), nullptr,
                                    /*allow_exceptions=*/false);
  if (schema.is_discarded()) return 0;
  auto g = kinfer::JsonSchemaGrammar(schema);
  if (!g.ok()) return 0;
  Check((*g)->num_elements() <= kinfer::kMaxSchemaGrammarElements + 64);
  kinfer::GrammarRecognizer r(*g);
  kinfer::GrammarConstraint c(Vocab(), *g);
  size_t fed = 0;
  for (char ch : text) {
    if (fed++ >= 512) break;
    if (fed % 64 == 1) {
      // The trie walk against feeding each token (as JsonSchemaGrammar's tests, on fuzzed states).
      std::vector<float> logits(Vocab()->bytes.size(), 0.0f);
      c.Mask(logits);
      bool any_text = false;
      for (size_t id = 1; id < logits.size(); ++id) {
        const bool ok = c.state().Accepts(Vocab()->bytes[id]);
        any_text |= ok;
        Check(ok == !std::isinf(logits[id]));
      }
      Check(!std::isinf(logits[0]) == (c.complete() || !any_text));
    }
    if (!r.Feed(static_cast<uint8_t>(ch))) break;
    Check(!r.dead());
    Check(r.num_stacks() <= kinfer::GrammarRecognizer::kMaxStacks);
    // Keep the constraint's state in step: feed the same byte as a one-byte "token" when the
    // vocabulary has it.
    for (size_t id = 1; id < Vocab()->bytes.size(); ++id) {
      if (Vocab()->bytes[id] == std::string(1, ch)) {
        c.Accept(static_cast<int32_t>(id));
        break;
      }
    }
  }
  return 0;
}
