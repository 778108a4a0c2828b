#include "engine/speculative.h"

#include <algorithm>
#include <cmath>

#include "kernels/ops.h"
#include "sampling/sampler.h"

namespace uf::engine {

std::string_view SpecModeName(SpecMode mode) {
  switch (mode) {
    case SpecMode::kOff:
      return "off";
    case SpecMode::kNgram:
      return "ngram";
    case SpecMode::kDraft:
      return "draft";
    case SpecMode::kOracle:
      return "oracle";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------
// NgramDrafter

uint64_t NgramDrafter::Index::Hash(const int32_t* gram, int n) {
  // splitmix64 finaliser per token, seeded with n so that grams of different lengths differ.
  uint64_t h = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(n + 1);
  for (int i = 0; i < n; ++i) {
    h += static_cast<uint32_t>(gram[i]) + 0x9E3779B97F4A7C15ull;
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
    h ^= h >> 31;
  }
  return h == 0 ? 1 : h;  // 0 marks an empty slot
}

void NgramDrafter::Index::Clear() {
  std::fill(keys_.begin(), keys_.end(), 0);
  used_ = 0;
  indexed_ = 0;
}

void NgramDrafter::Index::Grow() {
  std::vector<uint64_t> keys = std::move(keys_);
  std::vector<int64_t> ends = std::move(ends_);
  const size_t cap = std::max<size_t>(1024, keys.size() * 2);
  keys_.assign(cap, 0);
  ends_.assign(cap, 0);
  used_ = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] != 0) Insert(keys[i], ends[i]);
  }
}

void NgramDrafter::Index::Insert(uint64_t key, int64_t end) {
  // Load factor at most 1/2: linear probing stays a probe or two.
  if (2 * (used_ + 1) > static_cast<int64_t>(keys_.size())) Grow();
  const size_t mask = keys_.size() - 1;
  for (size_t i = key & mask;; i = (i + 1) & mask) {
    if (keys_[i] == key) {
      ends_[i] = end;  // the most recent occurrence wins
      return;
    }
    if (keys_[i] == 0) {
      keys_[i] = key;
      ends_[i] = end;
      ++used_;
      return;
    }
  }
}

void NgramDrafter::Index::Extend(std::span<const int32_t> tokens, int64_t end, int min_n,
                                 int max_n) {
  if (end < indexed_) Clear();
  for (int64_t p = indexed_; p < end; ++p) {
    for (int n = min_n; n <= max_n && n <= p + 1; ++n) {
      Insert(Hash(tokens.data() + p - n + 1, n), p);
    }
  }
  indexed_ = std::max(indexed_, end);
}

int64_t NgramDrafter::Index::Find(std::span<const int32_t> tokens,
                                  std::span<const int32_t> gram) const {
  if (keys_.empty()) return -1;
  const int n = static_cast<int>(gram.size());
  const uint64_t key = Hash(gram.data(), n);
  const size_t mask = keys_.size() - 1;
  for (size_t i = key & mask; keys_[i] != 0; i = (i + 1) & mask) {
    if (keys_[i] != key) continue;
    const int64_t end = ends_[i];
    // A hash collision costs a missed draft, never a wrong one (the target verifies anyway).
    if (end + 1 < n || !std::equal(gram.begin(), gram.end(), tokens.begin() + end - n + 1)) {
      return -1;
    }
    return end;
  }
  return -1;
}

NgramDrafter::NgramDrafter(int min_n, int max_n)
    : min_n_(std::max(1, min_n)), max_n_(std::max(std::max(1, min_n), max_n)) {}

void NgramDrafter::SetReference(std::vector<int32_t> tokens) {
  reference_ = std::move(tokens);
  reference_index_.Clear();
  reference_index_.Extend(reference_, static_cast<int64_t>(reference_.size()), min_n_, max_n_);
}

void NgramDrafter::Continue(std::span<const int32_t> source, int64_t end, int max_k,
                            std::vector<int32_t>* out) {
  // Past the end of the source the continuation reads its own proposals: a match close to the
  // end of the context is a repeating pattern, and this extends it for all k drafts.
  const int64_t size = static_cast<int64_t>(source.size());
  const size_t base = out->size();
  for (int64_t i = end + 1; static_cast<int>(out->size() - base) < max_k; ++i) {
    if (i < size) {
      out->push_back(source[i]);
    } else {
      const int64_t j = i - size;
      if (j >= static_cast<int64_t>(out->size() - base)) break;
      out->push_back((*out)[base + j]);
    }
  }
}

Status NgramDrafter::Draft(std::span<const int32_t> context, int max_k, std::vector<int32_t>* out) {
  out->clear();
  const int64_t size = static_cast<int64_t>(context.size());
  if (max_k <= 0 || size < 1) return OkStatus();
  // The n-grams ending at the last token are indexed on the next call, so the context's own
  // suffix is never its match.
  context_index_.Extend(context, size - 1, min_n_, max_n_);
  for (int n = std::min<int64_t>(max_n_, size); n >= min_n_; --n) {
    const std::span<const int32_t> gram = context.subspan(size - n, n);
    if (!reference_.empty()) {
      const int64_t end = reference_index_.Find(reference_, gram);
      if (end >= 0 && end + 1 < static_cast<int64_t>(reference_.size())) {
        Continue(reference_, end, max_k, out);
        return OkStatus();
      }
    }
    const int64_t end = context_index_.Find(context, gram);
    if (end >= 0) {
      Continue(context, end, max_k, out);
      return OkStatus();
    }
  }
  return OkStatus();
}

// ---------------------------------------------------------------------------------------------
// OracleDrafter

Status OracleDrafter::Draft(std::span<const int32_t> context, int max_k,
                            std::vector<int32_t>* out) {
  out->clear();
  const size_t n = context.size();
  if (n == 0 || n > sequence_.size() || context.back() != sequence_[n - 1]) return OkStatus();
  const size_t end = std::min(sequence_.size(), n + static_cast<size_t>(std::max(max_k, 0)));
  out->assign(sequence_.begin() + static_cast<std::ptrdiff_t>(n),
              sequence_.begin() + static_cast<std::ptrdiff_t>(end));
  return OkStatus();
}

// ---------------------------------------------------------------------------------------------
// DraftModelDrafter

Status CheckDraftVocabulary(int64_t draft_vocab, int64_t target_vocab) {
  if (draft_vocab != target_vocab) {
    return InvalidArgumentError("speculative: the draft model's vocabulary has " +
                                std::to_string(draft_vocab) + " tokens but the target's has " +
                                std::to_string(target_vocab) +
                                "; a draft model must share the target's vocabulary");
  }
  return OkStatus();
}

StatusOr<std::unique_ptr<DraftModelDrafter>> DraftModelDrafter::Create(
    const model::Model& draft, int64_t target_vocab, int64_t ctx, ThreadPool* pool, float p_min) {
  const model::ModelConfig& c = draft.config();
  UF_RETURN_IF_ERROR(CheckDraftVocabulary(c.n_vocab, target_vocab));
  if (ctx < 1) return InvalidArgumentError("speculative: the draft context must be positive");
  std::unique_ptr<DraftModelDrafter> d(new DraftModelDrafter(draft, p_min));
  KvCacheOptions ko;
  ko.n_layer = c.n_layer;
  ko.n_head_kv = c.n_head_kv;
  ko.head_dim = c.head_dim;
  ko.block_size = 16;
  // Drafts run up to kMaxSpecK past the target's context.
  ko.max_seq_len = ctx + kMaxSpecK;
  ko.n_blocks = KvCacheOptions::BlocksFor(ko.max_seq_len, 1, ko.block_size);
  ko.max_seqs = 1;
  model::DecoderOptions dopt;
  dopt.max_batch = std::min<int64_t>(512, ko.max_seq_len);
  // Drafting appends a context chunk or one token; a rejection rolls back up to kMaxSpecK + 1.
  // Further back (another sequence's context) Draft starts over from 0.
  model::UseSlidingWindowPool(c, dopt.max_batch + kMaxSpecK + 1, &ko);
  UF_ASSIGN_OR_RETURN(d->cache_, KvCache::Create(ko));
  dopt.max_outputs = 1;
  UF_ASSIGN_OR_RETURN(d->decoder_, model::Decoder::Create(draft, d->cache_.get(), dopt, pool));
  d->batch_.Reserve(dopt.max_batch);
  d->cached_.reserve(ko.max_seq_len);
  return d;
}

Status DraftModelDrafter::Draft(std::span<const int32_t> context, int max_k,
                                std::vector<int32_t>* out) {
  out->clear();
  const int64_t size = static_cast<int64_t>(context.size());
  if (max_k <= 0 || size < 1) return OkStatus();
  max_k = std::min<int64_t>(max_k, cache_->max_seq_len() - size);
  if (max_k <= 0) return OkStatus();
  // Keep what the draft cache shares with the context (rejected drafts and anything after a
  // divergence go); the last context token is always fed again, for its logits.
  int64_t common = 0;
  const int64_t limit = std::min<int64_t>(static_cast<int64_t>(cached_.size()), size - 1);
  while (common < limit && cached_[common] == context[common]) ++common;
  if (common < cache_->ResumeFloor(0)) common = 0;  // its window was given back
  cache_->Truncate(0, common);
  cached_.resize(common);
  const int64_t chunk = decoder_->options().max_batch;
  for (int64_t i = common; i < size; i += chunk) {
    const int64_t end = std::min(size, i + chunk);
    batch_.Clear();
    for (int64_t j = i; j < end; ++j) {
      batch_.Add(context[j], static_cast<int32_t>(j), 0, j == size - 1);
    }
    UF_RETURN_IF_ERROR(decoder_->Forward(batch_));
    cached_.insert(cached_.end(), context.begin() + i, context.begin() + end);
  }
  const int32_t n_vocab = static_cast<int32_t>(draft_.config().n_vocab);
  for (int j = 0; j < max_k; ++j) {
    const float* logits = decoder_->logits(0);
    const float max = kernels::MaxValue(logits, n_vocab);
    if (!std::isfinite(max)) break;
    // Top probability = 1 / sum(e^(l - max)).
    const double sum = kernels::ExpSum(logits, n_vocab, max, 1.0f, nullptr, nullptr);
    if (1.0 / sum < p_min_) break;
    const int32_t token = sampling::ArgMax(logits, n_vocab);
    out->push_back(token);
    if (j + 1 == max_k) break;
    batch_.Clear();
    batch_.Add(token, static_cast<int32_t>(size + j), 0, true);
    UF_RETURN_IF_ERROR(decoder_->Forward(batch_));
    cached_.push_back(token);
  }
  return OkStatus();
}

// ---------------------------------------------------------------------------------------------
// SpecController

namespace {
// Weight kept per new observation: the estimates follow ~32 trials / steps, so they adapt within
// a few lines of output when the text switches between copying and free writing.
constexpr double kDecay = 31.0 / 32.0;
// Verify time of n positions relative to one before anything is measured: decode reads the
// weights once and each extra position adds compute (about a tenth of a step on 2 CPU cores).
constexpr double kPriorSlope = 0.1;
}  // namespace

SpecController::SpecController(int max_k, bool adaptive, bool costly_drafter,
                               std::optional<SpecCostModel> fixed_cost)
    : max_k_(std::clamp(max_k, 1, kMaxSpecK)),
      adaptive_(adaptive),
      costly_(costly_drafter),
      fixed_(fixed_cost) {
  if (fixed_) draft_seconds_ = fixed_->draft_seconds;
}

void SpecController::Trial(bool hit) {
  hits_ = hits_ * kDecay + (hit ? 1.0 : 0.0);
  trials_ = trials_ * kDecay + 1.0;
}

void SpecController::ObserveStep(int drafted, int accepted, double seconds) {
  for (int i = 0; i < accepted; ++i) Trial(true);
  if (accepted < drafted) Trial(false);
  const int n = 1 + std::clamp(drafted, 0, kMaxSpecK);
  if (!fixed_ && std::isfinite(seconds) && seconds > 0.0) {
    t_[n] = (t_[n] * w_[n] * kDecay + seconds) / (w_[n] * kDecay + 1.0);
    w_[n] = w_[n] * kDecay + 1.0;
  }
}

void SpecController::ObserveShadow(int checked, int matched) {
  for (int i = 0; i < matched; ++i) Trial(true);
  if (matched < checked) Trial(false);
}

void SpecController::ObserveDraft(int wanted, int drafted, double seconds) {
  // A costly drafter that offers fewer drafts than asked (its model was unsure) counts a miss:
  // otherwise the estimate never learns that drafting keeps coming back empty, and every step
  // would pay for a draft forward that proposes nothing.
  if (drafted < wanted) Trial(false);
  if (fixed_ || !std::isfinite(seconds) || seconds < 0.0) return;
  const double per = seconds / std::max(drafted, 1);
  draft_seconds_ = draft_seconds_ == 0.0 ? per : draft_seconds_ * kDecay + per * (1.0 - kDecay);
}

double SpecController::StepSeconds(int n) const {
  n = std::clamp(n, 1, kMaxSpecK + 1);
  if (fixed_) return fixed_->step_seconds + fixed_->per_position * (n - 1);
  if (w_[n] > 0.5) return t_[n];
  // Unmeasured: interpolate between the nearest measured sizes, else extend the nearest one
  // with the prior slope (relative to one position).
  int lo = n - 1, hi = n + 1;
  while (lo >= 1 && w_[lo] <= 0.5) --lo;
  while (hi <= kMaxSpecK + 1 && w_[hi] <= 0.5) ++hi;
  const bool has_lo = lo >= 1, has_hi = hi <= kMaxSpecK + 1;
  if (has_lo && has_hi) return t_[lo] + (t_[hi] - t_[lo]) * (n - lo) / (hi - lo);
  if (has_lo) return t_[lo] * (1.0 + kPriorSlope * (n - 1)) / (1.0 + kPriorSlope * (lo - 1));
  if (has_hi) return t_[hi] * (1.0 + kPriorSlope * (n - 1)) / (1.0 + kPriorSlope * (hi - 1));
  return 0.0;
}

double SpecController::Gain(int k) const {
  // Expected tokens per second of a step verifying k drafts, relative units.
  const double a = std::clamp(acceptance(), 0.0, 0.999);
  const double tokens = (1.0 - std::pow(a, k + 1)) / (1.0 - a);
  double t = StepSeconds(k + 1);
  if (t <= 0.0) t = 1.0 + kPriorSlope * k;  // nothing measured yet: relative prior
  return tokens / (t + k * draft_seconds_);
}

int SpecController::Choose(int available) const {
  available = std::clamp(available, 0, max_k_);
  if (!adaptive_ || available == 0) return available;
  int best = 0;
  double best_gain = Gain(0);
  for (int k = 1; k <= available; ++k) {
    const double g = Gain(k);
    if (g > best_gain) {
      best_gain = g;
      best = k;
    }
  }
  return best;
}

int SpecController::DraftsWanted() {
  if (!adaptive_ || !costly_) return max_k_;
  // A costly drafter drafts only what the estimate says pays, plus a one-token probe now and
  // then while backed off, so that the estimate can recover.
  const int k = Choose(max_k_);
  if (k > 0) {
    backed_off_steps_ = 0;
    return k;
  }
  return ++backed_off_steps_ % kProbeEvery == 0 ? 1 : 0;
}

}  // namespace uf::engine
