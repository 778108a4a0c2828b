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
  c->slice_bytes_ = static_cast<size_t>(o.block_size) * KvRowBytes(o.type, o.head_dim);
  c->pool_bytes_ = c->slice_bytes_ * static_cast<size_t>(o.n_layer * o.n_head_kv * o.n_blocks);
  const size_t pool_bytes = c->pool_bytes_;
  const double gib = 2.0 * pool_bytes / (1024.0 * 1024.0 * 1024.0);
  try {
    if (o.host_storage) {
      c->k_ = kernels::TryAllocateHuge(pool_bytes);
      c->v_ = kernels::TryAllocateHuge(pool_bytes);
      if (c->k_ == nullptr || c->v_ == nullptr) throw std::bad_alloc();
    }
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
    for (Sequence& s : c->seqs_) s.blocks.reserve(std::min(max_blocks_per_seq, o.n_blocks));
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
  for (int64_t i = have; i < need; ++i) s.blocks.push_back(TakeBlock());
  return OkStatus();
}

void KvCache::SetLength(int seq, int64_t n) {
  UF_CHECK(seq >= 0 && seq < options_.max_seqs) << "kv cache: bad sequence id " << seq;
  UF_CHECK(n >= 0 && n <= Capacity(seq)) << "kv cache: length " << n << " past capacity";
  seqs_[seq].length = n;
}

void KvCache::Truncate(int seq, int64_t n) {
  UF_CHECK(seq >= 0 && seq < options_.max_seqs) << "kv cache: bad sequence id " << seq;
  UF_CHECK(n >= 0);
  Sequence& s = seqs_[seq];
  if (n < s.length) s.length = n;
  const int64_t bs = options_.block_size;
  const int64_t keep = (n + bs - 1) / bs;
  while (static_cast<int64_t>(s.blocks.size()) > keep) {
    ReleaseBlock(s.blocks.back());
    s.blocks.pop_back();
  }
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
    if (refs_[b] == 0) lru_.erase(lru_pos_[b]);
    ++refs_[b];
    s.blocks.push_back(b);
    h = next;
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
    block_hash_[b] = s.chain_hash;
    std::copy(tokens + i * bs, tokens + (i + 1) * bs, block_tokens_.begin() + b * bs);
  }
}

}  // namespace uf::engine
