#include "engine/host_only_forward.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>

#include "base/log.h"

namespace uf::engine {

HostOnlyForward::HostOnlyForward(int64_t n_vocab, int64_t max_outputs)
    : n_vocab_(n_vocab), max_outputs_(max_outputs) {
  UF_CHECK(n_vocab >= kTop && max_outputs >= 1) << "host-only forward of " << n_vocab << " tokens";
  by_rank_.resize(n_vocab);
  id_of_.resize(n_vocab);
  rank_of_.resize(n_vocab);
  for (int64_t r = 0; r < n_vocab; ++r) {
    by_rank_[r] = static_cast<float>(12.0 - 2.0 * std::log1p(static_cast<double>(r)));
    mass_ += std::exp(static_cast<double>(by_rank_[r]) - by_rank_[0]);
  }
  std::iota(id_of_.begin(), id_of_.end(), 0);
  std::shuffle(id_of_.begin(), id_of_.end(), std::mt19937(7));
  for (int64_t r = 0; r < n_vocab; ++r) rank_of_[id_of_[r]] = static_cast<int32_t>(r);
  by_id_.resize(n_vocab);
  for (int64_t j = 0; j < n_vocab; ++j) by_id_[j] = by_rank_[rank_of_[j]];
  shift_.resize(max_outputs);
  rows_.resize(max_outputs);
  top_ids_.resize(max_outputs * kTop);
  top_logits_.resize(max_outputs * kTop);
  max_.resize(max_outputs);
  lse_.resize(max_outputs);
  n_known_.resize(max_outputs);
  known_ids_.resize(max_outputs * kMaxKnown);
  known_logits_.resize(max_outputs * kMaxKnown);
}

float HostOnlyForward::Logit(int64_t i, int32_t id) const {
  return by_id_[(id - shift_[i] + n_vocab_) % n_vocab_];
}

Status HostOnlyForward::Forward(const model::Batch& batch, const std::atomic<bool>* /*abandon*/) {
  const int64_t n = batch.size();
  int64_t outs = 0;
  for (int64_t t = 0; t < n; ++t) outs += batch.want_logits[t];
  if (outs > max_outputs_) {
    return InvalidArgumentError("host-only forward: " + std::to_string(outs) +
                                " logits rows, room for " + std::to_string(max_outputs_));
  }
  n_outputs_ = 0;
  for (int64_t t = 0; t < n; ++t) {
    if (batch.want_logits[t] == 0) continue;
    const int64_t i = n_outputs_++;
    // The row follows from the token and its position, as a model's does.
    shift_[i] = (int64_t{batch.tokens[t]} * 7919 + int64_t{batch.positions[t]} * 104729 +
                 int64_t{batch.seq_ids[t]} * 31) %
                n_vocab_;
    const bool reduce = !batch.top_only.empty() && batch.top_only[t] != 0;
    if (!reduce) {
      FillRow(i);
      continue;
    }
    std::span<const int32_t> known;
    if (!batch.known_begin.empty()) {
      known = std::span<const int32_t>(batch.known_ids)
                  .subspan(batch.known_begin[t], batch.known_begin[t + 1] - batch.known_begin[t]);
    }
    Reduce(i, known, batch.allowed.empty() ? nullptr : batch.allowed[t]);
  }
  return OkStatus();
}

void HostOnlyForward::FillRow(int64_t i) {
  // Row i is by_id_ rotated by its shift: two copies, as cheap as a device's copy of the row.
  std::vector<float>& row = rows_[i];
  row.resize(n_vocab_);
  const int64_t s = shift_[i];
  std::copy(by_id_.begin(), by_id_.end() - s, row.begin() + s);
  std::copy(by_id_.end() - s, by_id_.end(), row.begin());
}

void HostOnlyForward::Reduce(int64_t i, std::span<const int32_t> known, const uint64_t* allowed) {
  UF_CHECK(static_cast<int64_t>(known.size()) <= kMaxKnown) << known.size() << " known tokens";
  n_known_[i] = static_cast<int32_t>(known.size());
  std::vector<int32_t>& sorted = sorted_;  // scratch: no allocation a token once warm
  sorted.assign(known.begin(), known.end());
  std::sort(sorted.begin(), sorted.end());
  const auto excluded = [&](int32_t id) {
    if (allowed != nullptr && ((allowed[id / 64] >> (id % 64)) & 1) == 0) return true;
    return std::binary_search(sorted.begin(), sorted.end(), id);
  };
  const double top = by_rank_[0];
  double mass = mass_;  // the row's e^(l - top), less what the known or disallowed tokens take
  for (size_t k = 0; k < known.size(); ++k) {
    known_ids_[i * kMaxKnown + k] = known[k];
    known_logits_[i * kMaxKnown + k] = Logit(i, known[k]);
  }
  for (int32_t id : sorted) mass -= std::exp(static_cast<double>(Logit(i, id)) - top);
  int32_t got = 0;
  const int64_t shift = shift_[i];
  for (int64_t r = 0; r < n_vocab_; ++r) {
    const auto id = static_cast<int32_t>((id_of_[r] + shift) % n_vocab_);
    const bool out = excluded(id);
    if (allowed != nullptr && out && !std::binary_search(sorted.begin(), sorted.end(), id)) {
      mass -= std::exp(static_cast<double>(by_rank_[r]) - top);  // a grammar's -inf
    }
    if (out || got == kTop) {
      if (got == kTop && allowed == nullptr) break;  // the rest only matters under a mask
      continue;
    }
    top_ids_[i * kTop + got] = id;
    top_logits_[i * kTop + got] = by_rank_[r];
    ++got;
  }
  // Fewer than kTop tokens allowed: the rest of the list at -inf, as the device's top-k has it.
  for (int64_t r = 0; got < kTop; ++r) {
    const auto id = static_cast<int32_t>((id_of_[r] + shift) % n_vocab_);
    if (!excluded(id)) continue;
    top_ids_[i * kTop + got] = id;
    top_logits_[i * kTop + got] = -INFINITY;
    ++got;
  }
  max_[i] = top_logits_[i * kTop];
  lse_[i] = mass > 0 ? static_cast<float>(top + std::log(mass)) : -INFINITY;
}

model::TopRow HostOnlyForward::top(int64_t i) const {
  model::TopRow t;
  t.n = kTop;
  t.ids = top_ids_.data() + i * kTop;
  t.logits = top_logits_.data() + i * kTop;
  t.max = max_[i];
  t.log_sum_exp = lse_[i];
  t.n_known = n_known_[i];
  t.known_ids = known_ids_.data() + i * kMaxKnown;
  t.known_logits = known_logits_.data() + i * kMaxKnown;
  return t;
}

Status HostOnlyForward::FetchLogits(std::span<const int64_t> rows) {
  for (int64_t i : rows) {
    if (i < 0 || i >= n_outputs_) return InvalidArgumentError("host-only forward: no such row");
    FillRow(i);
  }
  return OkStatus();
}

}  // namespace uf::engine
