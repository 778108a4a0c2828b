#include "model/decoder.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "kernels/quant.h"

namespace uf::model {
namespace {

// Below this many float operations an elementwise step runs on the calling thread: a pool
// dispatch costs about a microsecond, which is more than the work itself for a decode step.
constexpr int64_t kParallelThreshold = 1 << 15;
// Tokens of one sequence per attention item (see Decoder::Attention).
constexpr int64_t kAttentionTokens = 4;

std::vector<std::vector<const kernels::Matrix*>> GroupByActivation(
    const std::vector<const kernels::Matrix*>& ws) {
  std::vector<std::vector<const kernels::Matrix*>> groups;
  for (const kernels::Matrix* w : ws) {
    bool placed = false;
    for (auto& g : groups) {
      if (kernels::ActivationType(g[0]->type()) == kernels::ActivationType(w->type())) {
        g.push_back(w);
        placed = true;
        break;
      }
    }
    if (!placed) groups.push_back({w});
  }
  return groups;
}

}  // namespace

void UseSlidingWindowPool(const ModelConfig& c, int64_t slack, engine::KvCacheOptions* co) {
  if (c.n_swa <= 0) return;
  if (const char* env = std::getenv("UF_SWA_CACHE"); env != nullptr && std::string(env) == "0") {
    return;
  }
  co->swa_layers.assign(c.n_layer, 0);
  for (int64_t il = 0; il < c.n_layer; ++il) co->swa_layers[il] = c.IsSwaLayer(il);
  co->swa_window = c.n_swa;
  co->swa_slack = std::max<int64_t>(0, slack);
  co->swa_blocks = 0;
}

Decoder::Decoder(const Model& model, engine::KvCache* cache, const DecoderOptions& options,
                 ThreadPool* pool)
    : model_(model), config_(model.config()), cache_(cache), options_(options), pool_(pool) {}

StatusOr<std::unique_ptr<Decoder>> Decoder::Create(const Model& model, engine::KvCache* cache,
                                                   const DecoderOptions& options,
                                                   ThreadPool* pool) {
  UF_CHECK(cache != nullptr && pool != nullptr);
  const ModelConfig& c = model.config();
  const engine::KvCacheOptions& co = cache->options();
  if (co.n_layer != c.n_layer || co.n_head_kv != c.n_head_kv || co.head_dim != c.head_dim) {
    return InvalidArgumentError("decoder: kv cache shape does not match the model");
  }
  if (!co.host_storage) {
    return InvalidArgumentError("decoder: the kv cache has no host storage (a device's cache)");
  }
  for (int64_t il = 0; il < c.n_layer && cache->windowed(); ++il) {
    // A windowed pool holds only the window: a layer that sees more would read given-back K/V.
    if (cache->IsWindowedLayer(il) && (!c.IsSwaLayer(il) || co.swa_window < c.n_swa)) {
      return InvalidArgumentError("decoder: the kv cache's sliding window does not match layer " +
                                  std::to_string(il) + " of the model");
    }
  }
  DecoderOptions o = options;
  if (o.max_batch <= 0 || o.max_batch > (int64_t{1} << 20)) {
    return InvalidArgumentError("decoder: max_batch must be in [1, 2^20]");
  }
  if (o.max_outputs <= 0) o.max_outputs = o.max_batch;
  o.max_outputs = std::min(o.max_outputs, o.max_batch);
  std::unique_ptr<Decoder> d(new Decoder(model, cache, o, pool));
  try {
    d->Allocate();
  } catch (const std::bad_alloc&) {
    return ResourceExhaustedError("decoder: cannot allocate scratch buffers for a batch of " +
                                  std::to_string(o.max_batch) + " tokens");
  }
  return d;
}

void Decoder::Allocate() {
  const ModelConfig& c = config_;
  const int64_t b = options_.max_batch;
  x_.resize(b * c.n_embd);
  xn_.resize(b * c.n_embd);
  q_.resize(b * c.q_dim());
  k_.resize(b * c.kv_dim());
  v_.resize(b * c.kv_dim());
  attn_.resize(b * c.q_dim());
  y_.resize(b * c.n_embd);
  if (!c.is_moe()) {
    gate_.resize(b * c.n_ff);
    up_.resize(b * c.n_ff);
  }
  AllocateMoe();
  rope_cs_.resize(b * c.rope_dim);
  const int64_t threads = pool_->size(), bs = cache_->block_size();
  const int64_t rows = kAttentionTokens * (c.n_head / c.n_head_kv);  // query rows per item
  const int64_t state = rows * (c.head_dim + 2);
  const int64_t max_blocks = (cache_->max_seq_len() + bs - 1) / bs;
  attn_chunk_ = bs * std::max<int64_t>(1, kernels::kAttentionChunk / bs);
  attn_thread_floats_ = kernels::AttentionScratchFloats(rows, c.head_dim, bs, attn_chunk_) +
                        rows * c.head_dim + 2 * state;
  attn_scratch_.resize(threads * attn_thread_floats_);
  attn_blocks_.resize(threads * 2 * max_blocks);
  attn_visible_.resize(threads * rows);
  attn_first_.resize(threads * rows);
  // Split mode runs only while items < 2 x threads (Forward), each of at most this many chunks.
  max_split_units_ = 2 * threads * ((cache_->max_seq_len() + attn_chunk_ - 1) / attn_chunk_);
  split_units_.reserve(max_split_units_);
  split_partials_.resize(max_split_units_ * state);
  attn_groups_.reserve(b + 1);
  attn_group_keys_.reserve(b);
  xo_.resize(options_.max_outputs * c.n_embd);
  logits_.resize(options_.max_outputs * c.n_vocab);
  seq_next_.assign(cache_->max_seqs(), -1);
  touched_seqs_.reserve(std::min<int64_t>(b, cache_->max_seqs()));

  rope_.rope_dim = c.rope_dim;
  rope_.freq_base = c.rope_freq_base;
  rope_.freq_scale = c.rope_freq_scale;
  rope_.neox = c.rope_type == RopeType::kNeox;
  const auto& ff = model_.weights().rope_freq_factors;
  rope_.freq_factors = ff.empty() ? nullptr : ff.data();
  rope_.ext_factor = c.rope_ext_factor;
  rope_.yarn_low = c.rope_yarn_low;
  rope_.yarn_high = c.rope_yarn_high;
  rope_.mscale = c.rope_mscale;
  attn_scale_ = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  kv_type_ = cache_->type();
  keys_transposed_ = cache_->keys_transposed();
  kernel_kv_type_ = kv_type_ == engine::KvType::kF16    ? GgmlType::kF16
                    : kv_type_ == engine::KvType::kQ8_0 ? GgmlType::kQ8_0
                                                        : GgmlType::kF32;

  const auto& layers = model_.weights().layers;
  qkv_groups_.clear();
  ffn_groups_.clear();
  qkv_groups_.resize(c.n_layer);
  ffn_groups_.resize(c.n_layer);
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const LayerWeights& l = layers[il];
    auto out_of = [&](const kernels::Matrix* w) -> float* {
      if (w == &l.wq) return q_.data();
      if (w == &l.wk) return k_.data();
      if (w == &l.wv) return v_.data();
      if (w == &l.gate) return gate_.data();
      return up_.data();
    };
    std::vector<std::pair<std::vector<const kernels::Matrix*>, std::vector<MatGroup>*>> sets = {
        {{&l.wq, &l.wk, &l.wv}, &qkv_groups_[il]}};
    if (l.exp_gate.empty()) sets.push_back({{&l.gate, &l.up}, &ffn_groups_[il]});
    for (auto& [ws, groups] : sets) {
      for (auto& g : GroupByActivation(ws)) {
        MatGroup mg;
        mg.ws = g;
        for (const kernels::Matrix* w : g) mg.ys.push_back(out_of(w));
        groups->push_back(std::move(mg));
      }
    }
  }
  const char* env = std::getenv("UF_SINGLE_DISPATCH");
  single_dispatch_ = options_.single_dispatch && !(env != nullptr && std::string(env) == "0");
  for (int64_t il = 0; il < c.n_layer; ++il) {
    single_dispatch_ = single_dispatch_ && qkv_groups_[il].size() == 1 &&
                       (ffn_groups_[il].size() == 1 || !layers[il].exp_gate.empty());
  }
  ranges_ = std::make_unique<kernels::ChunkRange[]>(threads);
  if (single_dispatch_) InitTasks();
}

template <typename F>
void Decoder::ForRows(int64_t n, int64_t row_cost, const F& fn) {
  if (pool_->size() == 1 || n < 2 || n * row_cost < kParallelThreshold) {
    fn(int64_t{0}, n);
    return;
  }
  // Captures two references only, so std::function stores it without allocating.
  pool_->Run([&fn, &n](int i, int nt) {
    const int64_t per = (n + nt - 1) / nt;
    const int64_t begin = std::min(n, i * per), end = std::min(n, begin + per);
    if (begin < end) fn(begin, end);
  });
}

void Decoder::RunGroups(const std::vector<MatGroup>& groups, const float* x, int64_t n) {
  for (const MatGroup& g : groups) {
    if (g.ws.size() == 1) {
      kernels::MatMul(*g.ws[0], x, n, g.ys[0], pool_);
    } else {
      kernels::MatMulMulti(g.ws, x, n, g.ys, pool_);
    }
  }
}

Status Decoder::Prepare(const Batch& batch) {
  const int64_t n = batch.size();
  if (n == 0) return InvalidArgumentError("forward: empty batch");
  if (n > options_.max_batch) {
    return InvalidArgumentError("forward: batch of " + std::to_string(n) +
                                " tokens exceeds max_batch " + std::to_string(options_.max_batch));
  }
  if (static_cast<int64_t>(batch.positions.size()) != n ||
      static_cast<int64_t>(batch.seq_ids.size()) != n ||
      static_cast<int64_t>(batch.want_logits.size()) != n) {
    return InvalidArgumentError("forward: batch arrays have different lengths");
  }
  int64_t n_out = 0;
  for (uint8_t w : batch.want_logits) n_out += w != 0;
  if (n_out > options_.max_outputs) {
    return InvalidArgumentError("forward: " + std::to_string(n_out) +
                                " tokens want logits, more than max_outputs " +
                                std::to_string(options_.max_outputs));
  }
  for (int32_t s : touched_seqs_) seq_next_[s] = -1;
  touched_seqs_.clear();
  Status status;
  for (int64_t t = 0; t < n && status.ok(); ++t) {
    const int32_t tok = batch.tokens[t], seq = batch.seq_ids[t], pos = batch.positions[t];
    if (tok < 0 || tok >= config_.n_vocab) {
      status = InvalidArgumentError("forward: token id " + std::to_string(tok) +
                                    " is outside the vocabulary [0, " +
                                    std::to_string(config_.n_vocab) + ")");
    } else if (seq < 0 || seq >= cache_->max_seqs()) {
      status = InvalidArgumentError("forward: sequence id " + std::to_string(seq) +
                                    " is outside [0, " + std::to_string(cache_->max_seqs()) + ")");
    } else if (seq_next_[seq] < 0) {
      if (pos < 0 || pos > cache_->Length(seq)) {
        status = InvalidArgumentError("forward: sequence " + std::to_string(seq) +
                                      " starts at position " + std::to_string(pos) +
                                      " but its cache holds " +
                                      std::to_string(cache_->Length(seq)) + " tokens");
      } else if (pos < cache_->ResumeFloor(seq)) {
        status = InvalidArgumentError(
            "forward: sequence " + std::to_string(seq) + " restarts at position " +
            std::to_string(pos) + ", whose sliding window's K/V was given back (from " +
            std::to_string(cache_->ResumeFloor(seq)) + " on it can go on; truncate it to 0)");
      } else {
        touched_seqs_.push_back(seq);
        seq_next_[seq] = pos + 1;
      }
    } else if (pos != seq_next_[seq]) {
      status = InvalidArgumentError(
          "forward: sequence " + std::to_string(seq) + " has position " + std::to_string(pos) +
          " after " + std::to_string(seq_next_[seq] - 1) + " (positions must be consecutive)");
    } else {
      seq_next_[seq] = pos + 1;
    }
  }
  for (int32_t s : touched_seqs_) {
    if (!status.ok()) break;
    status = cache_->Reserve(s, seq_next_[s]);
  }
  if (!status.ok()) {
    for (int32_t s : touched_seqs_) {
      // Give back blocks reserved for this batch but never filled.
      cache_->Truncate(s, cache_->Length(s));
      seq_next_[s] = -1;
    }
    touched_seqs_.clear();
    return status;
  }
  n_outputs_ = n_out;
  return OkStatus();
}

Status Decoder::Forward(const Batch& batch, const std::atomic<bool>* abandon) {
  abandoned_layers_ = 0;
  UF_RETURN_IF_ERROR(Prepare(batch));
  abandon_ = abandon;
  const ModelConfig& c = config_;
  const int64_t n = batch.size();
  // Attention items: up to kAttentionTokens consecutive tokens of one sequence (a prefill's)
  // times one KV head, so that each K/V block is read once for all their query rows; and the
  // attention cost of a layer, which decides whether it is worth the pool.
  attn_groups_.clear();
  attn_group_keys_.clear();
  attn_cost_ = 0;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t start = attn_groups_.empty() ? -1 : attn_groups_.back();
    if (start < 0 || t - start >= kAttentionTokens || batch.seq_ids[t] != batch.seq_ids[start]) {
      attn_groups_.push_back(t);
      attn_group_keys_.push_back(0);
    }
    attn_group_keys_.back() = std::max<int64_t>(attn_group_keys_.back(), batch.positions[t] + 1);
    attn_cost_ += (batch.positions[t] + 1) * c.head_dim * 4 * c.n_head;
  }
  attn_groups_.push_back(n);
  // Flash-decoding: with fewer items than twice the threads (a decode step of few sequences),
  // the threads take (item, chunk) units instead of items, and the partials are merged after.
  // The arithmetic is the same either way (kernels/attention.h), so this changes no result.
  split_units_.clear();
  const int64_t items = (static_cast<int64_t>(attn_groups_.size()) - 1) * c.n_head_kv;
  if (pool_->size() > 1 && items < 2 * pool_->size() && attn_cost_ >= kParallelThreshold) {
    for (int64_t item = 0; item < items; ++item) {
      const int64_t keys = attn_group_keys_[item / c.n_head_kv];
      for (int64_t ch = 0; ch * attn_chunk_ < keys; ++ch) split_units_.emplace_back(item, ch);
    }
    if (static_cast<int64_t>(split_units_.size()) <= items) split_units_.clear();
  }
  if (single_dispatch_ && pool_->size() > 1 && n <= kSingleDispatchTokens) {
    RunSingleDispatch(batch);
  } else {
    RunLayers(batch);
  }
  abandon_ = nullptr;
  if (abandoned_layers_ > 0) {
    // As after a failed Prepare: the lengths stay, the blocks reserved past them go back.
    for (int32_t s : touched_seqs_) {
      cache_->Truncate(s, cache_->Length(s));
      seq_next_[s] = -1;
    }
    touched_seqs_.clear();
    return UnavailableError("forward: abandoned after " + std::to_string(abandoned_layers_) +
                            " of " + std::to_string(c.n_layer) + " layers");
  }
  for (int32_t s : touched_seqs_) {
    cache_->Truncate(s, seq_next_[s]);
    cache_->SetLength(s, seq_next_[s]);
  }
  return OkStatus();
}

void Decoder::RunLayers(const Batch& batch) {
  const ModelConfig& c = config_;
  const int64_t n = batch.size(), e = c.n_embd;
  ForRows(n, e + c.rope_dim * 8, [&](int64_t b, int64_t end) {
    for (int64_t t = b; t < end; ++t) {
      model_.EmbedToken(batch.tokens[t], x_.data() + t * e);
      kernels::RopeAngles(rope_, batch.positions[t], rope_cs_.data() + t * c.rope_dim);
    }
  });
  for (int64_t il = 0; il < c.n_layer; ++il) {
    if (il > 0 && Abandoning()) {
      abandoned_layers_ = il;
      return;
    }
    Layer(il, batch);
  }

  // The last layer left the rows that want logits compacted at the front (batch order): its
  // FFN residual add, then the final norm.
  const float* out_norm = model_.weights().output_norm.data();
  for (int64_t j = 0; j < n_outputs_; ++j) {
    kernels::AddRmsNorm(x_.data() + j * e, y_.data() + j * e, out_norm, xo_.data() + j * e, e,
                        c.rms_eps);
  }
  // The logits product reads the vocabulary's matrix (a few layers' worth of weights).
  if (n_outputs_ > 0 && Abandoning()) {
    abandoned_layers_ = c.n_layer;
    return;
  }
  if (n_outputs_ > 0)
    kernels::MatMul(model_.weights().output, xo_.data(), n_outputs_, logits_.data(), pool_);
}

void Decoder::Layer(int64_t il, const Batch& batch) {
  const ModelConfig& c = config_;
  const LayerWeights& l = model_.weights().layers[il];
  int64_t n = batch.size();  // rows still computed; shrinks in the last layer
  const int64_t e = c.n_embd, qd = c.q_dim(), kvd = c.kv_dim();
  const float eps = c.rms_eps;

  // Residual add of the previous layer's FFN output (none before layer 0), then attention norm.
  ForRows(n, 3 * e, [&](int64_t b, int64_t end) {
    for (int64_t t = b; t < end; ++t) {
      float* xt = x_.data() + t * e;
      if (il > 0) {
        kernels::AddRmsNorm(xt, y_.data() + t * e, l.attn_norm.data(), xn_.data() + t * e, e, eps);
      } else {
        kernels::RmsNorm(xt, l.attn_norm.data(), xn_.data() + t * e, e, eps);
      }
    }
  });
  RunGroups(qkv_groups_[il], xn_.data(), n);

  // Biases, per-head q/k norms, RoPE, then K/V into the cache.
  ForRows(n, 4 * (qd + kvd), [&](int64_t b, int64_t end) {
    for (int64_t t = b; t < end; ++t) QkvToCache(il, batch, t, 0, c.n_head_kv);
  });

  // Attention (AttentionShare), on the pool when it pays.
  const int64_t items = (static_cast<int64_t>(attn_groups_.size()) - 1) * c.n_head_kv;
  if (split_units_.empty() &&
      (pool_->size() == 1 || items < 2 || attn_cost_ < kParallelThreshold)) {
    AttentionShare(il, batch, 0, 1);
  } else {
    struct Args {
      Decoder* self;
      int64_t il;
      const Batch* batch;
    } args{this, il, &batch};
    pool_->Run([a = &args](int i, int nt) { a->self->AttentionShare(a->il, *a->batch, i, nt); });
    if (!split_units_.empty()) FinishSplit(il);
  }

  if (il == c.n_layer - 1 && n_outputs_ < n) {
    n = CompactOutputs(batch, n);
    if (n == 0) return;
  }
  kernels::MatMul(l.wo, attn_.data(), n, y_.data(), pool_);

  ForRows(n, 3 * e, [&](int64_t b, int64_t end) {
    for (int64_t t = b; t < end; ++t) {
      if (!l.bo.empty()) kernels::AddInPlace(y_.data() + t * e, l.bo.data(), e);
      kernels::AddRmsNorm(x_.data() + t * e, y_.data() + t * e, l.ffn_norm.data(),
                          xn_.data() + t * e, e, eps);
    }
  });
  if (!l.exp_gate.empty()) {
    struct Args {
      Decoder* self;
      int64_t il, n;
    } args{this, il, n};
    pool_->Run([a = &args](int i, int nt) { a->self->MoeFfn(a->il, a->n, i, nt); });
    return;
  }
  RunGroups(ffn_groups_[il], xn_.data(), n);
  // Row by row: the kernel's vector body and scalar tail round differently, and a row must come
  // out the same whichever rows share the call (speculative verify rows = decode steps).
  ForRows(n, 12 * c.n_ff, [&](int64_t b, int64_t end) {
    for (int64_t t = b; t < end; ++t) {
      float* g = gate_.data() + t * c.n_ff;
      kernels::SwiGlu(g, up_.data() + t * c.n_ff, g, c.n_ff);
    }
  });
  kernels::MatMul(l.down, gate_.data(), n, y_.data(), pool_);
}

void Decoder::QkvToCache(int64_t il, const Batch& batch, int64_t t, int64_t h0, int64_t h1) {
  const ModelConfig& c = config_;
  const LayerWeights& l = model_.weights().layers[il];
  const int64_t hd = c.head_dim, group = c.n_head / c.n_head_kv;
  // Query heads [h0 * group, h1 * group) and KV heads [h0, h1) of token t: every step below is
  // per head (the bias per element), so any split of the heads gives the same bits.
  float* q = q_.data() + t * c.q_dim() + h0 * group * hd;  // [(h1 - h0) * group][hd]
  float* k = k_.data() + t * c.kv_dim() + h0 * hd;         // [h1 - h0][hd]
  float* v = v_.data() + t * c.kv_dim() + h0 * hd;         // [h1 - h0][hd]
  const int64_t nq = (h1 - h0) * group, nkv = h1 - h0;
  if (!l.bq.empty()) {
    kernels::AddInPlace(q, l.bq.data() + h0 * group * hd, nq * hd);
    kernels::AddInPlace(k, l.bk.data() + h0 * hd, nkv * hd);
    kernels::AddInPlace(v, l.bv.data() + h0 * hd, nkv * hd);
  }
  if (!l.q_norm.empty()) {
    for (int64_t h = 0; h < nq; ++h) {
      kernels::RmsNorm(q + h * hd, l.q_norm.data(), q + h * hd, hd, c.rms_eps);
    }
    for (int64_t h = 0; h < nkv; ++h) {
      kernels::RmsNorm(k + h * hd, l.k_norm.data(), k + h * hd, hd, c.rms_eps);
    }
  }
  const float* cs = rope_cs_.data() + t * c.rope_dim;
  kernels::ApplyRope(rope_, cs, q, nq, hd);
  kernels::ApplyRope(rope_, cs, k, nkv, hd);
  const int64_t bs = cache_->block_size();
  const int32_t pos = batch.positions[t];
  const int32_t block = cache_->LayerBlockTable(il, batch.seq_ids[t])[pos / bs];
  const int64_t slot = pos % bs;
  // Row `slot` of head h's slice: bs rows of KvRowBytes each (keys maybe transposed).
  const size_t row = engine::KvRowBytes(kv_type_, hd);
  for (int64_t h = h0; h < h1; ++h) {
    const float* kh = k + (h - h0) * hd;
    auto* ks = static_cast<uint8_t*>(cache_->KeySlice(il, block, h));
    if (keys_transposed_) {
      StoreKeyColumn(kh, ks, slot);
    } else {
      StoreKvRow(kh, ks + slot * row);
    }
    StoreKvRow(v + (h - h0) * hd,
               static_cast<uint8_t*>(cache_->ValueSlice(il, block, h)) + slot * row);
  }
}

// Attention over (tokens, KV head) items (attn_groups_, set once per batch in Forward). Cost per
// item grows with the position, so the threads take items in turn (thread i: items i, i + nt,
// ...): in a causal prefill a split into contiguous ranges gave the thread with the later
// tokens 3x the work of the other. In split mode the units are (item, chunk) pairs whose
// partials FinishSplit merges.
void Decoder::AttentionShare(int64_t il, const Batch& batch, int thread, int n_threads) {
  if (!split_units_.empty()) {
    const int64_t units = static_cast<int64_t>(split_units_.size());
    const int64_t state =
        kAttentionTokens * (config_.n_head / config_.n_head_kv) * (config_.head_dim + 2);
    for (int64_t u = thread; u < units; u += n_threads) {
      const auto [item, ch] = split_units_[u];
      Attention(il, batch, item, ch, ch + 1, thread, split_partials_.data() + u * state);
    }
    return;
  }
  const int64_t items = (static_cast<int64_t>(attn_groups_.size()) - 1) * config_.n_head_kv;
  for (int64_t item = thread; item < items; item += n_threads) {
    Attention(il, batch, item, 0, -1, thread, nullptr);
  }
}

// After the last layer's attention only rows that want logits matter: they move to the front
// and the output projection and FFN run on those alone (a prefill chunk that wants no logits
// skips them entirely).
int64_t Decoder::CompactOutputs(const Batch& batch, int64_t n) {
  const int64_t qd = config_.q_dim(), e = config_.n_embd;
  int64_t rows = 0;
  for (int64_t t = 0; t < n; ++t) {
    if (!batch.want_logits[t]) continue;
    if (rows != t) {
      std::memcpy(attn_.data() + rows * qd, attn_.data() + t * qd, qd * sizeof(float));
      std::memcpy(x_.data() + rows * e, x_.data() + t * e, e * sizeof(float));
    }
    ++rows;
  }
  return rows;
}

void Decoder::StoreKvRow(const float* x, uint8_t* dst) const {
  const int64_t hd = config_.head_dim;
  switch (kv_type_) {
    case engine::KvType::kF16:
      kernels::F32ToF16(x, reinterpret_cast<uint16_t*>(dst), hd);
      break;
    case engine::KvType::kQ8_0:
      kernels::QuantizeRow(GgmlType::kQ8_0, x, dst, hd);
      break;
    case engine::KvType::kF32:
      std::memcpy(dst, x, hd * sizeof(float));
      break;
  }
}

kernels::AttentionState Decoder::StateAt(float* base) const {
  const int64_t rows = kAttentionTokens * (config_.n_head / config_.n_head_kv);
  return {base, base + rows, base + 2 * rows};
}

// An item is the `group` query heads that share a KV head, for up to kAttentionTokens
// consecutive tokens of one sequence: the kernel reads each K/V block once for all of them (one
// item per (token, query head) read every block once per query, and a cache-resident model's
// 512-token prefill spent longer streaming K/V than in its matmuls).
void Decoder::StoreKeyColumn(const float* x, uint8_t* slice, int64_t slot) const {
  const int64_t hd = config_.head_dim, bs = cache_->block_size();
  if (kv_type_ == engine::KvType::kF16) {
    uint16_t half[4096];  // head_dim <= 4096 (config check)
    kernels::F32ToF16(x, half, hd);
    auto* dst = reinterpret_cast<uint16_t*>(slice) + slot;
    for (int64_t i = 0; i < hd; ++i) dst[i * bs] = half[i];
  } else {
    auto* dst = reinterpret_cast<float*>(slice) + slot;
    for (int64_t i = 0; i < hd; ++i) dst[i * bs] = x[i];
  }
}

void Decoder::Attention(int64_t il, const Batch& batch, int64_t item, int64_t c_begin,
                        int64_t c_end, int thread, float* partial) {
  const ModelConfig& c = config_;
  const int64_t hd = c.head_dim, qd = c.q_dim();
  const int64_t group = c.n_head / c.n_head_kv;
  const int64_t bs = cache_->block_size();
  const int64_t gi = item / c.n_head_kv, kvh = item % c.n_head_kv;
  const int64_t t0 = attn_groups_[gi], nt = attn_groups_[gi + 1] - t0, nq = nt * group;
  const int64_t keys = attn_group_keys_[gi];
  const int64_t n_chunks = (keys + attn_chunk_ - 1) / attn_chunk_;
  if (c_end < 0) c_end = n_chunks;
  const int64_t rows = kAttentionTokens * group;
  const int64_t max_blocks = (cache_->max_seq_len() + bs - 1) / bs;

  float* scratch = attn_scratch_.data() + thread * attn_thread_floats_;
  float* q = scratch + kernels::AttentionScratchFloats(rows, hd, bs, attn_chunk_);  // [nq][hd]
  const kernels::AttentionState run = StateAt(q + rows * hd);
  const kernels::AttentionState part = StateAt(q + rows * hd + rows * (hd + 2));
  const void** kp = attn_blocks_.data() + thread * 2 * max_blocks;
  const void** vp = kp + max_blocks;
  int32_t* visible = attn_visible_.data() + thread * rows;

  // The item's block slices from the first one this unit reads to the end (the kernel
  // prefetches past its chunk), and its query rows, contiguous.
  // A sliding-window layer skips the chunks before the window of the item's first token.
  const bool swa = c.IsSwaLayer(il);
  if (swa && partial == nullptr) {
    c_begin = std::max<int64_t>(
        c_begin, std::max<int64_t>(0, batch.positions[t0] - c.n_swa + 1) / attn_chunk_);
  }
  const int32_t* table = cache_->LayerBlockTable(il, batch.seq_ids[t0]);
  const int64_t first = c_begin * attn_chunk_ / bs, total = (keys + bs - 1) / bs;
  // A windowed table's given-back entries (-1) lie wholly before every row's window: the kernel
  // may still read them (a chunk is read from its start, weights 0 before `first`), so they
  // point at a block the sequence holds. Its values are finite, and 0 x finite adds nothing:
  // the same bits as with the full cache.
  int32_t held = -1;
  for (int64_t b = total - 1; b >= first; --b) {
    const int32_t id = table[b] >= 0 ? table[b] : held;
    held = id;
    kp[b] = cache_->KeySlice(il, id, kvh);
    vp[b] = cache_->ValueSlice(il, id, kvh);
  }
  for (int64_t i = 0; i < nt; ++i) {
    std::memcpy(q + i * group * hd, q_.data() + (t0 + i) * qd + kvh * group * hd,
                group * hd * sizeof(float));
  }
  kernels::AttentionKv kv;
  kv.type = kernel_kv_type_;
  kv.head_dim = hd;
  kv.block_size = bs;
  kv.k_transposed = keys_transposed_;
  for (int64_t ch = c_begin; ch < c_end; ++ch) {
    const int64_t key0 = ch * attn_chunk_;
    kv.n_keys = std::min(attn_chunk_, keys - key0);
    kv.k = kp + key0 / bs;
    kv.v = vp + key0 / bs;
    kv.n_blocks = (kv.n_keys + bs - 1) / bs;
    kv.prefetch_blocks = total - (key0 / bs + kv.n_blocks);
    for (int64_t r = 0; r < nq; ++r) visible[r] = batch.positions[t0 + r / group] + 1 - key0;
    if (swa) {
      int32_t* win = attn_first_.data() + thread * rows;
      for (int64_t r = 0; r < nq; ++r) {
        win[r] = static_cast<int32_t>(batch.positions[t0 + r / group] - c.n_swa + 1 - key0);
      }
      kv.first = win;
    }
    // A chunk into an empty state is the merge of that chunk into it, exactly.
    const kernels::AttentionState out =
        partial != nullptr ? StateAt(partial) : (ch == c_begin ? run : part);
    kernels::AttendChunk(kv, q, nq, visible, attn_scale_, out, scratch);
    if (partial == nullptr && ch != c_begin) kernels::MergeAttention(nq, hd, part, run);
  }
  if (partial != nullptr) return;
  FinishRows(il, run, t0, nt, kvh);
}

void Decoder::FinishRows(int64_t il, const kernels::AttentionState& run, int64_t t0, int64_t nt,
                         int64_t kvh) {
  const ModelConfig& c = config_;
  const int64_t hd = c.head_dim, qd = c.q_dim(), group = c.n_head / c.n_head_kv;
  const std::vector<float>& sinks = model_.weights().layers[il].attn_sinks;
  for (int64_t i = 0; i < nt; ++i) {
    const kernels::AttentionState rows_i{run.max + i * group, run.sum + i * group,
                                         run.acc + i * group * hd};
    // A sink is a key with logit sinks[h] and no value: it adds e^(sink - max) to the sum.
    if (!sinks.empty()) {
      for (int64_t j = 0; j < group; ++j) {
        rows_i.sum[j] += std::exp(sinks[kvh * group + j] - rows_i.max[j]);
      }
    }
    kernels::FinishAttention(group, hd, rows_i, attn_.data() + (t0 + i) * qd + kvh * group * hd);
  }
}

void Decoder::FinishSplit(int64_t il) {
  const ModelConfig& c = config_;
  const int64_t hd = c.head_dim, group = c.n_head / c.n_head_kv;
  const int64_t state = kAttentionTokens * group * (hd + 2);
  const int64_t rows = kAttentionTokens * group;
  // Thread 0's running state (the pool is idle now).
  const kernels::AttentionState run = StateAt(
      attn_scratch_.data() +
      kernels::AttentionScratchFloats(rows, hd, cache_->block_size(), attn_chunk_) + rows * hd);
  size_t u = 0;
  while (u < split_units_.size()) {
    const int64_t item = split_units_[u].first;
    const int64_t gi = item / c.n_head_kv, kvh = item % c.n_head_kv;
    const int64_t t0 = attn_groups_[gi], nt = attn_groups_[gi + 1] - t0, nq = nt * group;
    std::fill(run.max, run.max + nq, -std::numeric_limits<float>::infinity());
    std::fill(run.sum, run.sum + nq, 0.0f);
    std::fill(run.acc, run.acc + nq * hd, 0.0f);
    for (; u < split_units_.size() && split_units_[u].first == item; ++u) {
      kernels::MergeAttention(nq, hd, StateAt(split_partials_.data() + u * state), run);
    }
    FinishRows(il, run, t0, nt, kvh);
  }
}

}  // namespace uf::model
