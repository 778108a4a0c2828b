// UTF-8 helpers shared by the tokenizers and the streaming decoder. Everything here accepts
// arbitrary bytes: invalid input is classified, never trusted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace uf::tokenizer {

enum class Utf8Kind {
  kValid,       // a well-formed sequence (RFC 3629: no overlongs, surrogates or > U+10FFFF)
  kIncomplete,  // a valid prefix of a sequence that the end of the buffer cuts short
  kInvalid,     // not the start of any well-formed sequence
};

struct Utf8Scan {
  Utf8Kind kind;
  // kValid: the sequence length (1..4). kIncomplete: the bytes left in the buffer.
  // kInvalid: the maximal invalid subpart (1..3 bytes), as Unicode's U+FFFD policy counts it.
  size_t length;
  uint32_t code_point;  // meaningful for kValid only
};

// Classifies the bytes starting at text[0]; text must not be empty.
Utf8Scan ScanUtf8(std::string_view text);

void AppendUtf8(uint32_t code_point, std::string* out);

// GPT-2's reversible byte <-> printable-code-point mapping used by byte-level BPE vocabularies:
// printable Latin-1 bytes map to themselves, the other 68 bytes to U+0100.. in byte order.
// Returns the UTF-8 form (1 or 2 bytes) of the code point that stands for `byte`.
std::string_view ByteToUnicode(uint8_t byte);
// Inverse: the byte that code point `cp` stands for, or -1 if cp is not in the mapping.
int UnicodeToByte(uint32_t cp);

}  // namespace uf::tokenizer
