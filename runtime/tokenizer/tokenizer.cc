#include "runtime/tokenizer/tokenizer.h"

#include <cstdio>

#include "runtime/tokenizer/special_partition.h"

namespace kinfer {
namespace {

// llama.cpp's llama_decode_text: byte-level decoding of a normal token's text; code points
// outside the byte map are kept visible as "[UNK_BYTE_0x..<text>]".
std::string DecodeByteLevel(const std::string& text) {
  std::string out;
  std::vector<uint32_t> cpts;
  std::vector<uint32_t> offsets;
  unicode::DecodeUtf8(text, &cpts, &offsets);
  for (uint32_t cp : cpts) {
    const int b = unicode::UnicodeToByte(cp);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
      continue;
    }
    std::string utf8;
    unicode::AppendUtf8(cp, &utf8);
    out += "[UNK_BYTE_0x";
    for (char c : utf8) {
      char hex[3];
      std::snprintf(hex, sizeof(hex), "%02x", static_cast<uint8_t>(c));
      out += hex;
    }
    out += text + "]";
  }
  return out;
}

// llama.cpp's clean_spaces passes of llama_detokenize, done in place the same way (the second
// pass blanks the byte after " ' " and later comparisons see that blank).
void CleanSpaces(std::string* text) {
  std::string& t = *text;
  if (t.empty()) return;
  // " ?", " !", " .", " ,": drop the space.
  size_t n = t.size();
  size_t total = 1;
  for (size_t i = 1; i < n; ++i) {
    const char x = t[i];
    if (t[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) --total;
    t[total++] = x;
  }
  // " ' ": drop both spaces.
  n = total;
  total = 1;
  for (size_t i = 1; i < n; ++i) {
    const char x = t[i];
    if (x == '\'' && i + 1 < n && t[i - 1] == ' ' && t[i + 1] == ' ') {
      --total;
      t[++i] = '\0';
    }
    t[total++] = x;
  }
  // " 's", " 'm", " 're", " 've": drop the space.
  n = total;
  total = 1;
  for (size_t i = 1; i < n; ++i) {
    const char x = t[i];
    if (t[i - 1] == ' ' && x == '\'' && i + 1 < n) {
      const char x1 = t[i + 1];
      if (x1 == 's' || x1 == 'm') {
        --total;
      } else if (x1 != 't' && x1 != 'd' && i + 2 < n) {
        const char x2 = t[i + 2];
        if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) --total;
      }
    }
    t[total++] = x;
  }
  t.resize(total);
}

}  // namespace

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && add_bos_ && bos_id_ >= 0) out.push_back(bos_id_);

  std::vector<TextFragment> fragments;
  PartitionSpecialTokens(text, vocab_, special_order_, parse_special, &fragments);
  std::vector<std::string_view> words;
  for (const TextFragment& f : fragments) {
    if (f.token >= 0) {
      out.push_back(f.token);
      continue;
    }
    PreTokenize(pre_, text.substr(f.offset, f.length), &words);
    for (std::string_view w : words) merges_.EncodeWord(w, vocab_, ignore_merges_, &out);
  }

  if (add_special && add_eos_ && eos_id_ >= 0) out.push_back(eos_id_);
  return out;
}

std::string Tokenizer::TokenToPiece(int32_t id, bool special) const {
  if (id < 0 || id >= vocab_.size()) return {};
  if (!special && (vocab_.attr(id) & (kAttrUnknown | kAttrControl))) return {};
  return pieces_[id];
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool special) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_.size()) continue;
    if (!special && (vocab_.attr(id) & (kAttrUnknown | kAttrControl))) continue;
    out += pieces_[id];
  }
  if (clean_spaces_) CleanSpaces(&out);
  return out;
}

bool Tokenizer::IsEndOfGeneration(int32_t id) const {
  return id >= 0 && id < vocab_.size() && is_eog_[id] != 0;
}

bool Tokenizer::IsControl(int32_t id) const {
  return id >= 0 && id < vocab_.size() && (vocab_.attr(id) & kAttrControl) != 0;
}

// Piece cache; declared here so tokenizer_load.cc can build it.
std::string TokenPieceForCache(const std::string& text, uint32_t attr) {
  if (attr & (kAttrUnknown | kAttrControl | kAttrUserDefined)) return text;
  if (attr & kAttrNormal) return DecodeByteLevel(text);
  return {};  // byte, unused and undefined tokens render nothing for BPE vocabs
}

}  // namespace kinfer
