// Built-in synthetic-model presets (shapes from each model's Hugging Face config.json) and the
// synthetic byte-level BPE vocabulary written with them.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "model/synth.h"

namespace uf::model {
namespace {

std::vector<SynthSpecialToken> Llama3SpecialTokens() {
  // 256 special ids after the 128000 regular tokens; the named ones sit among reserved slots.
  std::vector<SynthSpecialToken> out;
  const char* named[11] = {"<|begin_of_text|>",
                           "<|end_of_text|>",
                           "<|reserved_special_token_0|>",
                           "<|reserved_special_token_1|>",
                           "<|finetune_right_pad_id|>",
                           "<|reserved_special_token_2|>",
                           "<|start_header_id|>",
                           "<|end_header_id|>",
                           "<|eom_id|>",
                           "<|eot_id|>",
                           "<|python_tag|>"};
  for (int i = 0; i < 11; ++i) out.push_back({128000 + i, named[i], TokenType::kControl});
  for (int i = 11; i < 256; ++i) {
    out.push_back({128000 + i, "<|reserved_special_token_" + std::to_string(i - 8) + "|>",
                   TokenType::kControl});
  }
  return out;
}

// Qwen2.5's added tokens from 151643; Qwen3 appends four more. Tokens that neither are marked
// special nor look like <|...|> become user-defined, as the reference converter types them.
std::vector<SynthSpecialToken> QwenSpecialTokens(bool qwen3) {
  std::vector<std::string> texts = {
      "<|endoftext|>",      "<|im_start|>",     "<|im_end|>",     "<|object_ref_start|>",
      "<|object_ref_end|>", "<|box_start|>",    "<|box_end|>",    "<|quad_start|>",
      "<|quad_end|>",       "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
      "<|image_pad|>",      "<|video_pad|>",    "<tool_call>",    "</tool_call>",
      "<|fim_prefix|>",     "<|fim_middle|>",   "<|fim_suffix|>", "<|fim_pad|>",
      "<|repo_name|>",      "<|file_sep|>"};
  if (qwen3) {
    for (const char* t : {"<tool_response>", "</tool_response>", "<think>", "</think>"}) {
      texts.push_back(t);
    }
  }
  std::vector<SynthSpecialToken> out;
  for (size_t i = 0; i < texts.size(); ++i) {
    const bool control = texts[i].rfind("<|", 0) == 0;
    out.push_back({static_cast<int32_t>(151643 + i), texts[i],
                   control ? TokenType::kControl : TokenType::kUserDefined});
  }
  return out;
}

std::vector<SynthSpecialToken> SmolLM2SpecialTokens() {
  const char* texts[17] = {
      "<|endoftext|>",    "<|im_start|>",    "<|im_end|>",     "<repo_name>",    "<reponame>",
      "<file_sep>",       "<filename>",      "<gh_stars>",     "<issue_start>",  "<issue_comment>",
      "<issue_closed>",   "<jupyter_start>", "<jupyter_text>", "<jupyter_code>", "<jupyter_output>",
      "<jupyter_script>", "<empty_output>"};
  std::vector<SynthSpecialToken> out;
  for (int i = 0; i < 17; ++i) out.push_back({i, texts[i], TokenType::kControl});
  return out;
}

SynthPreset Llama3(std::string name, std::string display, int64_t n_embd, int64_t n_layer,
                   int64_t n_head, int64_t n_ff, bool tied, double rope_factor) {
  SynthPreset p;
  p.name = std::move(name);
  p.display_name = std::move(display);
  p.arch = Architecture::kLlama;
  p.n_embd = n_embd;
  p.n_layer = n_layer;
  p.n_head = n_head;
  p.n_head_kv = 8;
  p.head_dim = n_embd / n_head;
  p.n_ff = n_ff;
  p.n_vocab = 128256;
  p.n_ctx_train = 131072;
  p.rope_freq_base = 500000.0f;
  p.rms_eps = 1e-5f;
  p.tied_embeddings = tied;
  p.llama3_rope = {rope_factor, 1.0, 4.0, 8192};
  p.tokenizer_pre = "llama-bpe";
  p.special_tokens = Llama3SpecialTokens();
  p.n_real_tokens = 128256;
  p.bos_id = 128000;
  p.eos_id = 128001;
  p.add_bos = true;
  return p;
}

SynthPreset Qwen(bool qwen3) {
  SynthPreset p;
  p.arch = qwen3 ? Architecture::kQwen3 : Architecture::kQwen2;
  p.n_vocab = 151936;
  p.rope_freq_base = 1000000.0f;
  p.rms_eps = 1e-6f;
  p.tied_embeddings = true;
  p.tokenizer_pre = "qwen2";
  p.special_tokens = QwenSpecialTokens(qwen3);
  p.n_real_tokens = 151643 + static_cast<int64_t>(p.special_tokens.size());
  p.bos_id = 151643;
  p.pad_id = 151643;
  p.add_bos = false;
  if (qwen3) {
    p.name = "qwen3-0.6b";
    p.display_name = "Qwen3 0.6B (synthetic)";
    p.n_embd = 1024;
    p.n_layer = 28;
    p.n_head = 16;
    p.n_head_kv = 8;
    p.head_dim = 128;
    p.n_ff = 3072;
    p.n_ctx_train = 40960;
    p.qk_norm = true;
    p.eos_id = 151645;
  } else {
    p.name = "qwen2.5-0.5b";
    p.display_name = "Qwen2.5 0.5B (synthetic)";
    p.n_embd = 896;
    p.n_layer = 24;
    p.n_head = 14;
    p.n_head_kv = 2;
    p.head_dim = 64;
    p.n_ff = 4864;
    p.n_ctx_train = 32768;
    p.qkv_bias = true;
    p.eos_id = 151643;
  }
  return p;
}

SynthPreset SmolLM2() {
  SynthPreset p;
  p.name = "smollm2-135m";
  p.display_name = "SmolLM2 135M (synthetic)";
  p.arch = Architecture::kLlama;
  p.n_embd = 576;
  p.n_layer = 30;
  p.n_head = 9;
  p.n_head_kv = 3;
  p.head_dim = 64;
  p.n_ff = 1536;
  p.n_vocab = 49152;
  p.n_ctx_train = 8192;
  p.rope_freq_base = 100000.0f;
  p.rms_eps = 1e-5f;
  p.tied_embeddings = true;
  p.tokenizer_pre = "smollm";
  p.special_tokens = SmolLM2SpecialTokens();
  p.n_real_tokens = 49152;
  p.bos_id = 0;
  p.eos_id = 0;
  p.add_bos = false;
  return p;
}

// Qwen3-30B-A3B: 128 experts of 768 rows, 8 per token (config.json of Qwen/Qwen3-30B-A3B).
SynthPreset Qwen3Moe() {
  SynthPreset p = Qwen(/*qwen3=*/true);
  p.name = "qwen3-30b-a3b";
  p.display_name = "Qwen3 30B A3B (synthetic)";
  p.arch = Architecture::kQwen3Moe;
  p.n_embd = 2048;
  p.n_layer = 48;
  p.n_head = 32;
  p.n_head_kv = 4;
  p.head_dim = 128;
  p.n_ff = 6144;
  p.n_ctx_train = 40960;
  p.tied_embeddings = false;
  p.n_expert = 128;
  p.n_expert_used = 8;
  p.n_ff_exp = 768;
  return p;
}

// Mixtral-8x7B: the Mistral 7B shape with 8 experts, 2 per token. The real tokenizer is a 32k
// SentencePiece one; synth writes its byte-level BPE of the same size with <unk>, <s>, </s>.
SynthPreset Mixtral() {
  SynthPreset p;
  p.name = "mixtral-8x7b";
  p.display_name = "Mixtral 8x7B (synthetic)";
  p.arch = Architecture::kLlama;
  p.n_embd = 4096;
  p.n_layer = 32;
  p.n_head = 32;
  p.n_head_kv = 8;
  p.head_dim = 128;
  p.n_ff = 14336;
  p.n_vocab = 32000;
  p.n_ctx_train = 32768;
  p.rope_freq_base = 1000000.0f;
  p.rms_eps = 1e-5f;
  p.tied_embeddings = false;
  p.tokenizer_pre = "llama-bpe";
  p.special_tokens = {{0, "<unk>", TokenType::kControl},
                      {1, "<s>", TokenType::kControl},
                      {2, "</s>", TokenType::kControl}};
  p.n_real_tokens = 32000;
  p.bos_id = 1;
  p.eos_id = 2;
  p.add_bos = true;
  p.n_expert = 8;
  p.n_expert_used = 2;
  p.n_ff_exp = 14336;
  return p;
}

// gpt-oss-20b (config.json of openai/gpt-oss-20b): 32 experts of 2880 rows, 4 per token, a
// 128-position window on even layers, YaRN (factor 32 over 4096). The o200k_harmony vocabulary's
// special tokens sit at 199998-200018; synth writes its byte-level BPE of the same size.
SynthPreset GptOss() {
  SynthPreset p;
  p.name = "gpt-oss-20b";
  p.display_name = "gpt-oss 20B (synthetic)";
  p.arch = Architecture::kGptOss;
  p.n_embd = 2880;
  p.n_layer = 24;
  p.n_head = 64;
  p.n_head_kv = 8;
  p.head_dim = 64;
  p.n_ff = 2880;
  p.n_vocab = 201088;
  p.n_ctx_train = 131072;
  p.rope_freq_base = 150000.0f;
  p.rms_eps = 1e-5f;
  p.tied_embeddings = false;
  p.qkv_bias = true;
  p.rope_scaling = "yarn";
  p.rope_scaling_factor = 32.0;
  p.rope_scaling_orig_ctx = 4096;
  p.tokenizer_pre = "gpt-4o";
  const std::pair<int32_t, const char*> named[] = {
      {199998, "<|startoftext|>"}, {199999, "<|endoftext|>"}, {200002, "<|return|>"},
      {200003, "<|constrain|>"},   {200005, "<|channel|>"},   {200006, "<|start|>"},
      {200007, "<|end|>"},         {200008, "<|message|>"},   {200012, "<|call|>"},
      {200018, "<|endofprompt|>"}};
  for (int32_t id = 199998; id <= 200018; ++id) {
    std::string text = "<|reserved_" + std::to_string(id) + "|>";
    for (const auto& [nid, t] : named) {
      if (nid == id) text = t;
    }
    p.special_tokens.push_back({id, text, TokenType::kControl});
  }
  p.n_real_tokens = 200019;
  p.bos_id = 199998;
  p.eos_id = 200002;
  p.pad_id = 199999;
  p.add_bos = false;
  p.n_expert = 32;
  p.n_expert_used = 4;
  p.n_ff_exp = 2880;
  p.sliding_window = 128;
  return p;
}

// Tiny gpt-oss: the tiny MoE shape with 8 experts (4 used), a 32-position window (so a
// 200-token test crosses it), YaRN factor 4 over 1024, the special tokens at the end of a 4k
// vocabulary.
SynthPreset TinyGptOss() {
  SynthPreset p = GptOss();
  p.name = "tiny-gpt-oss";
  p.display_name = "Tiny gpt-oss (synthetic)";
  p.n_embd = 256;
  p.n_layer = 2;
  p.n_head = 4;
  p.n_head_kv = 2;
  p.head_dim = 64;
  p.n_ff = 256;
  p.n_vocab = 4096;
  p.n_ctx_train = 4096;
  p.rope_scaling_factor = 4.0;
  p.rope_scaling_orig_ctx = 1024;
  const int32_t base = static_cast<int32_t>(p.n_vocab - p.special_tokens.size());
  for (size_t i = 0; i < p.special_tokens.size(); ++i) {
    p.special_tokens[i].id = base + static_cast<int32_t>(i);
  }
  p.n_real_tokens = p.n_vocab;
  p.bos_id = base;
  p.pad_id = base + 1;
  p.eos_id = base + 4;  // <|return|>
  p.n_expert = 8;
  p.n_expert_used = 4;
  p.n_ff_exp = 256;
  p.sliding_window = 32;
  return p;
}

// Tiny mixtures of experts for tests against the reference engine: 2 layers of width 256 (so
// K-quant rows are whole blocks), a 4k vocabulary, a few MiB in Q8_0.
SynthPreset TinyMoe(bool qwen3) {
  SynthPreset p = qwen3 ? Qwen3Moe() : Mixtral();
  p.name = qwen3 ? "tiny-qwen3moe" : "tiny-mixtral";
  p.display_name = qwen3 ? "Tiny Qwen3 MoE (synthetic)" : "Tiny Mixtral (synthetic)";
  p.n_embd = 256;
  p.n_layer = 2;
  p.n_head = 4;
  p.n_head_kv = 2;
  p.head_dim = 64;
  p.n_vocab = 4096;
  p.n_ctx_train = 4096;
  if (qwen3) {
    // Qwen's added tokens moved to the end of the small vocabulary.
    p.special_tokens = QwenSpecialTokens(true);
    const int32_t base = static_cast<int32_t>(p.n_vocab - p.special_tokens.size());
    for (size_t i = 0; i < p.special_tokens.size(); ++i) {
      p.special_tokens[i].id = base + static_cast<int32_t>(i);
    }
    p.n_real_tokens = p.n_vocab;
    p.bos_id = p.pad_id = base;
    p.eos_id = base + 2;  // <|im_end|>
    p.n_ff = 512;
    p.n_expert = 8;
    p.n_expert_used = 4;
    p.n_ff_exp = 128;
  } else {
    p.n_real_tokens = p.n_vocab;
    p.n_ff = 256;
    p.n_expert = 8;
    p.n_expert_used = 2;
    p.n_ff_exp = 256;
  }
  return p;
}

// GPT-2's byte-to-unicode table in its vocabulary order: printable Latin-1 bytes map to
// themselves and come first, the other 68 bytes map to U+0100.. in byte order.
std::vector<std::string> ByteTokens() {
  auto utf8 = [](uint32_t cp) {
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {  // every code point here is < 0x800
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return s;
  };
  auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  std::vector<std::string> out;
  for (int b = 0; b < 256; ++b) {
    if (printable(b)) out.push_back(utf8(b));
  }
  uint32_t next = 0x100;
  for (int b = 0; b < 256; ++b) {
    if (!printable(b)) out.push_back(utf8(next++));
  }
  return out;
}

// Appends up to n merges (left, right) in rank order; each result is a new token. Words grow
// one lowercase letter at a time from 104 starts (a-z, A-Z, each optionally after a space), so
// every merge's parts exist by the time it is ranked and English text tokenizes into pieces of
// a few letters. Digit groups of 2 and 3 follow their letter levels.
void AppendMerges(size_t n, std::vector<std::pair<std::string, std::string>>* merges) {
  const std::string kSpace = "\xC4\xA0";    // 'Ġ', GPT-2's stand-in for ' '
  const std::string kNewline = "\xC4\x8A";  // 'Ċ'
  auto add = [&](const std::string& a, const std::string& b) {
    if (merges->size() < n) merges->emplace_back(a, b);
    return merges->size() < n;
  };
  if (!add(kSpace, kSpace) || !add(kNewline, kNewline)) return;
  std::vector<std::string> level;  // words of the current length
  for (char c = 'a'; c <= 'z'; ++c) level.emplace_back(1, c);
  for (char c = 'A'; c <= 'Z'; ++c) level.emplace_back(1, c);
  for (char c = 'a'; c <= 'z'; ++c) {
    if (!add(kSpace, std::string(1, c))) return;
    level.push_back(kSpace + c);
  }
  for (char c = 'A'; c <= 'Z'; ++c) {
    if (!add(kSpace, std::string(1, c))) return;
    level.push_back(kSpace + c);
  }
  std::vector<std::string> digits;
  for (char c = '0'; c <= '9'; ++c) digits.emplace_back(1, c);
  for (int len = 2; merges->size() < n; ++len) {
    std::vector<std::string> next;
    next.reserve(std::min(level.size() * 26, n));
    for (const std::string& w : level) {
      for (char c = 'a'; c <= 'z'; ++c) {
        if (!add(w, std::string(1, c))) return;
        next.push_back(w + c);
      }
    }
    level = std::move(next);
    if (len <= 3) {
      std::vector<std::string> longer;
      for (const std::string& d : digits) {
        for (char c = '0'; c <= '9'; ++c) {
          if (!add(d, std::string(1, c))) return;
          longer.push_back(d + c);
        }
      }
      digits = std::move(longer);
    }
  }
}

}  // namespace

const std::vector<SynthPreset>& SynthPresets() {
  static const std::vector<SynthPreset>* presets = [] {
    auto* v = new std::vector<SynthPreset>;
    v->push_back(
        Llama3("llama-3.2-1b", "Llama 3.2 1B (synthetic)", 2048, 16, 32, 8192, true, 32.0));
    v->push_back(
        Llama3("llama-3.2-3b", "Llama 3.2 3B (synthetic)", 3072, 28, 24, 8192, true, 32.0));
    v->push_back(
        Llama3("llama-3.1-8b", "Llama 3.1 8B (synthetic)", 4096, 32, 32, 14336, false, 8.0));
    v->push_back(Qwen(/*qwen3=*/false));
    v->push_back(Qwen(/*qwen3=*/true));
    v->push_back(SmolLM2());
    v->push_back(Qwen3Moe());
    v->push_back(Mixtral());
    v->push_back(TinyMoe(/*qwen3=*/true));
    v->push_back(TinyMoe(/*qwen3=*/false));
    v->push_back(GptOss());
    v->push_back(TinyGptOss());
    return v;
  }();
  return *presets;
}

StatusOr<SynthPreset> FindSynthPreset(std::string_view name) {
  std::string known;
  for (const SynthPreset& p : SynthPresets()) {
    if (p.name == name) return p;
    known += (known.empty() ? "" : ", ") + p.name;
  }
  return NotFoundError("unknown synth preset '" + std::string(name) + "' (known: " + known + ")");
}

StatusOr<TokenizerConfig> SynthTokenizerConfig(const SynthPreset& p) {
  const int64_t n_special = static_cast<int64_t>(p.special_tokens.size());
  if (p.n_real_tokens > p.n_vocab || p.n_real_tokens - n_special < 256) {
    return InvalidArgumentError("synth preset '" + p.name +
                                "': " + std::to_string(p.n_real_tokens) + " real tokens of " +
                                std::to_string(p.n_vocab) + " leave no room for the " +
                                std::to_string(n_special) + " special and 256 byte tokens");
  }
  TokenizerConfig c;
  c.model = TokenizerConfig::Model::kBpe;
  c.pre = p.tokenizer_pre;
  c.tokens.assign(p.n_vocab, std::string());
  c.token_types.assign(p.n_vocab, TokenType::kNormal);
  std::vector<bool> taken(p.n_vocab, false);
  for (const SynthSpecialToken& s : p.special_tokens) {
    if (s.id < 0 || s.id >= p.n_real_tokens || taken[s.id]) {
      return InvalidArgumentError("synth preset '" + p.name + "': special token " + s.text +
                                  " has a bad or repeated id " + std::to_string(s.id));
    }
    taken[s.id] = true;
    c.tokens[s.id] = s.text;
    c.token_types[s.id] = s.type;
  }
  for (int32_t id : {p.bos_id, p.eos_id, p.pad_id}) {
    if (id < -1 || id >= p.n_vocab) {
      return InvalidArgumentError("synth preset '" + p.name + "': token id " + std::to_string(id) +
                                  " is out of range");
    }
  }

  const std::vector<std::string> bytes = ByteTokens();
  const size_t n_normal = static_cast<size_t>(p.n_real_tokens - n_special);
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(n_normal - bytes.size());
  AppendMerges(n_normal - bytes.size(), &merges);
  if (merges.size() != n_normal - bytes.size()) {
    return InternalError("synth vocabulary: generated too few merges");
  }
  size_t next = 0;  // index into bytes, then merges
  c.merges.reserve(merges.size());
  for (int64_t id = 0; id < p.n_real_tokens; ++id) {
    if (taken[id]) continue;
    if (next < bytes.size()) {
      c.tokens[id] = bytes[next];
    } else {
      const auto& [left, right] = merges[next - bytes.size()];
      c.tokens[id] = left + right;
      c.merges.push_back(left + " " + right);
    }
    ++next;
  }
  for (int64_t id = p.n_real_tokens; id < p.n_vocab; ++id) {
    c.tokens[id] = "[PAD" + std::to_string(id) + "]";
    c.token_types[id] = TokenType::kUnused;
  }
  c.bos_id = p.bos_id;
  c.eos_id = p.eos_id;
  c.add_bos = p.add_bos;
  return c;
}

}  // namespace uf::model
