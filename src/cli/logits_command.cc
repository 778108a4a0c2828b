// `ultrafast logits`: the top logits at every position of each prompt, as JSON lines in the format
// of ../shared/golden/*.jsonl, from one batched forward pass per prompt.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <sstream>

#include "base/thread_pool.h"
#include "cli/common.h"
#include "engine/kv_cache.h"
#include "model/decoder.h"

namespace uf::cli {
namespace {

struct LogitsOptions {
  std::string model;
  std::string prompts;
  int top_k = 8;
  int threads = 0;
  bool special = false;
  std::string kv_type;
  std::string device;
};

// Prompts file: one prompt per line; "\n" stands for a newline and "\\" for a backslash. Empty
// lines are skipped.
StatusOr<std::vector<std::string>> ReadPrompts(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open prompts file '" + path + "'");
  std::vector<std::string> prompts;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    std::string p;
    for (size_t i = 0; i < line.size(); ++i) {
      if (line[i] == '\\' && i + 1 < line.size() && (line[i + 1] == 'n' || line[i + 1] == '\\')) {
        p += line[i + 1] == 'n' ? '\n' : '\\';
        ++i;
      } else {
        p += line[i];
      }
    }
    prompts.push_back(std::move(p));
  }
  return prompts;
}

// JSON string as the reference writes it: \" \\ \n escaped, other control bytes as \u00XX,
// everything else (UTF-8 included) verbatim.
std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"') {
      out += "\\\"";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

void Logits(const LogitsOptions& o) {
  auto prompts = ReadPrompts(o.prompts);
  if (!prompts.ok()) Fail("logits", prompts.status());
  auto loaded = LoadModel(o.model);
  if (!loaded.ok()) Fail("logits", loaded.status());
  const model::Model& m = *loaded->model;
  const int64_t n_vocab = m.config().n_vocab;

  std::vector<std::vector<int32_t>> tokens;
  int64_t max_len = 1;
  for (const std::string& p : *prompts) {
    tokens.push_back(loaded->tokenizer->Encode(p, /*add_bos=*/true, o.special));
    max_len = std::max<int64_t>(max_len, tokens.back().size());
  }
  const gpu::DeviceSpec device = DeviceOrDie("logits", o.device);
  // One batched forward per prompt, on the CPU or the Vulkan device.
  std::unique_ptr<engine::KvCache> cache;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<model::Decoder> decoder;
  std::unique_ptr<gpu::GpuDecoder> gpu_decoder;
  if (device.vulkan) {
    auto d = gpu::GpuDecoder::Create(m, device, max_len, /*max_batch=*/max_len,
                                     KvTypeOrDie("logits", o.kv_type));
    if (!d.ok()) Fail("logits", d.status());
    gpu_decoder = std::move(*d);
  } else {
    const engine::KvCacheOptions co =
        CacheOptionsFor(m.config(), max_len, KvTypeOrDie("logits", o.kv_type));
    auto c = engine::KvCache::Create(co);
    if (!c.ok()) Fail("logits", c.status());
    cache = std::move(*c);
    pool = std::make_unique<ThreadPool>(ResolveThreads(o.threads));
    auto d = model::Decoder::Create(m, cache.get(), {.max_batch = max_len}, pool.get());
    if (!d.ok()) Fail("logits", d.status());
    decoder = std::move(*d);
  }

  const int k = static_cast<int>(std::min<int64_t>(std::max(o.top_k, 1), n_vocab));
  std::vector<int32_t> ids(n_vocab);
  model::Batch batch;
  std::string line;
  const auto add_position = [&](size_t i, const float* l) {
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                      [l](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
    line += i ? ",[" : "[";
    for (int j = 0; j < k; ++j) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%s[%d,%.5f]", j ? "," : "", ids[j], l[ids[j]]);
      line += buf;
    }
    line += "]";
  };
  for (size_t pi = 0; pi < prompts->size(); ++pi) {
    const std::vector<int32_t>& toks = tokens[pi];
    line = "{\"prompt\":" + JsonString((*prompts)[pi]) + ",\"prompt_tokens\":[";
    for (size_t i = 0; i < toks.size(); ++i) line += (i ? "," : "") + std::to_string(toks[i]);
    line += "],\"positions\":[";
    if (gpu_decoder) {
      if (!toks.empty()) {
        const Status s = gpu_decoder->Prefill(toks, 0, /*every_logits=*/true);
        if (!s.ok()) Fail("logits", s);
      }
      for (size_t i = 0; i < toks.size(); ++i) add_position(i, gpu_decoder->all_logits(i));
    } else {
      if (!toks.empty()) {
        cache->Remove(0);
        batch.Clear();
        for (size_t i = 0; i < toks.size(); ++i) batch.Add(toks[i], i, 0, true);
        const Status s = decoder->Forward(batch);
        if (!s.ok()) Fail("logits", s);
      }
      for (size_t i = 0; i < toks.size(); ++i) add_position(i, decoder->logits(i));
    }
    line += "]}\n";
    std::fwrite(line.data(), 1, line.size(), stdout);
  }
  std::fflush(stdout);
}

}  // namespace

void AddLogitsCommand(CLI::App& app) {
  auto o = std::make_shared<LogitsOptions>();
  CLI::App* cmd = app.add_subcommand(
      "logits", "Top logits at every prompt position as JSON lines (golden-file format)");
  cmd->add_option("-m,--model", o->model, "GGUF model")->required();
  cmd->add_option("--prompts", o->prompts,
                  "File with one prompt per line (\\n = newline, \\\\ = backslash)")
      ->required();
  cmd->add_option("--top-k", o->top_k, "Logits per position")->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "Threads (0: all cores)")->capture_default_str();
  AddKvTypeOption(cmd, &o->kv_type);
  AddDeviceOption(cmd, &o->device);
  cmd->add_flag("--special", o->special, "Parse special-token text in prompts");
  cmd->callback([o] { Logits(*o); });
}

}  // namespace uf::cli
