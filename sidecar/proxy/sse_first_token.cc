#include "sidecar/proxy/sse_first_token.h"

#include <nlohmann/json.hpp>

namespace kinfer {
namespace {

bool NonEmptyString(const nlohmann::json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() && !it->get_ref<const std::string&>().empty();
}

bool ChoiceHasToken(const nlohmann::json& choice) {
  if (!choice.is_object()) return false;
  if (auto it = choice.find("finish_reason"); it != choice.end() && !it->is_null()) return true;
  if (NonEmptyString(choice, "text")) return true;
  auto delta = choice.find("delta");
  if (delta == choice.end() || !delta->is_object()) return false;
  if (NonEmptyString(*delta, "content") || NonEmptyString(*delta, "reasoning_content")) return true;
  // `"tool_calls": null` or `[]` (sent by some servers with the role chunk) is not a tool call.
  auto tool_calls = delta->find("tool_calls");
  return tool_calls != delta->end() && !tool_calls->is_null() &&
         !(tool_calls->is_array() && tool_calls->empty());
}

}  // namespace

bool SseFirstTokenDetector::Feed(std::string_view bytes) {
  if (found_) return true;
  pending_.append(bytes);
  for (;;) {
    // An event ends at a blank line: "\n\n" (with optional "\r" before each "\n").
    size_t end = std::string::npos, skip = 0;
    // Resume where the last scan stopped (minus a "\n\r" that may start a blank line), so a
    // stream fed in tiny pieces costs linear time, not quadratic.
    for (size_t i = scanned_ > 2 ? scanned_ - 2 : 0; i + 1 < pending_.size(); ++i) {
      if (pending_[i] != '\n') continue;
      size_t j = i + 1;
      if (j < pending_.size() && pending_[j] == '\r') ++j;
      if (j < pending_.size() && pending_[j] == '\n') {
        end = i;
        skip = j + 1 - i;
        break;
      }
    }
    if (end == std::string::npos) {
      scanned_ = pending_.size();
      break;
    }
    const Event event = Classify(std::string_view(pending_.data(), end));
    if (event != Event::kNothing) {
      Decide(event == Event::kToken);
      return true;
    }
    pending_.erase(0, end + skip);
    scanned_ = 0;
  }
  if (pending_.size() > kMaxPending) Decide(true);
  return found_;
}

void SseFirstTokenDetector::Decide(bool token) {
  found_ = true;
  token_ = token;
  pending_.clear();
  pending_.shrink_to_fit();
}

SseFirstTokenDetector::Event SseFirstTokenDetector::Classify(std::string_view event) const {
  while (!event.empty()) {
    size_t nl = event.find('\n');
    std::string_view line = event.substr(0, nl);
    event = nl == std::string_view::npos ? std::string_view() : event.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.substr(0, 5) != "data:") continue;
    std::string_view data = line.substr(5);
    while (!data.empty() && data.front() == ' ') data.remove_prefix(1);
    if (data == "[DONE]") return Event::kEndWithoutToken;
    nlohmann::json j = nlohmann::json::parse(data.begin(), data.end(), nullptr, false);
    if (!j.is_object()) continue;
    if (j.contains("error")) return Event::kEndWithoutToken;
    // The Responses API's events: its first text or call, or its end.
    if (auto type = j.find("type"); type != j.end() && type->is_string()) {
      const std::string& t = type->get_ref<const std::string&>();
      if (t == "response.output_text.delta" || t == "response.output_item.added" ||
          t == "response.completed" || t == "response.incomplete") {
        return Event::kToken;
      }
      if (t == "response.failed" || t == "error") return Event::kEndWithoutToken;
      continue;
    }
    auto choices = j.find("choices");
    if (choices == j.end() || !choices->is_array()) continue;
    for (const auto& choice : *choices) {
      if (ChoiceHasToken(choice)) return Event::kToken;
    }
  }
  return Event::kNothing;
}

}  // namespace kinfer
