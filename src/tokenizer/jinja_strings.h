// Python str semantics on UTF-8 strings for the template interpreter: case mapping (ASCII,
// Latin-1, Latin Extended-A, Greek, Cyrillic; other scripts pass through unchanged), whitespace
// as str.strip()/str.split() define it, and index conversions between bytes and code points.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace uf::jinja {

bool IsPySpace(char32_t c);
char32_t LowerCodePoint(char32_t c);
char32_t UpperCodePoint(char32_t c);
bool IsCased(char32_t c);
bool IsLowerCodePoint(char32_t c);
bool IsUpperCodePoint(char32_t c);
bool IsAlphaCodePoint(char32_t c);
bool IsDigitCodePoint(char32_t c);

std::string PyLower(std::string_view s);
std::string PyUpper(std::string_view s);
// str.capitalize(): first code point upper, the rest lower.
std::string PyCapitalize(std::string_view s);
// str.title(): upper after an uncased character, lower after a cased one.
std::string PyTitle(std::string_view s);

// s.find(needle, pos) / s.rfind(needle) in time linear in the sizes (glibc's memmem):
// std::string::find is O(len(s) * len(needle)) on inputs like 'a' * n searched for 'a' * m + 'b',
// which would let a template spin for minutes inside one call.
size_t FindBytes(std::string_view s, std::string_view needle, size_t pos = 0);
size_t RFindBytes(std::string_view s, std::string_view needle);

// str.strip / lstrip / rstrip; `chars` null strips whitespace.
std::string PyStrip(std::string_view s, const std::string* chars, bool left, bool right);
// str.split / str.rsplit; `sep` null splits on whitespace runs. maxsplit < 0: no limit.
// `sep` must not be empty (callers report Python's ValueError).
std::vector<std::string> PySplit(std::string_view s, const std::string* sep, int64_t maxsplit);
std::vector<std::string> PyRSplit(std::string_view s, const std::string* sep, int64_t maxsplit);
// str.splitlines() without keepends.
std::vector<std::string> PySplitLines(std::string_view s);
// str.replace; count < 0 replaces all. Fails (returns nullopt) past max_bytes.
std::optional<std::string> PyReplace(std::string_view s, std::string_view old,
                                     std::string_view repl, int64_t count, size_t max_bytes);

// markupsafe.escape(): & < > " ' as entities.
std::string HtmlEscape(std::string_view s);

// Code points in s[0:byte_offset].
int64_t CodePointIndex(std::string_view s, size_t byte_offset);

}  // namespace uf::jinja
