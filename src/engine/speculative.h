// Speculative decoding: a drafter proposes the next few tokens of a sequence cheaply, the target
// model checks all of them in one forward pass over k + 1 positions (the pending token and the k
// drafts, every one wanting logits), and the sequence keeps the drafts up to the first one the
// target would not have produced, plus the target's own token at that position. The weights are
// read once for up to k + 1 tokens, which is how one stream goes past the bandwidth roofline.
//
// Lossless. Row i of the verify step is sampled with the request's own sampler chain, in order,
// exactly as plain decoding would sample it; draft i + 1 is accepted when the sampled token
// equals it, and the first row whose token differs ends the step with that token. Every drafter
// here proposes deterministically (a point mass q = 1 on its token), and for such a proposal
// "accept with probability min(1, p(x) / q(x)), else draw from the normalised residual
// max(0, p - q)" is exactly "draw y ~ p, accept iff y == x": both accept with probability p(x),
// and on rejection both draw y != x with probability p(y) / (1 - p(x)). So the output follows the
// target's distribution at any temperature, and because each emitted token uses the same draw of
// the same seeded generator as plain decoding, a seeded request yields the very same tokens with
// speculation on or off (given the same logits; the batched kernels compute every row exactly as
// a single-row pass would, which tests check).
//
// KV rollback: the positions of rejected drafts are truncated from the paged cache
// (KvCache::Truncate). They lie past the sequence's verified tokens, so no published prefix block
// ever holds them.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "engine/kv_cache.h"
#include "engine/request.h"
#include "model/decoder.h"
#include "model/model.h"

namespace uf::engine {

// "off", "ngram", "draft", "oracle".
std::string_view SpecModeName(SpecMode mode);

// Proposes tokens that may follow a sequence. Proposals cost the target nothing until verified.
class Drafter {
 public:
  virtual ~Drafter() = default;
  // context: every token of the sequence so far (prompt, then output; the last one is the
  // pending token, not yet in the target's KV cache). Sets *out to at most max_k proposed next
  // tokens, possibly none.
  virtual Status Draft(std::span<const int32_t> context, int max_k, std::vector<int32_t>* out) = 0;
  // True when drafting runs a model (the controller then weighs the drafting time too).
  virtual bool costly() const { return false; }
};

// Prompt lookup: finds the most recent earlier occurrence of the context's last n tokens (n from
// max_n down to min_n) and proposes what followed it. Input-grounded output (edits, quotes,
// extraction, code that repeats identifiers) follows its context closely. The n-grams are
// indexed incrementally in an open-addressing table, so a lookup costs O(max_n) and a new token
// O(max_n) to index, whatever the context length. A reference text (OpenAI's `prediction`) is
// indexed the same way and searched first.
class NgramDrafter final : public Drafter {
 public:
  explicit NgramDrafter(int min_n = 2, int max_n = 5);
  Status Draft(std::span<const int32_t> context, int max_k, std::vector<int32_t>* out) override;
  // Tokens the output is expected to resemble (replaces any earlier reference).
  void SetReference(std::vector<int32_t> tokens);

 private:
  // Positions where each n-gram (n in [min_n, max_n]) of a token array last ended.
  class Index {
   public:
    // Indexes the n-grams ending at positions [indexed(), end) of tokens (a sequence only grows:
    // one index per sequence; a shorter one starts the index over).
    void Extend(std::span<const int32_t> tokens, int64_t end, int min_n, int max_n);
    // The last indexed end position of an occurrence of gram in tokens, or -1.
    int64_t Find(std::span<const int32_t> tokens, std::span<const int32_t> gram) const;
    void Clear();
    int64_t indexed() const { return indexed_; }

   private:
    static uint64_t Hash(const int32_t* gram, int n);
    void Insert(uint64_t key, int64_t end);
    void Grow();
    std::vector<uint64_t> keys_;  // [capacity] hash + 1 (0 = empty)
    std::vector<int64_t> ends_;   // [capacity] end position of the n-gram
    int64_t used_ = 0;
    int64_t indexed_ = 0;  // positions indexed so far
  };
  // Appends the continuation after the n-gram of `source` that ended at `end`.
  static void Continue(std::span<const int32_t> source, int64_t end, int max_k,
                       std::vector<int32_t>* out);

  int min_n_, max_n_;
  Index context_index_;
  Index reference_index_;
  std::vector<int32_t> reference_;
};

// Proposes a known continuation: for benchmarks only (drafts that are always right isolate the
// verification cost from draft quality). `sequence` is prompt + expected output.
class OracleDrafter final : public Drafter {
 public:
  explicit OracleDrafter(std::vector<int32_t> sequence) : sequence_(std::move(sequence)) {}
  Status Draft(std::span<const int32_t> context, int max_k, std::vector<int32_t>* out) override;

 private:
  std::vector<int32_t> sequence_;
};

// A smaller model with the same vocabulary, run greedily by the same engine with its own KV
// cache (one sequence). Drafting stops early when the draft model's top probability falls below
// p_min (its guess is then likely wrong, and the verify rows would be wasted).
class DraftModelDrafter final : public Drafter {
 public:
  // InvalidArgument naming both sizes when the vocabularies differ. draft and pool must outlive
  // the drafter; ctx is the longest sequence it will see.
  static StatusOr<std::unique_ptr<DraftModelDrafter>> Create(const model::Model& draft,
                                                             int64_t target_vocab, int64_t ctx,
                                                             ThreadPool* pool, float p_min = 0.6f);
  Status Draft(std::span<const int32_t> context, int max_k, std::vector<int32_t>* out) override;
  bool costly() const override { return true; }

 private:
  DraftModelDrafter(const model::Model& draft, float p_min) : draft_(draft), p_min_(p_min) {}

  const model::Model& draft_;
  float p_min_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<model::Decoder> decoder_;
  model::Batch batch_;
  std::vector<int32_t> cached_;  // tokens whose K/V the draft cache holds, in order
};

// Checks that a draft model can serve a target: same vocabulary size.
Status CheckDraftVocabulary(int64_t draft_vocab, int64_t target_vocab);

// Adaptive k. Keeps an estimate of the per-token acceptance rate a (each draft is right with
// probability a given that the ones before it were) and of the verify step's time per number of
// positions, and picks the k that maximises expected tokens per second:
//   E[tokens](k) = (1 - a^(k+1)) / (1 - a),   cost(k) = t(k + 1) + k * t_draft.
// When no k > 0 beats plain decoding it returns 0: the stream decodes normally, and proposals
// that were not verified are still compared with what was sampled (free for the n-gram drafter),
// so the estimate recovers when drafts become good again. A costly drafter is asked for one
// draft every kProbeEvery steps while backed off, to keep its estimate alive.
// Fixed costs for a SpecController that should not measure (tests: which k it picks then follows
// from acceptance alone, however loaded the machine is). Seconds; only their ratios matter.
struct SpecCostModel {
  double step_seconds = 1.0;   // verify step over one position (plain decode)
  double per_position = 0.1;   // each further position of a verify step
  double draft_seconds = 0.0;  // per drafted token
};

class SpecController {
 public:
  // max_k in [1, kMaxSpecK]. adaptive = false always verifies max_k (or what was proposed).
  // fixed_cost: use these costs and ignore measured times.
  SpecController(int max_k, bool adaptive, bool costly_drafter,
                 std::optional<SpecCostModel> fixed_cost = std::nullopt);

  // Drafts to ask the drafter for this step (0: do not draft).
  int DraftsWanted();
  // Of `available` proposals, how many to verify this step.
  int Choose(int available) const;
  // A verify step over 1 + drafted positions took `seconds`; `accepted` drafts were right.
  void ObserveStep(int drafted, int accepted, double seconds);
  // A proposal left unverified: `matched` of its first tokens equal what was sampled, out of
  // `checked` compared (the comparison stops at the first mismatch).
  void ObserveShadow(int checked, int matched);
  // Asked for `wanted` drafts, the drafter gave `drafted` in `seconds` (costly drafters).
  void ObserveDraft(int wanted, int drafted, double seconds);

  int max_k() const { return max_k_; }
  double acceptance() const { return hits_ / trials_; }
  // Predicted verify time for n positions (seconds; 0 before any measurement).
  double StepSeconds(int n) const;

 private:
  static constexpr int kProbeEvery = 16;
  void Trial(bool hit);
  double Gain(int k) const;

  int max_k_;
  bool adaptive_;
  bool costly_;
  std::optional<SpecCostModel> fixed_;
  double hits_ = 1.0, trials_ = 2.0;       // decayed Bernoulli counts (prior: a = 0.5, 2 trials)
  std::array<double, kMaxSpecK + 2> t_{};  // [n] decayed mean verify time of n positions
  std::array<double, kMaxSpecK + 2> w_{};  // [n] its decayed weight
  double draft_seconds_ = 0.0;             // per drafted token (per call when none)
  int64_t backed_off_steps_ = 0;
};

// Acceptance statistics of a stream or a server.
struct SpecStats {
  int64_t drafted = 0;       // drafts verified
  int64_t accepted = 0;      // drafts the target agreed with
  int64_t verify_steps = 0;  // steps that verified at least one draft
  // [accepted drafts per verify step, 0..kMaxSpecK]
  std::array<int64_t, kMaxSpecK + 1> accepted_hist{};

  void Add(int drafted_now, int accepted_now) {
    if (drafted_now <= 0) return;
    drafted += drafted_now;
    accepted += accepted_now;
    ++verify_steps;
    ++accepted_hist[accepted_now];
  }
  // Mean tokens per verify step (accepted drafts + the target's own token).
  double mean_accepted_length() const {
    return verify_steps > 0 ? 1.0 + static_cast<double>(accepted) / verify_steps : 0.0;
  }
};

}  // namespace uf::engine
