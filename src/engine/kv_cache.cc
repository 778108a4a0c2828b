#include "engine/kv_cache.h"

#include <algorithm>
#include <new>
#include <string>

namespace uf::engine {

const char* KvTypeName(KvType type) {
  return type == KvType::kF16 ? "f16" : type == KvType::kQ8_0 ? "q8_0" : "f32";
}

StatusOr<KvType> ParseKvType(std::string_view name) {
  if (name == "f16") return KvType::kF16;
  if (name == "f32") return KvType::kF32;
  if (name == "q8_0") return KvType::kQ8_0;
  return InvalidArgumentError("kv type must be f16, q8_0 or f32, not '" + std::string(name) + "'");
}

int64_t KvCacheOptions::BlocksFor(int64_t ctx_tokens, int max_seqs, int64_t block_size) {
  return (ctx_tokens + block_size - 1) / block_size + (max_seqs - 1);
}

int64_t KvCacheOptions::SwaBlocksFor(int64_t window, int64_t slack, int max_seqs,
                                     int64_t block_size) {
  // Held after a step: positions [L - window + 1 - slack, L), block ends rounded out (+2); one
  // step appends at most slack positions (+1 for the block it starts in).
  const int64_t behind = (window - 1 + slack + block_size - 1) / block_size + 2;
  const int64_t ahead = (slack + block_size - 1) / block_size + 1;
  return max_seqs * (behind + ahead);
}

StatusOr<std::unique_ptr<KvCache>> KvCache::Create(const KvCacheOptions& o) {
  if (o.n_layer <= 0 || o.n_head_kv <= 0 || o.head_dim <= 0 || o.block_size <= 0 ||
      o.n_blocks <= 0 || o.max_seqs <= 0 || o.max_seq_len < 0) {
    return InvalidArgumentError("kv cache: sizes must be positive");
  }
  if (o.n_blocks > (int64_t{1} << 30)) {
    return InvalidArgumentError("kv cache: too many blocks (" + std::to_string(o.n_blocks) + ")");
  }
  std::unique_ptr<KvCache> c(new KvCache(o));
  if (c->options_.max_seq_len == 0) c->options_.max_seq_len = o.n_blocks * o.block_size;
  if (o.type == KvType::kQ8_0 && o.head_dim % 32 != 0) {
    return InvalidArgumentError(
        "kv cache: q8_0 K/V needs a head dimension that is a multiple of 32, not " +
        std::to_string(o.head_dim));
  }
  // Windowed layers get their pool only where this cache stores K/V (a device's cache follows
  // the main tables for every layer).
  const bool any_swa =
      std::any_of(o.swa_layers.begin(), o.swa_layers.end(), [](uint8_t x) { return x != 0; });
  if (!o.swa_layers.empty() && static_cast<int64_t>(o.swa_layers.size()) != o.n_layer) {
    return InvalidArgumentError("kv cache: swa_layers must have one entry per layer");
  }
  if (any_swa && (o.swa_window <= 0 || o.swa_slack < 0 || o.swa_blocks < 0)) {
    return InvalidArgumentError("kv cache: a sliding window needs a positive size");
  }
  const bool windowed = o.host_storage && any_swa;
  c->is_swa_.assign(o.n_layer, 0);
  c->layer_slot_.assign(o.n_layer, 0);
  int64_t n_swa_layers = 0;
  for (int64_t il = 0; il < o.n_layer; ++il) {
    c->is_swa_[il] = windowed && o.swa_layers[il] != 0;
    c->layer_slot_[il] = c->is_swa_[il] ? n_swa_layers++ : c->n_main_layers_++;
  }
  if (windowed) {
    c->swa_n_blocks_ = o.swa_blocks > 0 ? o.swa_blocks
                                        : KvCacheOptions::SwaBlocksFor(o.swa_window, o.swa_slack,
                                                                       o.max_seqs, o.block_size);
    if (c->swa_n_blocks_ > (int64_t{1} << 30)) {
      return InvalidArgumentError("kv cache: too many windowed blocks");
    }
  }
  c->slice_bytes_ = static_cast<size_t>(o.block_size) * KvRowBytes(o.type, o.head_dim);
  c->pool_bytes_ =
      c->slice_bytes_ * static_cast<size_t>(c->n_main_layers_ * o.n_head_kv * o.n_blocks);
  c->swa_pool_bytes_ =
      c->slice_bytes_ * static_cast<size_t>(n_swa_layers * o.n_head_kv * c->swa_n_blocks_);
  const size_t pool_bytes = c->pool_bytes_, swa_bytes = c->swa_pool_bytes_;
  const double gib = 2.0 * (pool_bytes + swa_bytes) / (1024.0 * 1024.0 * 1024.0);
  try {
    if (o.host_storage && pool_bytes > 0) {
      c->k_ = kernels::TryAllocateHuge(pool_bytes);
      c->v_ = kernels::TryAllocateHuge(pool_bytes);
      if (c->k_ == nullptr || c->v_ == nullptr) throw std::bad_alloc();
    }
    if (swa_bytes > 0) {
      c->swa_k_ = kernels::TryAllocateHuge(swa_bytes);
      c->swa_v_ = kernels::TryAllocateHuge(swa_bytes);
      if (c->swa_k_ == nullptr || c->swa_v_ == nullptr) throw std::bad_alloc();
    }
    const int64_t sn = c->swa_n_blocks_;
    c->swa_free_.reserve(sn);
    for (int64_t b = sn - 1; b >= 0; --b) c->swa_free_.push_back(static_cast<int32_t>(b));
    c->swa_refs_.assign(sn, 0);
    c->swa_owner_.assign(sn, -1);
    c->swa_lru_pos_.resize(sn);
    c->swa_of_.assign(windowed ? o.n_blocks : 0, -1);
    c->free_.reserve(o.n_blocks);
    for (int64_t b = o.n_blocks - 1; b >= 0; --b) c->free_.push_back(static_cast<int32_t>(b));
    c->seqs_.resize(o.max_seqs);
    c->refs_.assign(o.n_blocks, 0);
    c->published_.assign(o.n_blocks, 0);
    c->block_hash_.assign(o.n_blocks, 0);
    c->block_tokens_.assign(o.n_blocks * o.block_size, 0);
    c->lru_pos_.resize(o.n_blocks);
    const int64_t max_blocks_per_seq = (c->options_.max_seq_len + o.block_size - 1) / o.block_size;
    // Block tables never reallocate during decoding.
    for (Sequence& s : c->seqs_) {
      s.blocks.reserve(std::min(max_blocks_per_seq, o.n_blocks));
      if (windowed) s.swa.reserve(std::min(max_blocks_per_seq, o.n_blocks));
    }
  } catch (const std::bad_alloc&) {
    return ResourceExhaustedError("kv cache: cannot allocate " + std::to_string(gib) + " GiB");
  }
  return c;
}

Status KvCache::Reserve(int seq, int64_t n_tokens) {
  UF_CHECK(seq >= 0 && seq < options_.max_seqs) << "kv cache: bad sequence id " << seq;
  if (n_tokens > options_.max_seq_len) {
    return OutOfRangeError("kv cache: sequence would hold " + std::to_string(n_tokens) +
                           " tokens, more than the limit of " +
                           std::to_string(options_.max_seq_len));
  }
  Sequence& s = seqs_[seq];
  const int64_t need = (n_tokens + options_.block_size - 1) / options_.block_size;
  const int64_t have = static_cast<int64_t>(s.blocks.size());
  if (need <= have) return OkStatus();
  if (need - have > free_blocks()) {
    return ResourceExhaustedError("kv cache: out of blocks (" + std::to_string(need - have) +
                                  " needed, " + std::to_string(free_blocks()) + " free of " +
                                  std::to_string(options_.n_blocks) + ")");
  }
  if (windowed() && need - have > swa_free_blocks()) {
    return ResourceExhaustedError(
        "kv cache: out of sliding-window blocks (" + std::to_string(need - have) + " needed, " +
        std::to_string(swa_free_blocks()) + " free of " + std::to_string(swa_n_blocks_) + ")");
  }
  for (int64_t i = have; i < need; ++i) {
    s.blocks.push_back(TakeBlock());
    if (windowed()) s.swa.push_back(TakeSwaBlock());
  }
  return OkStatus();
}

void KvCache::SetLength(int seq, int64_t n) {
  UF_CHECK(seq >= 0 && seq < options_.max_seqs) << "kv cache: bad sequence id " << seq;
  UF_CHECK(n >= 0 && n <= Capacity(seq)) << "kv cache: length " << n << " past capacity";
  seqs_[seq].length = n;
  if (windowed()) Slide(seqs_[seq]);
}

void KvCache::Slide(Sequence& s) {
  const int64_t bs = options_.block_size;
  const int64_t keep_from = s.length - options_.swa_window + 1 - options_.swa_slack;
  const int64_t end = static_cast<int64_t>(s.swa.size());
  while (s.swa_first < end && (s.swa_first + 1) * bs <= keep_from) {
    ReleaseSwaBlock(s.swa[s.swa_first]);
    s.swa[s.swa_first++] = -1;
  }
}

void KvCache::Truncate(int seq, int64_t n) {
  UF_CHECK(seq >= 0 && seq < options_.max_seqs) << "kv cache: bad sequence id " << seq;
  UF_CHECK(n >= 0);
  Sequence& s = seqs_[seq];
  // Below the floor the window of position n was given back: going on from there would attend
  // to missing K/V (the caller must start over from 0 instead).
  UF_CHECK(n == 0 || n >= ResumeFloor(seq))
      << "kv cache: truncating to " << n << " needs windowed K/V given back (resume floor "
      << ResumeFloor(seq) << ")";
  if (n < s.length) s.length = n;
  const int64_t bs = options_.block_size;
  const int64_t keep = (n + bs - 1) / bs;
  while (static_cast<int64_t>(s.blocks.size()) > keep) {
    ReleaseBlock(s.blocks.back());
    s.blocks.pop_back();
    if (windowed()) {
      if (s.swa.back() >= 0) ReleaseSwaBlock(s.swa.back());
      s.swa.pop_back();
    }
  }
  if (s.swa.empty()) s.swa_first = 0;
  // A kept block that n cuts into will be rewritten from n on: it must be this sequence's alone,
  // and must stop being found as a prefix.
  if (n % bs != 0 && keep > 0 && keep <= static_cast<int64_t>(s.blocks.size())) {
    const int32_t b = s.blocks[keep - 1];
    if (published_[b]) {
      UF_CHECK(refs_[b] == 1) << "kv cache: rewriting a KV block shared by another sequence";
      Unpublish(b);
    }
  }
  if (s.n_hashed > n / bs) {
    s.n_hashed = 0;
    s.chain_hash = 0;
  }
}

int32_t KvCache::TakeBlock() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    UF_CHECK(!lru_.empty()) << "kv cache: no block to take";
    b = lru_.front();
    lru_.pop_front();
    Unpublish(b);
  }
  refs_[b] = 1;
  return b;
}

void KvCache::ReleaseBlock(int32_t b) {
  UF_CHECK(refs_[b] > 0) << "kv cache: releasing an unheld block " << b;
  if (--refs_[b] > 0) return;
  if (published_[b]) {
    lru_pos_[b] = lru_.insert(lru_.end(), b);
  } else {
    free_.push_back(b);
  }
}

void KvCache::Unpublish(int32_t b) {
  if (!published_[b]) return;
  auto it = by_hash_.find(block_hash_[b]);
  if (it != by_hash_.end() && it->second == b) by_hash_.erase(it);
  published_[b] = 0;
  if (windowed() && swa_of_[b] >= 0) {
    // Its windowed block stops being reachable: cached (no holder) means free now.
    const int32_t w = swa_of_[b];
    swa_of_[b] = -1;
    swa_owner_[w] = -1;
    if (swa_refs_[w] == 0) {
      swa_lru_.erase(swa_lru_pos_[w]);
      swa_free_.push_back(w);
    }
  }
}

int32_t KvCache::TakeSwaBlock() {
  int32_t w;
  if (!swa_free_.empty()) {
    w = swa_free_.back();
    swa_free_.pop_back();
  } else {
    UF_CHECK(!swa_lru_.empty()) << "kv cache: no windowed block to take";
    w = swa_lru_.front();
    swa_lru_.pop_front();
    // The published block it belonged to can no longer end an attached prefix.
    swa_of_[swa_owner_[w]] = -1;
    swa_owner_[w] = -1;
  }
  swa_refs_[w] = 1;
  return w;
}

void KvCache::ReleaseSwaBlock(int32_t w) {
  UF_CHECK(swa_refs_[w] > 0) << "kv cache: releasing an unheld windowed block " << w;
  if (--swa_refs_[w] > 0) return;
  if (swa_owner_[w] >= 0) {
    swa_lru_pos_[w] = swa_lru_.insert(swa_lru_.end(), w);
  } else {
    swa_free_.push_back(w);
  }
}

uint64_t KvCache::ChainHash(uint64_t parent, const int32_t* tokens) const {
  // splitmix64 finaliser per token: cheap and well mixed. Matches are verified token by token,
  // so a collision costs a cache miss, never a wrong answer.
  uint64_t h = parent ^ 0x9E3779B97F4A7C15ull;
  for (int64_t i = 0; i < options_.block_size; ++i) {
    h += static_cast<uint32_t>(tokens[i]) + 0x9E3779B97F4A7C15ull;
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
    h ^= h >> 31;
  }
  return h;
}

int64_t KvCache::AttachPrefix(int seq, const int32_t* tokens, int64_t n) {
  UF_CHECK(seq >= 0 && seq < options_.max_seqs) << "kv cache: bad sequence id " << seq;
  Sequence& s = seqs_[seq];
  UF_CHECK(s.blocks.empty() && s.length == 0) << "kv cache: AttachPrefix on a non-empty sequence";
  const int64_t bs = options_.block_size;
  n = std::min(n, options_.max_seq_len);
  uint64_t h = 0;
  int64_t i = 0;
  for (; (i + 1) * bs <= n; ++i) {
    const uint64_t next = ChainHash(h, tokens + i * bs);
    auto it = by_hash_.find(next);
    if (it == by_hash_.end()) break;
    const int32_t b = it->second;
    if (!std::equal(tokens + i * bs, tokens + (i + 1) * bs, block_tokens_.begin() + b * bs)) break;
    s.blocks.push_back(b);  // refs taken below, once the run's length is known
    h = next;
  }
  // With a windowed pool the run must end where the windowed blocks of its last window are
  // there: positions from i * bs on attend back to i * bs - swa_window + 1.
  if (windowed()) {
    const int64_t found = i;
    for (; i > 0; --i) {
      const int64_t lo = std::max<int64_t>(0, i * bs - options_.swa_window + 1) / bs;
      bool held = true;
      for (int64_t j = lo; j < i && held; ++j) held = swa_of_[s.blocks[j]] >= 0;
      if (held) break;
    }
    if (i < found) {
      // The run was cut: the chain hash through its new last block.
      s.blocks.resize(i);
      h = 0;
      for (int64_t j = 0; j < i; ++j) h = ChainHash(h, tokens + j * bs);
    }
    const int64_t lo = std::max<int64_t>(0, i * bs - options_.swa_window + 1) / bs;
    s.swa.assign(i, -1);
    s.swa_first = i > 0 ? lo : 0;
    for (int64_t j = lo; j < i; ++j) {
      const int32_t w = swa_of_[s.blocks[j]];
      if (swa_refs_[w] == 0) swa_lru_.erase(swa_lru_pos_[w]);
      ++swa_refs_[w];
      s.swa[j] = w;
    }
  }
  for (const int32_t b : s.blocks) {
    if (refs_[b] == 0) lru_.erase(lru_pos_[b]);
    ++refs_[b];
  }
  s.length = i * bs;
  s.n_hashed = i;
  s.chain_hash = h;
  return s.length;
}

void KvCache::PublishPrefix(int seq, const int32_t* tokens, int64_t n) {
  UF_CHECK(seq >= 0 && seq < options_.max_seqs) << "kv cache: bad sequence id " << seq;
  Sequence& s = seqs_[seq];
  UF_CHECK(n >= 0 && n <= s.length) << "kv cache: publishing positions that hold no K/V";
  const int64_t bs = options_.block_size;
  for (int64_t i = s.n_hashed; i < n / bs; ++i) {
    s.chain_hash = ChainHash(s.chain_hash, tokens + i * bs);
    s.n_hashed = i + 1;
    const int32_t b = s.blocks[i];
    if (published_[b] || by_hash_.count(s.chain_hash)) continue;
    by_hash_.emplace(s.chain_hash, b);
    published_[b] = 1;
    // Its windowed block, while this sequence still holds it, goes with it.
    if (windowed() && s.swa[i] >= 0 && swa_owner_[s.swa[i]] < 0) {
      swa_of_[b] = s.swa[i];
      swa_owner_[s.swa[i]] = b;
    }
    block_hash_[b] = s.chain_hash;
    std::copy(tokens + i * bs, tokens + (i + 1) * bs, block_tokens_.begin() + b * bs);
  }
}

}  // namespace uf::engine
