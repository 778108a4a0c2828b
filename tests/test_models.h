// Models shared by the engine and server tests: loaded once per test binary and kept for its
// life (the Service under test holds references to them).
#pragma once

#include <memory>

#include "base/check.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace uf::testing_models {

struct Loaded {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

// Loads `path` (relative to the test's working directory) with its tokenizer; aborts on failure.
inline Loaded* LoadOrDie(const char* path) {
  auto* l = new Loaded;
  auto m = model::Model::Load(path);
  UF_CHECK(m.ok()) << m.status().ToString();
  l->model = std::move(m).value();
  auto t = Tokenizer::FromGguf(l->model->file());
  UF_CHECK(t.ok()) << t.status().ToString();
  l->tokenizer = std::move(t).value();
  return l;
}

// ../shared's tiny Qwen2 (random weights, Q8_0): fast, deterministic greedy output.
inline Loaded& TinyQwen2() {
  static Loaded* loaded = LoadOrDie("../shared/models/tiny-qwen2-256-q8_0.gguf");
  return *loaded;
}

// The embedded demo model (trained: its outputs mean something).
inline Loaded& DemoModel() {
  static Loaded* loaded = LoadOrDie("models/demo.gguf");
  return *loaded;
}

}  // namespace uf::testing_models
