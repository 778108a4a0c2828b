// A row of topk.comp's output ([k ids][k logits][max][log-sum-exp], 2k + 2 words) as the
// model::TopRow the samplers read, without known tokens.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "model/batch.h"

namespace uf::gpu {

// words: the row's 2k + 2 words; a vocabulary shorter than k lists n_vocab tokens.
inline model::TopRow TopRowOf(const uint32_t* words, int64_t k, int64_t n_vocab) {
  model::TopRow t;
  t.n = static_cast<int32_t>(std::min(k, n_vocab));
  t.ids = reinterpret_cast<const int32_t*>(words);
  t.logits = reinterpret_cast<const float*>(words + k);
  std::memcpy(&t.max, words + 2 * k, 4);
  std::memcpy(&t.log_sum_exp, words + 2 * k + 1, 4);
  return t;
}

}  // namespace uf::gpu
