#include "operator/api/units.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>

namespace kinfer::api {

namespace {

struct Unit {
  std::string_view name;
  long double factor;
};

constexpr Unit kDurationUnits[] = {{"", 1e9L},  {"ns", 1.0L}, {"us", 1e3L},  {"ms", 1e6L},
                                   {"s", 1e9L}, {"m", 60e9L}, {"h", 3600e9L}};
constexpr Unit kByteUnits[] = {{"", 1.0L},
                               {"B", 1.0L},
                               {"KB", 1e3L},
                               {"MB", 1e6L},
                               {"GB", 1e9L},
                               {"TB", 1e12L},
                               {"KiB", 1024.0L},
                               {"MiB", 1048576.0L},
                               {"GiB", 1073741824.0L},
                               {"TiB", 1099511627776.0L}};
// Kubernetes quantity suffixes (resource.Quantity): binary SI, decimal SI.
constexpr Unit kQuantitySuffixes[] = {{"", 1.0L},
                                      {"n", 1e-9L},
                                      {"u", 1e-6L},
                                      {"m", 1e-3L},
                                      {"k", 1e3L},
                                      {"M", 1e6L},
                                      {"G", 1e9L},
                                      {"T", 1e12L},
                                      {"P", 1e15L},
                                      {"E", 1e18L},
                                      {"Ki", 1024.0L},
                                      {"Mi", 1048576.0L},
                                      {"Gi", 1073741824.0L},
                                      {"Ti", 1099511627776.0L},
                                      {"Pi", 1125899906842624.0L},
                                      {"Ei", 1152921504606846976.0L}};

template <size_t N>
const Unit* FindUnit(const Unit (&units)[N], std::string_view name) {
  for (const Unit& u : units) {
    if (u.name == name) return &u;
  }
  return nullptr;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

StatusOr<std::chrono::nanoseconds> ParseDurationText(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return InvalidArgument("bad duration '" + std::string(text) + "': " + std::string(why));
  };
  double value = 0;
  const char* end = text.data() + text.size();
  auto [unit_begin, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || !(IsDigit(text[0]) || text[0] == '.')) {
    return bad("expected a number and a unit, such as 250ms, 30s or 2m");
  }
  const Unit* unit = FindUnit(kDurationUnits, std::string_view(unit_begin, end - unit_begin));
  if (!unit) return bad("unknown unit (use ns, us, ms, s, m, h, or none for seconds)");
  if (!std::isfinite(value)) return bad("must be finite");
  const long double ns = static_cast<long double>(value) * unit->factor;
  if (ns >= 9.2e18L) return bad("too large");
  return std::chrono::nanoseconds(std::llround(static_cast<double>(ns)));
}

StatusOr<uint64_t> ParseByteSizeText(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return InvalidArgument("bad byte size '" + std::string(text) + "': " + std::string(why));
  };
  size_t digits = 0;
  while (digits < text.size() && IsDigit(text[digits])) ++digits;
  if (digits == 0) return bad("expected an integer with an optional unit, such as 64MiB");
  uint64_t count = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + digits, count);
  if (ec != std::errc() || ptr != text.data() + digits) return bad("too large");
  const Unit* unit = FindUnit(kByteUnits, text.substr(digits));
  if (!unit) return bad("unknown unit (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)");
  const auto multiplier = static_cast<uint64_t>(unit->factor);
  if (count > UINT64_MAX / multiplier) return bad("too large");
  return count * multiplier;
}

StatusOr<long double> ParseQuantity(std::string_view text) {
  auto bad = [&]() {
    return InvalidArgument("bad quantity '" + std::string(text) +
                           "': expected a Kubernetes quantity such as 4, 500m or 16Gi");
  };
  size_t i = 0;
  bool negative = false;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) negative = text[i++] == '-';
  const size_t number_begin = i;
  size_t int_digits = 0, frac_digits = 0;
  while (i < text.size() && IsDigit(text[i])) ++i, ++int_digits;
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && IsDigit(text[i])) ++i, ++frac_digits;
  }
  if (int_digits + frac_digits == 0) return bad();
  const std::string number(text.substr(number_begin, i - number_begin));
  long double value = std::strtold(number.c_str(), nullptr);
  const std::string_view suffix = text.substr(i);
  if (!suffix.empty() && (suffix[0] == 'e' || suffix[0] == 'E') && suffix.size() > 1) {
    // Decimal exponent: e3, E-2, e+6.
    size_t j = 1;
    bool exp_negative = false;
    if (suffix[j] == '+' || suffix[j] == '-') exp_negative = suffix[j++] == '-';
    if (j >= suffix.size()) return bad();
    int exponent = 0;
    for (; j < suffix.size(); ++j) {
      if (!IsDigit(suffix[j]) || exponent > 100) return bad();
      exponent = exponent * 10 + (suffix[j] - '0');
    }
    value *= std::pow(10.0L, exp_negative ? -exponent : exponent);
  } else {
    const Unit* unit = FindUnit(kQuantitySuffixes, suffix);
    if (!unit) return bad();
    value *= unit->factor;
  }
  return negative ? -value : value;
}

bool QuantitiesEqual(std::string_view a, std::string_view b) {
  if (a == b) return true;
  auto qa = ParseQuantity(a);
  auto qb = ParseQuantity(b);
  if (!qa.ok() || !qb.ok()) return false;
  const long double scale = std::max(std::fabs(*qa), std::fabs(*qb));
  return std::fabs(*qa - *qb) <= scale * 1e-12L;
}

int64_t CeilSeconds(std::chrono::nanoseconds d) {
  if (d.count() <= 0) return 0;
  return (d.count() + 999'999'999) / 1'000'000'000;
}

std::string SecondsText(int64_t seconds) { return std::to_string(seconds) + "s"; }

}  // namespace kinfer::api
