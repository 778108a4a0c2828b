// Human-readable summary of a GGUF file (the CLI `info` command).
#pragma once

#include <string>

#include "gguf/gguf.h"

namespace uf::gguf {

// Header line, metadata (one key per line), a tensor table (name, type, shape, bytes) and the
// bytes per tensor type. full = false shows 8 items of each array and the first 160 bytes of each
// string; full = true shows every item and every byte.
std::string DescribeGguf(const GgufFile& file, bool full);

}  // namespace uf::gguf
