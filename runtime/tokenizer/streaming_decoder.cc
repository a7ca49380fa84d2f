#include "runtime/tokenizer/streaming_decoder.h"

#include "runtime/tokenizer/unicode.h"

namespace kinfer {

StreamingDecoder::StreamingDecoder(const Tokenizer& tok, bool special) : tok_(tok), special_(special) {}

std::string StreamingDecoder::Push(int32_t id) {
  pending_ += tok_.TokenToPiece(id, special_);
  std::string out;
  std::string_view rest(pending_);
  while (!rest.empty()) {
    const unicode::Utf8Scan scan = unicode::ScanUtf8(rest);
    out.append(rest.substr(0, scan.valid_len));
    if (scan.invalid_len == 0) {
      rest.remove_prefix(scan.valid_len);  // what remains is an incomplete sequence, or nothing
      break;
    }
    out.append("\xEF\xBF\xBD");
    rest.remove_prefix(scan.valid_len + scan.invalid_len);
  }
  pending_ = std::string(rest);
  return out;
}

std::string StreamingDecoder::Flush() {
  std::string out = unicode::SanitizeUtf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace kinfer
