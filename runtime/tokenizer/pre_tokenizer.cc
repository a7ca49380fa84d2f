#include "runtime/tokenizer/pre_tokenizer.h"

#include <string>

#include "runtime/tokenizer/unicode.h"

namespace kinfer {
namespace {

using unicode::CodepointFlags;

// One regex of a pre type's list. Each stage maps a piece [begin, end) of code points to a
// sequence of piece lengths.
enum class Stage {
  // "'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
  kGpt2,
  // "\p{N}": every number code point is a piece of its own.
  kEachNumber,
  // "\p{N}+"
  kNumberRuns,
  // "[\p{P}\$\+<=>\^~\|]+"
  kPunctuationRuns,
  // "[0-9][0-9][0-9]"
  kThreeDigits,
};

struct StageList {
  const Stage* stages;
  size_t count;
};

StageList StagesFor(PreTokenizerType type) {
  static constexpr Stage kDefaultStages[] = {Stage::kPunctuationRuns, Stage::kGpt2, Stage::kNumberRuns,
                                             Stage::kThreeDigits};
  static constexpr Stage kGpt2Stages[] = {Stage::kGpt2};
  static constexpr Stage kSmollmStages[] = {Stage::kEachNumber, Stage::kGpt2};
  switch (type) {
    case PreTokenizerType::kDefault:
      return {kDefaultStages, std::size(kDefaultStages)};
    case PreTokenizerType::kGpt2:
      return {kGpt2Stages, std::size(kGpt2Stages)};
    case PreTokenizerType::kSmollm:
    case PreTokenizerType::kStarcoder:
      return {kSmollmStages, std::size(kSmollmStages)};
  }
  return {kGpt2Stages, 1};
}

// llama.cpp runs the non-GPT-2 regexes with std::regex over a "collapsed" copy of the text in
// which every code point >= 128 is one byte standing for its category, and rewrites \p{..} into
// that byte plus the ASCII members of the class. These predicates reproduce that matching.
bool CollapsedIsNumber(uint32_t cp) {
  if (cp < 128) return cp >= '0' && cp <= '9';
  const uint16_t f = CodepointFlags(cp);
  return !(f & unicode::kWhitespace) && (f & unicode::kNumber);
}

bool CollapsedIsPunctuationClass(uint32_t cp) {
  if (cp < 128) {
    // ASCII members of \p{P} in llama.cpp's map: !"#%&'()*,-./:;?@[\]_{} plus the explicit $+<=>^~|
    switch (cp) {
      case '!': case '"': case '#': case '%': case '&': case '\'': case '(': case ')': case '*':
      case ',': case '-': case '.': case '/': case ':': case ';': case '?': case '@': case '[':
      case '\\': case ']': case '_': case '{': case '}':
      case '$': case '+': case '<': case '=': case '>': case '^': case '~': case '|':
        return true;
      default:
        return false;
    }
  }
  const uint16_t f = CodepointFlags(cp);
  return !(f & unicode::kWhitespace) && (f & unicode::kPunctuation);
}

class Splitter {
 public:
  explicit Splitter(const std::vector<uint32_t>& cpts) : cpts_(cpts) {}

  // Splits [begin, end) and appends the piece lengths to `out`.
  void Run(Stage stage, size_t begin, size_t end, std::vector<size_t>* out) const {
    switch (stage) {
      case Stage::kGpt2:
        return SplitGpt2(begin, end, out);
      case Stage::kEachNumber:
        return SplitRuns(begin, end, out, CollapsedIsNumber, /*single=*/true);
      case Stage::kNumberRuns:
        return SplitRuns(begin, end, out, CollapsedIsNumber, /*single=*/false);
      case Stage::kPunctuationRuns:
        return SplitRuns(begin, end, out, CollapsedIsPunctuationClass, /*single=*/false);
      case Stage::kThreeDigits:
        return SplitThreeDigits(begin, end, out);
    }
  }

 private:
  // Matches of `pred` (one code point each when `single`, maximal runs otherwise) become pieces,
  // and so does the text between them (std::regex_iterator semantics as llama.cpp uses them).
  template <typename Pred>
  void SplitRuns(size_t begin, size_t end, std::vector<size_t>* out, Pred pred, bool single) const {
    size_t gap_start = begin;
    size_t pos = begin;
    while (pos < end) {
      if (!pred(cpts_[pos])) {
        ++pos;
        continue;
      }
      size_t match_end = pos + 1;
      if (!single) {
        while (match_end < end && pred(cpts_[match_end])) ++match_end;
      }
      if (pos > gap_start) out->push_back(pos - gap_start);
      out->push_back(match_end - pos);
      pos = gap_start = match_end;
    }
    if (end > gap_start) out->push_back(end - gap_start);
  }

  void SplitThreeDigits(size_t begin, size_t end, std::vector<size_t>* out) const {
    auto digit = [&](size_t i) { return cpts_[i] >= '0' && cpts_[i] <= '9'; };
    size_t gap_start = begin;
    size_t pos = begin;
    while (pos + 3 <= end) {
      if (digit(pos) && digit(pos + 1) && digit(pos + 2)) {
        if (pos > gap_start) out->push_back(pos - gap_start);
        out->push_back(3);
        pos = gap_start = pos + 3;
      } else {
        ++pos;
      }
    }
    if (end > gap_start) out->push_back(end - gap_start);
  }

  // Hand-written form of the GPT-2 regex, mirroring llama.cpp's unicode_regex_split_custom_gpt2
  // (including its treatment of the piece end as the end of text).
  void SplitGpt2(size_t begin, size_t end, std::vector<size_t>* out) const {
    constexpr uint32_t kOutOfRange = 0xFFFFFFFF;
    auto cpt_at = [&](size_t pos) -> uint32_t { return pos < end ? cpts_[pos] : kOutOfRange; };
    auto flags_at = [&](size_t pos) -> uint16_t { return pos < end ? CodepointFlags(cpts_[pos]) : 0; };
    auto is_other = [](uint16_t f) {  // [^\s\p{L}\p{N}], and inside the piece
      return f != 0 && !(f & (unicode::kWhitespace | unicode::kLetter | unicode::kNumber));
    };
    size_t prev_end = begin;
    auto add = [&](size_t piece_end) {
      if (piece_end > prev_end) out->push_back(piece_end - prev_end);
      prev_end = piece_end;
    };

    size_t pos = begin;
    while (pos < end) {
      const uint32_t cpt = cpts_[pos];
      // 's|'t|'re|'ve|'m|'ll|'d
      if (cpt == '\'' && pos + 1 < end) {
        const uint32_t next = cpt_at(pos + 1);
        if (next == 's' || next == 't' || next == 'm' || next == 'd') {
          pos += 2;
          add(pos);
          continue;
        }
        if (pos + 2 < end) {
          const uint32_t next2 = cpt_at(pos + 2);
          if ((next == 'r' && next2 == 'e') || (next == 'v' && next2 == 'e') || (next == 'l' && next2 == 'l')) {
            pos += 3;
            add(pos);
            continue;
          }
        }
      }
      const size_t lead = (cpt == ' ') ? 1 : 0;
      const uint16_t f2 = flags_at(pos + lead);
      // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+"
      if (f2 & unicode::kLetter) {
        pos += lead;
        while (flags_at(pos) & unicode::kLetter) ++pos;
        add(pos);
        continue;
      }
      if (f2 & unicode::kNumber) {
        pos += lead;
        while (flags_at(pos) & unicode::kNumber) ++pos;
        add(pos);
        continue;
      }
      if (is_other(f2)) {
        pos += lead;
        while (is_other(flags_at(pos))) ++pos;
        add(pos);
        continue;
      }
      size_t spaces = 0;
      while (flags_at(pos + spaces) & unicode::kWhitespace) ++spaces;
      // "\s+(?!\S)": leave the last space to prefix the next word.
      if (spaces > 1 && cpt_at(pos + spaces) != kOutOfRange) {
        pos += spaces - 1;
        add(pos);
        continue;
      }
      if (spaces > 0) {
        pos += spaces;
        add(pos);
        continue;
      }
      add(++pos);  // no alternative matches: a piece of one code point
    }
  }

  const std::vector<uint32_t>& cpts_;
};

}  // namespace

StatusOr<PreTokenizerType> ParsePreTokenizerType(std::string_view name) {
  if (name == "default") return PreTokenizerType::kDefault;
  if (name == "gpt-2" || name == "gpt2") return PreTokenizerType::kGpt2;
  if (name == "smollm") return PreTokenizerType::kSmollm;
  if (name == "starcoder" || name == "refact") return PreTokenizerType::kStarcoder;
  return Unimplemented("unsupported tokenizer.ggml.pre '" + std::string(name) +
                       "' (supported: default, gpt-2, smollm, starcoder, refact)");
}

bool PreTokenizerCleansSpaces(PreTokenizerType type) {
  return type != PreTokenizerType::kSmollm;
}

void PreTokenize(PreTokenizerType type, std::string_view text, std::vector<std::string_view>* words) {
  words->clear();
  if (text.empty()) return;
  std::vector<uint32_t> cpts;
  std::vector<uint32_t> byte_offsets;
  unicode::DecodeUtf8(text, &cpts, &byte_offsets);

  const Splitter splitter(cpts);
  std::vector<size_t> pieces = {cpts.size()};
  std::vector<size_t> next;
  const StageList list = StagesFor(type);
  for (size_t s = 0; s < list.count; ++s) {
    next.clear();
    next.reserve(pieces.size() * 2);
    size_t start = 0;
    for (size_t len : pieces) {
      splitter.Run(list.stages[s], start, start + len, &next);
      start += len;
    }
    pieces.swap(next);
  }

  words->reserve(pieces.size());
  size_t start = 0;
  for (size_t len : pieces) {
    const uint32_t b0 = byte_offsets[start];
    const uint32_t b1 = byte_offsets[start + len];
    words->push_back(text.substr(b0, b1 - b0));
    start += len;
  }
}

}  // namespace kinfer
