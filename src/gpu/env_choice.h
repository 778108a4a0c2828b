// The GPU backend's switches read from the environment (UF_GPU_GEMV, UF_GPU_TILE,
// UF_GPU_MATMUL, UF_GPU_ATTENTION, UF_GPU_NORM_TAIL): each a table of names and values whose first entry is the
// default, read and printed through the same table.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "base/log.h"

namespace uf::gpu {

template <typename T, size_t N>
using Choices = std::pair<const char*, T>[N];

// The value the environment variable `var` names; unset or empty: the first choice; a name not in
// the table: the first choice, with a warning listing the names.
template <typename T, size_t N>
T EnvChoice(const char* var, const Choices<T, N>& choices) {
  const char* env = std::getenv(var);
  if (env == nullptr || *env == '\0') return choices[0].second;
  for (const auto& [name, value] : choices) {
    if (std::strcmp(env, name) == 0) return value;
  }
  std::string names;
  for (size_t i = 0; i < N; ++i) {
    names += (i == 0 ? "" : i + 1 == N ? " or " : ", ") + std::string(choices[i].first);
  }
  UF_LOG(WARNING) << var << "=" << env << " is not " << names << ": " << choices[0].first;
  return choices[0].second;
}

// The name of v in the table; a value not in it (a kDefault) has the first choice's name.
template <typename T, size_t N>
const char* ChoiceName(const Choices<T, N>& choices, T v) {
  for (const auto& [name, value] : choices) {
    if (value == v) return name;
  }
  return choices[0].first;
}

}  // namespace uf::gpu
