#include "operator/autoscale/prometheus_text.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace kinfer::autoscale {
namespace {

bool IsBlank(char c) { return c == ' ' || c == '\t'; }
bool IsNameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }
bool IsLabelStart(char c) { return IsNameStart(c) && c != ':'; }
bool IsLabelChar(char c) { return IsNameChar(c) && c != ':'; }

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

// A cursor over one line.
class Line {
 public:
  explicit Line(std::string_view s) : s_(s) {}
  bool done() const { return pos_ >= s_.size(); }
  char peek() const { return done() ? '\0' : s_[pos_]; }
  void skip_blanks() {
    while (!done() && IsBlank(s_[pos_])) ++pos_;
  }
  // The next run of non-blank characters (may be empty).
  std::string_view token() {
    size_t start = pos_;
    while (!done() && !IsBlank(s_[pos_])) ++pos_;
    return s_.substr(start, pos_ - start);
  }
  std::string_view rest() const { return done() ? std::string_view() : s_.substr(pos_); }
  std::string_view name(bool label) {
    size_t start = pos_;
    if (done() || !(label ? IsLabelStart(s_[pos_]) : IsNameStart(s_[pos_]))) return {};
    ++pos_;
    while (!done() && (label ? IsLabelChar(s_[pos_]) : IsNameChar(s_[pos_]))) ++pos_;
    return s_.substr(start, pos_ - start);
  }
  bool consume(char c) {
    if (peek() != c || done()) return false;
    ++pos_;
    return true;
  }
  // A quoted label value after its opening quote; false on a bad escape or a missing quote.
  bool quoted(std::string* out, std::string* error) {
    while (!done()) {
      char c = s_[pos_++];
      if (c == '"') return true;
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (done()) break;
      char e = s_[pos_++];
      if (e == '\\' || e == '"') {
        out->push_back(e);
      } else if (e == 'n') {
        out->push_back('\n');
      } else {
        *error = std::string("invalid escape sequence \\") + e + " in label value";
        return false;
      }
    }
    *error = "label value without a closing quote";
    return false;
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;
};

std::string UnescapeHelp(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && (s[i + 1] == '\\' || s[i + 1] == 'n')) {
      out.push_back(s[i + 1] == 'n' ? '\n' : '\\');
      ++i;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

Status LineError(size_t line, std::string what) {
  return InvalidArgument("line " + std::to_string(line) + ": " + what);
}

std::string Shown(std::string_view s) {
  constexpr size_t kMax = 40;
  std::string out(s.substr(0, kMax));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  }
  return "\"" + out + (s.size() > kMax ? "...\"" : "\"");
}

Status ParseComment(Line& line, size_t n, PromPage* page) {
  line.skip_blanks();
  std::string_view keyword = line.token();
  if (keyword != "HELP" && keyword != "TYPE") return Status();  // a plain comment
  line.skip_blanks();
  std::string_view name = line.name(false);
  if (name.empty() || !(line.done() || IsBlank(line.peek()))) {
    return LineError(n, std::string(keyword) + " needs a metric name");
  }
  line.skip_blanks();
  if (keyword == "HELP") {
    page->help[std::string(name)] = UnescapeHelp(line.rest());
    return Status();
  }
  std::string_view type = line.token();
  line.skip_blanks();
  if (!line.done()) return LineError(n, "text after the TYPE");
  if (type != "counter" && type != "gauge" && type != "histogram" && type != "summary" &&
      type != "untyped") {
    return LineError(n, "unknown metric type " + Shown(type));
  }
  if (!page->types.emplace(std::string(name), std::string(type)).second) {
    return LineError(n, "second TYPE line for " + std::string(name));
  }
  return Status();
}

Status ParseSample(Line& line, size_t n, PromPage* page) {
  PromSample sample;
  sample.name = std::string(line.name(false));
  if (sample.name.empty()) return LineError(n, "expected a metric name at " + Shown(line.rest()));
  line.skip_blanks();
  if (line.consume('{')) {
    while (true) {
      line.skip_blanks();
      if (line.consume('}')) break;
      std::string_view label = line.name(true);
      if (label.empty()) return LineError(n, "expected a label name at " + Shown(line.rest()));
      line.skip_blanks();
      if (!line.consume('=')) return LineError(n, "expected '=' after label " + std::string(label));
      line.skip_blanks();
      if (!line.consume('"'))
        return LineError(n, "expected '\"' after " + std::string(label) + "=");
      std::string value, error;
      if (!line.quoted(&value, &error)) return LineError(n, error);
      for (const auto& [existing, unused] : sample.labels) {
        if (existing == label) return LineError(n, "duplicate label " + std::string(label));
      }
      sample.labels.emplace_back(std::string(label), std::move(value));
      line.skip_blanks();
      if (line.consume(',')) continue;
      if (line.consume('}')) break;
      return LineError(n, "expected ',' or '}' at " + Shown(line.rest()));
    }
    line.skip_blanks();
  }
  std::string_view value = line.token();
  if (value.empty()) return LineError(n, "sample " + sample.name + " has no value");
  std::optional<double> v = ParsePromFloat(value);
  if (!v) return LineError(n, "bad sample value " + Shown(value));
  sample.value = *v;
  line.skip_blanks();
  if (!line.done()) {
    std::string_view ts = line.token();
    int64_t ms = 0;
    auto [end, ec] = std::from_chars(ts.data(), ts.data() + ts.size(), ms);
    if (ec != std::errc() || end != ts.data() + ts.size()) {
      return LineError(n, "bad timestamp " + Shown(ts));
    }
    sample.timestamp_ms = ms;
    line.skip_blanks();
    if (!line.done()) return LineError(n, "text after the timestamp: " + Shown(line.rest()));
  }
  page->samples.push_back(std::move(sample));
  return Status();
}

}  // namespace

const std::string* PromSample::Label(std::string_view label) const {
  for (const auto& [name, value] : labels) {
    if (name == label) return &value;
  }
  return nullptr;
}

std::vector<const PromSample*> PromPage::Find(std::string_view name) const {
  std::vector<const PromSample*> out;
  for (const PromSample& s : samples) {
    if (s.name == name) out.push_back(&s);
  }
  return out;
}

std::optional<double> ParsePromFloat(std::string_view text) {
  std::string_view body = text;
  bool negative = false;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    negative = body[0] == '-';
    body.remove_prefix(1);
  }
  if (body.empty()) return std::nullopt;
  if (EqualsIgnoreCase(body, "inf") || EqualsIgnoreCase(body, "infinity")) {
    return negative ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
  }
  if (EqualsIgnoreCase(body, "nan")) return std::numeric_limits<double>::quiet_NaN();
  double v = 0;
  std::chars_format format = std::chars_format::general;
  if (body.size() > 2 && body[0] == '0' && (body[1] == 'x' || body[1] == 'X')) {
    body.remove_prefix(2);
    format = std::chars_format::hex;
  }
  if (body.empty() || body[0] == '+' || body[0] == '-') return std::nullopt;
  auto [end, ec] = std::from_chars(body.data(), body.data() + body.size(), v, format);
  // The whole token must be one number.
  if (ec == std::errc::result_out_of_range && end == body.data() + body.size()) {
    // Out of range ("1e999", "1e-999") saturates to +-Inf or 0; strtod decides which (the text
    // is known to be one well-formed number here).
    std::string copy(text);
    v = std::fabs(std::strtod(copy.c_str(), nullptr));
  } else if (ec != std::errc() || end != body.data() + body.size()) {
    return std::nullopt;
  }
  return negative ? -v : v;
}

StatusOr<PromPage> ParsePrometheusText(std::string_view text) {
  PromPage page;
  size_t n = 0;
  while (!text.empty()) {
    ++n;
    size_t eol = text.find('\n');
    std::string_view raw = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    if (!raw.empty() && raw.back() == '\r') raw.remove_suffix(1);
    Line line(raw);
    line.skip_blanks();
    if (line.done()) continue;
    if (line.consume('#')) {
      KINFER_RETURN_IF_ERROR(ParseComment(line, n, &page));
    } else {
      KINFER_RETURN_IF_ERROR(ParseSample(line, n, &page));
    }
  }
  return page;
}

}  // namespace kinfer::autoscale
