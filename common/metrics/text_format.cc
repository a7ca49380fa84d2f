#include "common/metrics/text_format.h"

#include <charconv>
#include <cmath>

#include "common/metrics/metrics.h"

namespace kinfer::metrics {

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);  // shortest round-trip form
  return std::string(buf, res.ptr);
}

namespace {

// The text format's escapes: a backslash and a line feed always, a double quote in label values
// only (HELP text keeps its quotes).
std::string Escape(std::string_view v, bool quote) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string EscapeLabelValue(std::string_view v) { return Escape(v, true); }

std::string EscapeHelp(std::string_view v) { return Escape(v, false); }

namespace {

// Appends `{a="x",b="y"[,le="..."]}` (nothing when there are no labels at all).
void AppendLabels(std::string* out, const std::vector<std::string>& names,
                  const std::vector<std::string>& values, const std::string* le) {
  if (names.empty() && le == nullptr) return;
  out->push_back('{');
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out->push_back(',');
    *out += names[i];
    *out += "=\"";
    *out += EscapeLabelValue(values[i]);
    out->push_back('"');
  }
  if (le != nullptr) {
    if (!names.empty()) out->push_back(',');
    *out += "le=\"";
    *out += *le;
    out->push_back('"');
  }
  out->push_back('}');
}

void AppendLine(std::string* out, std::string_view name, std::string_view suffix,
                const std::vector<std::string>& names, const std::vector<std::string>& values,
                const std::string* le, const std::string& value) {
  *out += name;
  *out += suffix;
  AppendLabels(out, names, values, le);
  out->push_back(' ');
  *out += value;
  out->push_back('\n');
}

}  // namespace

void AppendHeader(std::string* out, const FamilyBase& family) {
  *out += "# HELP ";
  *out += family.name();
  out->push_back(' ');
  *out += EscapeHelp(family.help());
  *out += "\n# TYPE ";
  *out += family.name();
  out->push_back(' ');
  *out += MetricTypeName(family.type());
  out->push_back('\n');
}

void AppendSamples(std::string* out, const std::string& name,
                   const std::vector<std::string>& label_names,
                   const std::vector<std::string>& label_values, const Counter& c) {
  AppendLine(out, name, "", label_names, label_values, nullptr, FormatValue(c.Value()));
}

void AppendSamples(std::string* out, const std::string& name,
                   const std::vector<std::string>& label_names,
                   const std::vector<std::string>& label_values, const Gauge& g) {
  AppendLine(out, name, "", label_names, label_values, nullptr, FormatValue(g.Value()));
}

void AppendSamples(std::string* out, const std::string& name,
                   const std::vector<std::string>& label_names,
                   const std::vector<std::string>& label_values, const Histogram& h) {
  Histogram::Snapshot s = h.Snap();
  for (size_t i = 0; i < s.upper_bounds.size(); ++i) {
    std::string le = FormatValue(s.upper_bounds[i]);
    AppendLine(out, name, "_bucket", label_names, label_values, &le,
               std::to_string(s.cumulative[i]));
  }
  std::string inf = "+Inf";
  AppendLine(out, name, "_bucket", label_names, label_values, &inf, std::to_string(s.count));
  AppendLine(out, name, "_sum", label_names, label_values, nullptr, FormatValue(s.sum));
  AppendLine(out, name, "_count", label_names, label_values, nullptr, std::to_string(s.count));
}

}  // namespace kinfer::metrics
