// libFuzzer target: the request and stream translations that read untrusted text on the HTTP
// thread (runtime/server/responses_api.h, tool_answer_stream.h, openai_protocol.h). One input is
// tried four ways:
//   - as a /v1/responses body: translating it never crashes, and a body it accepts gives chat
//     JSON that the chat parser then reads (accepting or refusing, never crashing);
//   - as a chat request body, directly;
//   - as a model's tool-format answer: ToolAnswerStream fed it whole and fed it a byte at a
//     time gives the same content, the same calls and the same arguments;
//   - as a chat SSE event: the Responses stream translator never crashes, and its events are
//     JSON (after the input, [DONE]).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/server/openai_protocol.h"
#include "runtime/server/responses_api.h"
#include "runtime/server/tool_answer_stream.h"

namespace {

using kinfer::ToolAnswerStream;

struct Sum {
  std::string content;
  std::vector<std::string> names, args;
  bool operator==(const Sum&) const = default;
};

Sum Add(const std::vector<ToolAnswerStream::Delta>& deltas) {
  Sum s;
  for (const ToolAnswerStream::Delta& d : deltas) {
    switch (d.kind) {
      case ToolAnswerStream::Delta::Kind::kContent: s.content += d.text; break;
      case ToolAnswerStream::Delta::Kind::kCallStart:
        s.names.push_back(d.text);
        s.args.emplace_back();
        break;
      case ToolAnswerStream::Delta::Kind::kArguments:
        if (d.index < 0 || static_cast<size_t>(d.index) >= s.args.size()) std::abort();
        s.args[static_cast<size_t>(d.index)] += d.text;
        break;
    }
  }
  return s;
}

void CheckEvents(const std::vector<std::string>& events) {
  for (const std::string& e : events) {
    const size_t data = e.find("\ndata: ");
    if (e.rfind("event: ", 0) != 0 || data == std::string::npos) std::abort();
    if (!nlohmann::json::accept(e.substr(data + 7))) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);

  kinfer::ResponsesRequest rr;
  kinfer::ErrorDetail d;
  auto chat = kinfer::ResponsesToChatBody(in, &rr, &d);
  if (chat.ok()) {
    if (!nlohmann::json::accept(*chat)) std::abort();
    kinfer::ErrorDetail d2;
    (void)kinfer::ParseChatRequest(*chat, &d2);
  }
  kinfer::ErrorDetail d3;
  (void)kinfer::ParseChatRequest(in, &d3);

  ToolAnswerStream whole, bytes;
  std::vector<ToolAnswerStream::Delta> a, b;
  whole.Feed(in, &a);
  for (size_t i = 0; i < in.size(); ++i) bytes.Feed(in.substr(i, 1), &b);
  if (!(Add(a) == Add(b)) || whole.answer() != bytes.answer() || whole.calls() != bytes.calls() ||
      whole.complete() != bytes.complete()) {
    std::abort();
  }

  kinfer::ResponsesStreamTranslator t(rr, "resp_fuzz", 1);
  CheckEvents(t.Translate(std::string("data: ").append(in) + "\n\n"));
  CheckEvents(t.Translate("data: [DONE]\n\n"));
  return 0;
}
