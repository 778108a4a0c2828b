// Chained decoding (GpuForward::ForwardGreedyChain, ForwardSampledChains): a sequence's steps, or
// a decode batch of several sequences' steps, with no host round trip between them. A step's last
// pass writes its token into the next step's input on the device (argmax.comp's feed for a greedy
// chain; sample.comp's draw from the row's best tokens for a sampled one), so the host queues step
// i + 1 before step i ends: the device runs the steps back to back, and the host's turn (the fence,
// the token, the caller's stop checks and the next submit, tens of microseconds a token: issue 28
// measured a submit and fence wait at 40 us on an H200, ~5% of a 1,300 tok/s step) happens while
// the next step runs.
//
// A sampled step's draw on the device is a guess the host checks: the host's sampler draws the
// token from the same reduced row with the same uniform (ChainDecide), and where the two differ
// (a float rounding at an interval's edge, or a draw the best tokens cannot decide) the host's
// token is taken and the step queued with the guess is dropped. A lone stream's chain ends
// there; in a batch of streams only that stream's row is dropped, and the step after it starts the
// stream again from the host's token (chain_redo.comp), so that a draw from outside the best
// tokens (OpenAI's defaults draw from the whole row; the more streams, the likelier some
// stream's step does) does not end the batch's chain. So a chained sampled stream gives one sampled
// step at a time's tokens, and a wrong guess costs its stream one step.
#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>
#include <vector>

#include "base/clock.h"
#include "gpu/vk_forward.h"

namespace uf::gpu {

StatusOr<int64_t> VulkanForward::ForwardGreedyChain(int32_t seq, int32_t token, int32_t pos,
                                                    int64_t n,
                                                    const std::function<bool(int32_t)>& on_token,
                                                    std::span<const int32_t> banned) {
  const auto* ring = static_cast<const uint32_t*>(chain_ring_.mapped());
  model::ChainStream stream;
  stream.seq = seq;
  stream.token = token;
  stream.pos = pos;
  stream.banned = banned;
  UF_ASSIGN_OR_RETURN(const std::vector<int64_t> taken,
                      Chain(std::span<const model::ChainStream>(&stream, 1), n, /*sampled=*/false,
                            [&](int64_t, int64_t p, const float*) -> StatusOr<ChainTake> {
                              ChainTake take;
                              take.token = static_cast<int32_t>(ring[p % kChainRing]);
                              take.more = on_token(take.token);
                              return take;
                            }));
  return taken[0];
}

StatusOr<std::vector<int64_t>> VulkanForward::ForwardSampledChains(
    std::span<const model::ChainStream> streams, int64_t n, const model::ChainsDecide& decide) {
  if (o_.top_k <= 0) return FailedPreconditionError("gpu forward: no top-k reduction to draw from");
  if (n > model::kMaxSampledChainSteps) {
    return InvalidArgumentError("gpu forward: a sampled chain of " + std::to_string(n) +
                                " steps (at most " + std::to_string(model::kMaxSampledChainSteps) +
                                ")");
  }
  auto* d = static_cast<uint32_t*>(chain_draw_.mapped());
  for (size_t i = 0; i < streams.size(); ++i) {
    const model::ChainDraw& draw = streams[i].draw;
    if (static_cast<int64_t>(draw.uniforms.size()) < n) {
      return InvalidArgumentError("gpu forward: a sampled chain of " + std::to_string(n) +
                                  " steps with " + std::to_string(draw.uniforms.size()) +
                                  " uniforms");
    }
    if (!(draw.temperature > 0.0f) || !(draw.top_p > 0.0f) || draw.min_p < 0.0f) {
      return InvalidArgumentError(
          "gpu forward: a sampled chain needs a temperature and top_p above 0, min_p at least 0");
    }
    UF_RETURN_IF_ERROR(CheckEdits(streams[i], n));
  }
  // Streams with bans, bias or penalties: each step's edits on the device (edit_rows.comp).
  bool edited = false;
  for (const model::ChainStream& s : streams) {
    edited = edited || !s.banned.empty() || !s.edits.empty();
  }
  // Written once the streams are known to fit (Chain checks how many).
  const auto write_draws = [&] {
    if (edited) WriteChainEdits(streams);
    for (size_t i = 0; i < streams.size(); ++i) {
      const model::ChainDraw& draw = streams[i].draw;
      uint32_t* di = d + i * kDrawWords;
      std::memcpy(di + 0, &draw.temperature, 4);
      std::memcpy(di + 1, &draw.top_k, 4);
      std::memcpy(di + 2, &draw.top_p, 4);
      std::memcpy(di + 3, &draw.min_p, 4);
      di[4] = 0;  // draws taken
      di[5] = static_cast<uint32_t>(std::max<int64_t>(n, 1));
      std::memcpy(di + Kernels::kDrawHeaderWords, draw.uniforms.data(),
                  std::max<int64_t>(n, 1) * 4);
    }
  };
  const auto* ring = static_cast<const uint32_t*>(chain_ring_.mapped());
  const auto* tops = static_cast<const uint32_t*>(chain_top_.mapped());
  const int64_t row_words = 2 * o_.top_k + 2;
  const auto* known = edited ? static_cast<const uint32_t*>(chain_known_.mapped()) : nullptr;
  const int64_t known_words = Kernels::EditRingWords(chain_known_cap_);
  const auto on_step = [&](int64_t i, int64_t p, const float* whole) -> StatusOr<ChainTake> {
    const int64_t at = i * kChainRing + p % kChainRing;
    model::TopRow row = TopRowOf(tops + at * row_words, o_.top_k, c_.n_vocab);
    if (known != nullptr) {  // the step's edited tokens with their raw logits
      const uint32_t* k = known + at * known_words;
      row.n_known = static_cast<int32_t>(std::min<uint32_t>(k[0], chain_known_cap_));
      row.known_ids = reinterpret_cast<const int32_t*>(k + 1);
      row.known_logits = reinterpret_cast<const float*>(k + 1 + chain_known_cap_);
      if (whole != nullptr) {  // the row as it was before they went to -inf, bans at -inf
        auto* w = const_cast<float*>(whole);
        for (int32_t j = 0; j < row.n_known; ++j) w[row.known_ids[j]] = row.known_logits[j];
        for (int32_t id : streams[i].banned) w[id] = -std::numeric_limits<float>::infinity();
      }
    }
    rows_reduced_ += whole == nullptr;
    model::ChainTurn turn;
    const int32_t t = decide(i, row, whole, static_cast<int32_t>(ring[at]), &turn);
    if (t < 0 && whole != nullptr) {
      return InternalError("gpu forward: a sampled chain's decider drew no token");
    }
    return ChainTake{t, turn.more, turn.draws};
  };
  return Chain(streams, n, /*sampled=*/true, on_step, write_draws);
}

void VulkanForward::WriteChainEdits(std::span<const model::ChainStream> streams) {
  static_assert(Kernels::kEditSteps == model::kMaxSampledChainSteps);
  const int64_t cap = chain_known_cap_, words = Kernels::EditStateWords(cap);
  for (size_t i = 0; i < streams.size(); ++i) {
    const model::ChainStream& s = streams[i];
    const model::ChainEdits& e = s.edits;
    uint32_t* st = static_cast<uint32_t*>(chain_edit_.mapped()) + i * words;
    std::fill(st, st + 8, 0u);
    const bool penal = e.last_n > 0;
    st[1] = penal ? static_cast<uint32_t>(e.last_n) : 0u;
    st[2] = penal ? static_cast<uint32_t>(e.window.size()) : 0u;
    st[3] = static_cast<uint32_t>(s.pos);
    std::memcpy(st + 4, &e.repeat_penalty, 4);
    std::memcpy(st + 5, &e.presence_penalty, 4);
    std::memcpy(st + 6, &e.frequency_penalty, 4);
    // S: the edits' tokens and the bans, by id (so that a row with bans alone lists what a
    // plain step's does, Sampler::EditedTokens' sorted ids: the same logprobs to the bit).
    struct Entry {
      int32_t id;
      float bias;
      int32_t count;
      bool banned;
    };
    std::vector<Entry> list;
    const auto is_banned = [&](int32_t id) {
      return std::find(s.banned.begin(), s.banned.end(), id) != s.banned.end();
    };
    for (size_t j = 0; j < e.ids.size(); ++j) {
      list.push_back({e.ids[j], e.bias[j], penal ? e.counts[j] : 0, is_banned(e.ids[j])});
    }
    for (int32_t id : s.banned) {
      const bool listed = std::find(e.ids.begin(), e.ids.end(), id) != e.ids.end() ||
                          std::any_of(list.begin() + e.ids.size(), list.end(),
                                      [&](const Entry& x) { return x.id == id; });
      if (!listed) list.push_back({id, 0.0f, 0, true});
    }
    std::sort(list.begin(), list.end(), [](const Entry& a, const Entry& b) { return a.id < b.id; });
    uint32_t* entry = st + 8;
    for (size_t j = 0; j < list.size(); ++j) {
      uint32_t* x = entry + 4 * j;
      x[0] = static_cast<uint32_t>(list[j].id);
      std::memcpy(x + 1, &list[j].bias, 4);
      x[2] = static_cast<uint32_t>(list[j].count);
      x[3] = list[j].banned ? 1u : 0u;
    }
    st[0] = static_cast<uint32_t>(list.size());
    // The start window's oldest tokens (only those leave it within a chain).
    uint32_t* init = st + 8 + 4 * cap;
    const size_t n_init = penal ? std::min<size_t>(e.window.size(), Kernels::kEditSteps) : 0;
    for (size_t j = 0; j < n_init; ++j) init[j] = static_cast<uint32_t>(e.window[j]);
  }
}

Status VulkanForward::FetchChainRows(int slot, std::span<const int64_t> rows) {
  if (chain_fetch_[slot] == nullptr) {
    auto r = std::make_unique<Recorder>(ctx_.get());
    k_.CopyRows(r.get(), chain_logits_[slot], logits_dev_, full_, c_.n_vocab, chain_streams_);
    UF_RETURN_IF_ERROR(r->Finish());
    chain_fetch_[slot] = std::move(r);
  }
  // Only the rows flagged for copy_rows.comp (the others' workgroups return at once).
  auto* flags = static_cast<uint32_t*>(full_.mapped());
  std::fill(flags, flags + chain_streams_, 0u);
  for (int64_t row : rows) flags[row] = 1;
  rows_fetched_ += static_cast<int64_t>(rows.size());
  return chain_fetch_[slot]->Submit();
}

Status VulkanForward::CheckChain(std::span<const model::ChainStream> streams, int64_t n) const {
  if (n < 1) return InvalidArgumentError("gpu forward: a chain needs at least one step");
  const auto b = static_cast<int64_t>(streams.size());
  if (b < 1 || b > chain_streams_) {
    return InvalidArgumentError("gpu forward: a chain of " + std::to_string(b) +
                                " streams; this forward chains 1 to " +
                                std::to_string(chain_streams_));
  }
  for (int64_t i = 0; i < b; ++i) {
    const model::ChainStream& s = streams[i];
    UF_RETURN_IF_ERROR(CheckToken(s.token));
    UF_RETURN_IF_ERROR(CheckSequence(s.seq));
    for (int64_t j = 0; j < i; ++j) {
      if (streams[j].seq == s.seq) {
        return InvalidArgumentError("gpu forward: sequence " + std::to_string(s.seq) +
                                    " is in a chain twice");
      }
    }
    UF_RETURN_IF_ERROR(CheckStart(s.seq, s.pos));
    if (s.pos + n > max_len_) {
      return OutOfRangeError("gpu forward: a chain of " + std::to_string(n) +
                             " steps from position " + std::to_string(s.pos) +
                             " passes the cache's " + std::to_string(max_len_) + " positions");
    }
    if (!s.banned.empty() &&
        (!known_.valid() || static_cast<int64_t>(s.banned.size()) > o_.max_known)) {
      return InvalidArgumentError("gpu forward: a chain bans " + std::to_string(s.banned.size()) +
                                  " tokens; this forward masks at most " +
                                  std::to_string(known_.valid() ? o_.max_known : 0));
    }
    for (int32_t id : s.banned) {
      if (id < 0 || id >= c_.n_vocab) {
        return InvalidArgumentError("gpu forward: banned token " + std::to_string(id) +
                                    " is outside the vocabulary");
      }
    }
  }
  return OkStatus();
}

Status VulkanForward::CheckEdits(const model::ChainStream& s, int64_t n) const {
  const model::ChainEdits& e = s.edits;
  if (e.empty() && s.banned.empty()) return OkStatus();
  const int64_t k = model::ChainKnown(s, n);
  if (k > chain_known_cap_) {
    return InvalidArgumentError("gpu forward: a chain of " + std::to_string(n) + " steps lists " +
                                std::to_string(k) + " edited tokens; this forward lists at most " +
                                std::to_string(chain_known_cap_));
  }
  if (e.bias.size() != e.ids.size() || e.counts.size() != e.ids.size()) {
    return InvalidArgumentError("gpu forward: a chain's edits need a bias and a count per token");
  }
  if (e.last_n < 0 || (e.last_n > 0 && static_cast<int64_t>(e.window.size()) > e.last_n)) {
    return InvalidArgumentError("gpu forward: a chain's penalty window is longer than last_n");
  }
  // Sorted, so that a served window (every generated token) costs W log K, not W x K.
  std::vector<int32_t> sorted(e.ids.begin(), e.ids.end());
  std::sort(sorted.begin(), sorted.end());
  for (size_t j = 0; j < sorted.size(); ++j) {
    const int32_t id = sorted[j];
    if (id < 0 || id >= c_.n_vocab) {
      return InvalidArgumentError("gpu forward: edited token " + std::to_string(id) +
                                  " is outside the vocabulary");
    }
    if (j > 0 && sorted[j - 1] == id) {
      return InvalidArgumentError("gpu forward: edited token " + std::to_string(id) +
                                  " is listed twice");
    }
  }
  // Every window token must be listed (its count is the device's start).
  for (int32_t t : e.window) {
    if (!std::binary_search(sorted.begin(), sorted.end(), t)) {
      return InvalidArgumentError("gpu forward: window token " + std::to_string(t) +
                                  " is not among the edited tokens");
    }
  }
  return OkStatus();
}

StatusOr<std::vector<int64_t>> VulkanForward::Chain(std::span<const model::ChainStream> streams,
                                                    int64_t n, bool sampled,
                                                    const ChainStep& on_step,
                                                    const std::function<void()>& setup) {
  UF_RETURN_IF_ERROR(CheckChain(streams, n));
  UF_CHECK(sampled || streams.size() == 1) << "a greedy chain runs one stream";
  const auto b = static_cast<int64_t>(streams.size());
  bool masked = false;  // a sampled chain's: edit_rows.comp (written by the caller's setup)
  for (const model::ChainStream& s : streams) {
    masked = masked || !s.banned.empty() || (sampled && !s.edits.empty());
  }
  for (int32_t s : touched_) seq_next_[s] = -1;  // a Run's batch, as Prepare forgets it
  touched_.clear();
  for (int64_t i = 0; i < b; ++i) {
    if (Status s = cache_->Reserve(streams[i].seq, streams[i].pos + n); !s.ok()) {
      for (int64_t j = 0; j <= i; ++j) {  // blocks reserved here, never filled
        cache_->Truncate(streams[j].seq, cache_->Length(streams[j].seq));
      }
      return s;
    }
  }
  if (setup) setup();
  // A batch of sampled chains redoes an overruled stream's step (chain_redo.comp); nothing to
  // redo yet in either slot.
  const bool redo = ChainRedoes(sampled, b);
  uint32_t* redo_rows[kChainDepth] = {};
  if (redo) {
    for (int k = 0; k < kChainDepth; ++k) {
      redo_rows[k] = static_cast<uint32_t*>(chain_redo_[k].mapped());
      std::fill(redo_rows[k], redo_rows[k] + 4 * b, 0u);
    }
  }
  // Each row's first step's input from the host; every later one's from the step before it.
  const int64_t bs = cache_->block_size();
  auto* tok = static_cast<uint32_t*>(tok_.mapped());
  auto* outs = static_cast<uint32_t*>(outs_.mapped());
  auto* known = masked && !sampled ? static_cast<uint32_t*>(known_.mapped()) : nullptr;
  int64_t depth = 0;
  for (int64_t i = 0; i < b; ++i) {
    const model::ChainStream& s = streams[i];
    const int32_t* table = cache_->BlockTable(s.seq);
    std::memcpy(static_cast<int32_t*>(bt_.mapped()) + s.seq * max_blocks_, table,
                (s.pos + n + bs - 1) / bs * 4);
    tok[4 * i] = static_cast<uint32_t>(s.token);
    tok[4 * i + 1] = static_cast<uint32_t>(s.pos);
    tok[4 * i + 2] = static_cast<uint32_t>(table[s.pos / bs] * bs + s.pos % bs);
    tok[4 * i + 3] = static_cast<uint32_t>(s.seq);
    outs[i] = static_cast<uint32_t>(i);
    if (known != nullptr) {  // row i's known tokens: masked to -inf ahead of every step's draw
      uint32_t* dst = known + i * (o_.max_known + 1);
      dst[0] = static_cast<uint32_t>(s.banned.size());
      for (size_t j = 0; j < s.banned.size(); ++j) dst[1 + j] = static_cast<uint32_t>(s.banned[j]);
    }
    depth = std::max<int64_t>(depth, s.pos);
  }
  n_outputs_ = b;
  last_mode_ = Out::kGreedy;  // nothing for FetchLogits
  last_trial_ = false;
  if (chain_recordings_.size() > kMaxChainRecordings) {
    chain_recordings_.clear();  // nothing in flight between chains
    last_ = nullptr;
  }

  struct InFlight {
    Recorder* rec;
    int64_t step;
    Trial trial;
    double submitted;
  };
  std::deque<InFlight> flight;
  Status status;
  const auto* ring = static_cast<const uint32_t*>(chain_ring_.mapped());
  std::vector<int64_t> taken(b, 0);
  std::vector<uint8_t> ended(b, 0);
  // Per stream: the first step whose row counts again after a redo (the one queued behind the
  // overruled step ran from the device's draw).
  std::vector<int64_t> resume(b, 0);
  bool stop = false;  // a stream ended: nothing more is queued
  // Stream i's token taken at position p: one other than the device's (fed to the steps queued
  // behind) ends a lone stream's chain; in a batch the step `from` starts the stream again from
  // it (chain_redo.comp, reading the rows written into slot redo_slot's buffer).
  const auto take_row = [&](int64_t i, int64_t p, const ChainTake& take, int64_t from,
                            int redo_slot) {
    ++taken[i];
    bool more = take.more;
    if (take.token != static_cast<int32_t>(ring[i * kChainRing + p % kChainRing]) && more) {
      if (redo) {
        uint32_t* row = redo_rows[redo_slot] + 4 * i;
        row[0] = 1;
        row[1] = static_cast<uint32_t>(take.token);
        row[2] = static_cast<uint32_t>(p);
        row[3] = static_cast<uint32_t>(take.draws);
        resume[i] = from;
      } else {
        more = false;
      }
    }
    if (!more) {
      ended[i] = 1;
      stop = true;
    }
  };
  // A batch's rows whose draw needs the whole row: copied behind the step queued after theirs
  // (fetch_slot's rows), the host going on meanwhile, and judged as that step ends. Their stream's
  // next two steps ran from the device's draw: dropped where the judge draws another token.
  std::vector<int64_t> fetching;
  int fetch_slot = -1;
  const auto judge_fetched = [&](int64_t from, int redo_slot) {
    if (fetch_slot < 0) return;
    const int copied = fetch_slot;
    fetch_slot = -1;
    if (Status s = chain_fetch_[copied]->Wait(); !s.ok()) {
      if (status.ok()) status = s;
      return;
    }
    const auto* rows = static_cast<const float*>(logits_dev_.mapped());
    for (int64_t i : fetching) {
      const int64_t p = streams[i].pos + taken[i] + 1;
      StatusOr<ChainTake> take = on_step(i, p, rows + i * c_.n_vocab);
      if (!take.ok()) {
        status = take.status();
        return;
      }
      take_row(i, p, *take, from, redo_slot);
    }
    fetching.clear();
  };
  // Waits for the oldest step; each stream that has not ended takes its row.
  const auto finish = [&] {
    const InFlight f = flight.front();
    flight.pop_front();
    if (Status s = f.rec->Wait(); !s.ok()) {
      if (status.ok()) status = s;
      return;
    }
    last_ = f.rec;
    if (f.trial.tuner != nullptr) ReportTrial(f.trial, *f.rec, f.submitted);
    const int slot = static_cast<int>(f.step % kChainDepth);
    // This step read its slot's redo rows; the step two behind it reads what is written now.
    if (redo) std::fill(redo_rows[slot], redo_rows[slot] + 4 * b, 0u);
    judge_fetched(f.step + 2, slot);
    for (int64_t i = 0; i < b && status.ok(); ++i) {
      // Queued past the stream's last taken token, or behind its overruled step: dropped.
      if (ended[i] != 0 || f.step < resume[i]) continue;
      // The stream's next position: a redone step computes its position again.
      const int64_t p = streams[i].pos + taken[i] + 1;
      StatusOr<ChainTake> take = on_step(i, p, nullptr);
      if (take.ok() && take->token < 0) {
        if (redo) {  // judged once its row is copied, behind the step queued after this one
          fetching.push_back(i);
          continue;
        }
        // A lone stream's row: still in the slot's buffer (the step behind this one writes the
        // other slot's), copied once that step ends.
        const int64_t one = i;
        if (Status s = FetchChainRows(slot, std::span<const int64_t>(&one, 1)); !s.ok()) {
          status = s;
          return;
        }
        if (Status s = chain_fetch_[slot]->Wait(); !s.ok()) {
          status = s;
          return;
        }
        take = on_step(i, p, static_cast<const float*>(logits_dev_.mapped()) + i * c_.n_vocab);
      }
      if (!take.ok()) {
        status = take.status();
        return;
      }
      take_row(i, p, *take, f.step + 2, slot);
    }
    if (!fetching.empty() && status.ok()) {
      if (Status s = FetchChainRows(slot, fetching); !s.ok()) {
        status = s;
        return;
      }
      fetch_slot = slot;
    }
  };
  for (int64_t i = 0; i < n && !stop && status.ok(); ++i) {
    Trial trial;
    const StepWay way = ChooseWay(b, false, depth + i + 1, &trial);
    // A trial is timed alone: nothing queued before it (a wall-clock time would include that)
    // and nothing behind it until it ends (the tuner's next pick waits for its time).
    while (!flight.empty() &&
           (trial.tuner != nullptr || flight.size() >= static_cast<size_t>(kChainDepth))) {
      finish();
    }
    if (stop || !status.ok()) break;
    auto rec = ChainRecording(way, static_cast<int>(i % kChainDepth), masked, sampled, b);
    if (!rec.ok()) {
      status = rec.status();
      break;
    }
    const double submitted = NowSeconds();
    if (Status s = (*rec)->Submit(); !s.ok()) {
      status = s;
      break;
    }
    flight.push_back({*rec, i, trial, submitted});
    last_trial_ = last_trial_ || trial.tuner != nullptr;
    if (trial.tuner != nullptr) finish();
  }
  while (!flight.empty()) finish();
  judge_fetched(n, 0);  // rows of the last step (no step reads a redo any more)
  // The taken steps' K/V stay; the dropped ones' rows lie past the sequence's end.
  for (int64_t i = 0; i < b; ++i) {
    const int64_t keep = streams[i].pos + taken[i];
    cache_->Truncate(streams[i].seq, keep);
    cache_->SetLength(streams[i].seq, keep);
  }
  if (!status.ok()) return status;
  return taken;
}

}  // namespace uf::gpu
