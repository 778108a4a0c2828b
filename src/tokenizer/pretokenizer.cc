#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <utility>

#include "base/log.h"
#include "tokenizer/utf8.h"

namespace uf::tokenizer {
namespace {

// Regexes as llama.cpp's llm_tokenizer_bpe lists them (where llama.cpp rewrote a case-insensitive
// group for std::regex, the original is equivalent under PCRE2). Long code point classes are
// spelled with \x{...} so no look-alike character can slip in.
constexpr const char* kGpt2 =
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re";
constexpr const char* kLlama3 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kQwen2 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
// Cased letters (Unicode L&) as DeepSeek's tokenizer.json enumerates them.
constexpr const char* kDeepseekLlmLetters =
    R"re(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})re"
    R"re(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A})re"
    R"re(\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556})re"
    R"re(\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF})re"
    R"re(\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D})re"
    R"re(\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D})re"
    R"re(\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4})re"
    R"re(\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4})re"
    R"re(\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124})re"
    R"re(\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F})re"
    R"re(\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})re"
    R"re(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F})re"
    R"re(\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17})re"
    R"re(\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3})re"
    R"re(\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF})re"
    R"re(\x{1E900}-\x{1E943}]+)re";
constexpr const char* kDeepseekLlmPunct =
    R"re(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)re";
// CJK ideographs, U+0800..U+4E00 and Hangul, as DeepSeek lists them.
constexpr const char* kDeepseekCjk = R"re([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)re";
constexpr const char* kDeepseekV3 =
    R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kGpt4o =
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kTekken =
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kBloom =
    R"re( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+)re";

bool OneOf(std::string_view name, std::initializer_list<std::string_view> names) {
  for (std::string_view n : names) {
    if (name == n) return true;
  }
  return false;
}

}  // namespace

PreTokenizerSpec LookupPreTokenizer(std::string_view name) {
  PreTokenizerSpec spec;
  if (name == "default") {
    spec.regexes = {R"re([\p{P}\$\+<=>\^~\|]+)re", kGpt2, R"re(\p{N}+)re", "[0-9][0-9][0-9]"};
  } else if (OneOf(name, {"gpt-2", "phi-2", "mpt", "olmo", "jais", "jina-es", "jina-de",
                          "jina-v2-es", "jina-v2-de", "jina-v1-en", "jina-v2-code", "roberta-bpe",
                          "gigachat", "exaone4", "trillion", "granite-docling", "a.x-4.0", "mellum",
                          "modern-bert"})) {
    spec.regexes = {kGpt2};
  } else if (OneOf(name, {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                          "midm-2.0", "lfm2"})) {
    spec.regexes = {kLlama3};
    spec.ignore_merges = true;
    spec.add_bos = true;
  } else if (OneOf(name, {"dbrx", "smaug-bpe", "chatglm-bpe", "glm4"})) {
    spec.regexes = {kLlama3};
  } else if (OneOf(name, {"qwen2", "deepseek-r1-qwen", "stablelm2", "hunyuan", "megrez"})) {
    spec.regexes = {kQwen2};
  } else if (name == "deepseek-llm") {
    spec.regexes = {"[\\r\\n]",    kDeepseekLlmLetters, kDeepseekLlmPunct,
                    R"re(\s+$)re", kDeepseekCjk,        R"re(\p{N}+)re"};
  } else if (name == "deepseek-coder") {
    spec.regexes = {"[\\r\\n]", R"re(\s?\p{L}+)re", R"re(\s?\p{P}+)re", kDeepseekCjk,
                    R"re(\p{N})re"};
  } else if (OneOf(name, {"deepseek-v3", "hunyuan-dense"})) {
    spec.regexes = {R"re(\p{N}{1,3})re",
                    R"re([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)re", kDeepseekV3};
  } else if (name == "falcon") {
    spec.regexes = {R"re([\p{P}\$\+<=>\^~\|`]+)re", kGpt2, "[0-9][0-9][0-9]"};
  } else if (OneOf(name, {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone",
                          "minerva-7b"})) {
    spec.regexes = {R"re(\p{N})re", kGpt2};
  } else if (OneOf(name, {"gpt-4o", "llama4"})) {
    spec.regexes = {kGpt4o};
  } else if (name == "tekken") {
    spec.regexes = {kTekken};
    spec.ignore_merges = true;
    spec.add_bos = true;
  } else if (OneOf(name, {"bloom", "poro-chat", "gpt3-finnish"})) {
    spec.regexes = {kBloom};
  } else if (name == "viking") {
    spec.regexes = {kBloom, R"re(\p{N})re"};
  } else {
    spec.regexes = {kGpt2};
    spec.known = false;
  }
  return spec;
}

struct PreTokenizer::Compiled {
  pcre2_code* code = nullptr;
};

PreTokenizer::~PreTokenizer() {
  for (Compiled& c : compiled_) pcre2_code_free(c.code);
}

StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::Create(
    const std::vector<std::string>& regexes) {
  std::unique_ptr<PreTokenizer> pre(new PreTokenizer());
  for (const std::string& regex : regexes) {
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    // MATCH_INVALID_UTF: arbitrary bytes are legal subjects; invalid sequences never match.
    // DOLLAR_ENDONLY: '$' means the end of the piece, as in std::regex, not "before a final \n".
    pcre2_code* code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(regex.data()), regex.size(),
                      PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY,
                      &error, &error_offset, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      return InvalidArgumentError("pre-tokenizer regex '" + regex + "' does not compile at " +
                                  std::to_string(error_offset) + ": " +
                                  reinterpret_cast<const char*>(message));
    }
    // JIT is ~10x faster than the interpreter; without it (unsupported CPU) matching still works.
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    pre->compiled_.push_back({code});
  }
  return pre;
}

void PreTokenizer::Split(std::string_view text, std::vector<std::string_view>* words) const {
  if (text.empty()) return;
  // Pieces as [begin, end) byte offsets into text, refined by each regex in turn.
  std::vector<std::pair<size_t, size_t>> pieces = {{0, text.size()}};
  std::vector<std::pair<size_t, size_t>> next;
  for (const Compiled& c : compiled_) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(c.code, nullptr);
    UF_CHECK(md != nullptr) << "out of memory";
    next.clear();
    next.reserve(pieces.size() * 2);
    for (const auto& [begin, end] : pieces) {
      // The piece is the whole subject: lookarounds and '$' must not see past its edges.
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + begin);
      const size_t length = end - begin;
      size_t pos = 0;   // where the next search starts
      size_t done = 0;  // end of the last emitted piece
      while (pos < length) {
        int rc = pcre2_match(c.code, subject, length, pos, 0, md, nullptr);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
          rc = pcre2_match(c.code, subject, length, pos, PCRE2_NO_JIT, md, nullptr);
        }
        if (rc < 0) {
          // PCRE2_ERROR_NOMATCH, or a resource limit on pathological input: the rest of the
          // piece stays one unmatched run, which is still a valid (if coarser) split.
          break;
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t m_begin = ov[0];
        const size_t m_end = ov[1];
        if (m_end == m_begin) {
          if (m_end >= length) break;
          // None of our regexes matches empty; step over one character defensively.
          pos = m_end +
                ScanUtf8(std::string_view(text.data() + begin + m_end, length - m_end)).length;
          continue;
        }
        if (m_begin > done) next.emplace_back(begin + done, begin + m_begin);
        next.emplace_back(begin + m_begin, begin + m_end);
        done = pos = m_end;
      }
      if (done < length) next.emplace_back(begin + done, end);
    }
    pcre2_match_data_free(md);
    pieces.swap(next);
  }
  for (const auto& [begin, end] : pieces) words->push_back(text.substr(begin, end - begin));
}

}  // namespace uf::tokenizer
