// `ultrafast tokenize`: text on stdin -> token ids on stdout.
#include <cstdio>
#include <iostream>
#include <iterator>

#include "cli/common.h"
#include "gguf/gguf.h"
#include "pull/model_cache.h"

namespace uf::cli {
namespace {

struct TokenizeOptions {
  std::string model;
  bool bos = false;
  bool special = false;
};

void Tokenize(const TokenizeOptions& o) {
  // Only the vocabulary is needed: vocab-only GGUF files work too.
  auto file = gguf::GgufFile::Open(pull::ResolveModelPath(o.model, pull::DefaultCacheDir()));
  if (!file.ok()) Fail("tokenize", file.status());
  auto tok = Tokenizer::FromGguf(**file);
  if (!tok.ok()) Fail("tokenize", tok.status());
  const std::string text((std::istreambuf_iterator<char>(std::cin)),
                         std::istreambuf_iterator<char>());
  const std::vector<int32_t> ids = (*tok)->Encode(text, o.bos, o.special);
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? " " : "") + std::to_string(ids[i]);
  out += '\n';
  std::fwrite(out.data(), 1, out.size(), stdout);
}

}  // namespace

void AddTokenizeCommand(CLI::App& app) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* cmd =
      app.add_subcommand("tokenize", "Tokenize stdin; prints token ids separated by spaces");
  cmd->add_option("-m,--model", o->model, "GGUF model or vocabulary file")->required();
  cmd->add_flag("--bos", o->bos, "Prepend BOS when the model's metadata asks for it");
  cmd->add_flag("--special", o->special, "Parse special-token text (e.g. <|im_start|>)");
  cmd->callback([o] { Tokenize(*o); });
}

}  // namespace uf::cli
