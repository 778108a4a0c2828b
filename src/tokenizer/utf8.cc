#include "tokenizer/utf8.h"

#include <array>

namespace uf::tokenizer {

Utf8Scan ScanUtf8(std::string_view text) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t b0 = byte(0);
  if (b0 < 0x80) return {Utf8Kind::kValid, 1, b0};

  size_t need;        // total sequence length
  uint8_t lo = 0x80;  // allowed range of the second byte (narrowed to reject overlongs,
  uint8_t hi = 0xBF;  // surrogates and code points past U+10FFFF)
  uint32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {Utf8Kind::kInvalid, 1, 0};
  }

  for (size_t i = 1; i < need; ++i) {
    if (i >= text.size()) return {Utf8Kind::kIncomplete, text.size(), 0};
    const uint8_t b = byte(i);
    const uint8_t min = (i == 1) ? lo : 0x80;
    const uint8_t max = (i == 1) ? hi : 0xBF;
    if (b < min || b > max) return {Utf8Kind::kInvalid, i, 0};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {Utf8Kind::kValid, need, cp};
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

bool IsPrintableLatin1(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct ByteMap {
  std::array<std::string, 256> utf8;   // byte -> UTF-8 of its stand-in code point
  std::array<int16_t, 0x144> to_byte;  // stand-in code point -> byte, -1 if none
  ByteMap() {
    to_byte.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = IsPrintableLatin1(b) ? static_cast<uint32_t>(b) : next++;
      AppendUtf8(cp, &utf8[b]);
      to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteMap& GetByteMap() {
  static const ByteMap map;
  return map;
}

}  // namespace

std::string_view ByteToUnicode(uint8_t byte) { return GetByteMap().utf8[byte]; }

int UnicodeToByte(uint32_t cp) {
  const ByteMap& map = GetByteMap();
  return cp < map.to_byte.size() ? map.to_byte[cp] : -1;
}

}  // namespace uf::tokenizer
