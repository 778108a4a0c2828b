// Paged KV cache: K and V of every layer live in fixed-size blocks drawn from one pool; each
// sequence owns a block table mapping its positions to blocks. Blocks are taken on append and
// returned when a sequence is truncated or removed, so many sequences of different lengths share
// memory without fragmentation. K/V are stored as F16 (the default of `run`, `serve`, `bench` and
// `logits`, as in the reference engine: half the bytes each decode step reads per attended
// position) or F32 (exact attention inputs).
//
// Sliding-window layers (gpt-oss: every other layer sees the last 128 positions) can keep their
// K/V in a pool of their own (KvCacheOptions::swa_*, host storage only): each sequence has a
// second block table for them, indexed like the main one (position / block_size), whose blocks
// are given back once they fall wholly behind the window plus a slack; given-back entries read
// -1. At 128k positions on gpt-oss-20b that pool holds ~0.3 MiB per sequence where keeping every
// position took ~3 GiB.
//
// Not thread-safe: the owner (generation loop / scheduler) serialises calls; the forward pass
// only reads/writes block contents of sequences it was handed.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "kernels/huge_alloc.h"

namespace uf::engine {

// Q8_0 stores each head's row of K or V as GGML q8_0 blocks (32 values: an f16 scale and 32
// int8), 1.06 bytes per value; it needs head_dim to be a multiple of 32.
enum class KvType { kF32, kF16, kQ8_0 };
// "f32" / "f16" / "q8_0".
const char* KvTypeName(KvType type);
// Parses "f32" / "f16" / "q8_0"; InvalidArgument naming the accepted values otherwise.
StatusOr<KvType> ParseKvType(std::string_view name);
// Bytes of one head's row of head_dim values.
inline size_t KvRowBytes(KvType type, int64_t head_dim) {
  const size_t d = static_cast<size_t>(head_dim);
  return type == KvType::kQ8_0 ? d / 32 * 34 : type == KvType::kF16 ? 2 * d : 4 * d;
}

struct KvCacheOptions {
  int64_t n_layer = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t block_size = 16;     // tokens per block
  int64_t n_blocks = 0;        // pool size
  int max_seqs = 1;            // sequence ids are [0, max_seqs)
  int64_t max_seq_len = 0;     // positions per sequence; 0 = n_blocks * block_size
  KvType type = KvType::kF32;  // element type of K and V
  // False: the cache keeps block tables only and allocates no K/V storage (a device keeps the
  // K/V, gpu::GpuForward); the slice accessors must not be used then.
  bool host_storage = true;

  // Sliding-window layers (ignored without host storage: a device's cache follows the main
  // tables). Layers with swa_layers[il] != 0 attend to the last swa_window positions only (their
  // own included). Their K/V lives in a pool of swa_blocks blocks; a sequence of length L holds
  // only the windowed blocks with a position >= L - swa_window + 1 - swa_slack. swa_slack covers
  // what may go back behind the length: a Truncate to L - swa_slack at the least (speculative
  // rollback: Truncate below that CHECK-fails, see ResumeFloor) and the blocks the last step
  // appended, so that PublishPrefix still finds them. Empty swa_layers = one pool for all.
  std::vector<uint8_t> swa_layers;  // [n_layer] or empty
  int64_t swa_window = 0;
  int64_t swa_slack = 0;
  int64_t swa_blocks = 0;  // 0 = SwaBlocksFor(swa_window, swa_slack, max_seqs, block_size)

  // Blocks needed so that max_seqs sequences can hold ctx_tokens tokens in total (each sequence
  // may leave its last block partly empty).
  static int64_t BlocksFor(int64_t ctx_tokens, int max_seqs, int64_t block_size);
  // Windowed blocks max_seqs sequences can need at once: each holds its window and slack (block
  // ends rounded out) plus what one step appends (at most swa_slack, the caller's promise).
  static int64_t SwaBlocksFor(int64_t window, int64_t slack, int max_seqs, int64_t block_size);
};

class KvCache {
 public:
  // InvalidArgument on non-positive sizes, ResourceExhausted when the pool cannot be allocated.
  static StatusOr<std::unique_ptr<KvCache>> Create(const KvCacheOptions& options);

  const KvCacheOptions& options() const { return options_; }
  int64_t block_size() const { return options_.block_size; }
  int64_t n_blocks() const { return options_.n_blocks; }
  int max_seqs() const { return options_.max_seqs; }
  int64_t max_seq_len() const { return options_.max_seq_len; }
  // Blocks Reserve can take: free ones plus cached prefix blocks no sequence holds.
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size() + lru_.size()); }

  // Sliding-window pool (0 / false when the cache keeps every layer in the main pool).
  bool windowed() const { return swa_n_blocks_ > 0; }
  bool IsWindowedLayer(int64_t layer) const { return windowed() && is_swa_[layer] != 0; }
  int64_t swa_n_blocks() const { return swa_n_blocks_; }
  int64_t swa_free_blocks() const {
    return static_cast<int64_t>(swa_free_.size() + swa_lru_.size());
  }
  // Windowed blocks of published prefixes that no sequence holds (counted as free).
  int64_t swa_cached_blocks() const { return static_cast<int64_t>(swa_lru_.size()); }
  // Windowed blocks sequences hold now (the pool less its free and cached blocks).
  int64_t swa_used_blocks() const { return swa_n_blocks_ - swa_free_blocks(); }
  // Windowed blocks seq holds.
  int64_t SwaHeld(int seq) const {
    return static_cast<int64_t>(seqs_[seq].swa.size()) - seqs_[seq].swa_first;
  }
  // The lowest length seq can be truncated to, other than 0, and go on from: positions from
  // there on find their whole window held. 0 while nothing was given back.
  int64_t ResumeFloor(int seq) const {
    const Sequence& s = seqs_[seq];
    return s.swa_first == 0 ? 0 : s.swa_first * options_.block_size + options_.swa_window - 1;
  }

  // Tokens whose K/V are stored for seq (positions [0, Length)).
  int64_t Length(int seq) const { return seqs_[seq].length; }
  // Positions seq can hold without allocating.
  int64_t Capacity(int seq) const {
    return static_cast<int64_t>(seqs_[seq].blocks.size()) * options_.block_size;
  }

  // Makes room for positions [0, n_tokens) of seq. OutOfRange past max_seq_len,
  // ResourceExhausted when the pool runs out (nothing is allocated then).
  Status Reserve(int seq, int64_t n_tokens);
  // Records that positions [0, n) hold valid K/V (n <= Capacity). Frees only windowed blocks
  // that fell behind the window and slack of n.
  void SetLength(int seq, int64_t n);
  // Forgets positions >= n and returns blocks no longer needed to the pool. n must be 0 or at
  // least ResumeFloor(seq) (checked).
  void Truncate(int seq, int64_t n);
  // Truncate(seq, 0).
  void Remove(int seq) { Truncate(seq, 0); }

  // Block ids of seq in position order; block i holds positions [i * block_size, ...).
  const int32_t* BlockTable(int seq) const { return seqs_[seq].blocks.data(); }
  // The table layer's K/V of seq is found through: BlockTable, or for a windowed layer the
  // windowed table (same indexing; -1 where a block was given back).
  const int32_t* LayerBlockTable(int64_t layer, int seq) const {
    return IsWindowedLayer(layer) ? seqs_[seq].swa.data() : seqs_[seq].blocks.data();
  }

  KvType type() const { return options_.type; }
  // Keys / values of one KV head in one block of one layer (a slice), of type(). Values are
  // [block_size][head_dim]; keys the same, or [head_dim][block_size] when keys_transposed(): the
  // attention kernel then widens one vector of 8-16 positions per dim and multiplies it into
  // every query row, where row-major keys need a horizontal sum per (query, position).
  bool keys_transposed() const {
    return options_.type != KvType::kQ8_0 && options_.block_size % 16 == 0;
  }
  // block is an id from LayerBlockTable(layer, ...).
  void* KeySlice(int64_t layer, int32_t block, int64_t head) {
    return Slice(true, layer, block, head);
  }
  void* ValueSlice(int64_t layer, int32_t block, int64_t head) {
    return Slice(false, layer, block, head);
  }
  const void* KeySlice(int64_t layer, int32_t block, int64_t head) const {
    return Slice(true, layer, block, head);
  }
  const void* ValueSlice(int64_t layer, int32_t block, int64_t head) const {
    return Slice(false, layer, block, head);
  }
  size_t slice_bytes() const { return slice_bytes_; }
  // The same for an F32 cache (checked).
  float* KeySliceF32(int64_t layer, int32_t block, int64_t head) {
    return F32(KeySlice(layer, block, head));
  }
  float* ValueSliceF32(int64_t layer, int32_t block, int64_t head) {
    return F32(ValueSlice(layer, block, head));
  }

  // Bytes of K and V storage (both pools), and per cached position of the layers in the main
  // pool (all layers unless windowed()); swa_bytes() is the windowed pool's part of bytes().
  size_t bytes() const { return 2 * (pool_bytes_ + swa_pool_bytes_); }
  size_t swa_bytes() const { return 2 * swa_pool_bytes_; }
  size_t bytes_per_token() const {
    return 2 * static_cast<size_t>(n_main_layers_ * options_.n_head_kv) *
           KvRowBytes(options_.type, options_.head_dim);
  }
  // K and V of one position in the windowed layers (0 unless windowed()).
  size_t swa_bytes_per_token() const {
    return 2 * static_cast<size_t>((options_.n_layer - n_main_layers_) * options_.n_head_kv) *
           KvRowBytes(options_.type, options_.head_dim);
  }

  // Prefix reuse. A full block can be published under a hash chained over every token up to its
  // end; a later sequence whose tokens start the same way maps the published blocks into its
  // table instead of recomputing them. Shared blocks are never written: a sequence only appends
  // after its mapped prefix, and rewriting a position inside a block another sequence holds is a
  // bug (checked). A published block no sequence holds stays cached until Reserve needs the
  // space, least recently used first.
  //
  // Maps into seq, which must be empty, the longest run of published blocks whose tokens equal
  // tokens[0, n); returns how many tokens it covers (a multiple of block_size, <= n). Callers
  // pass n < their token count so at least one token is left to compute logits from. With a
  // windowed pool the run also stops where the windowed blocks of its last window are no longer
  // held or cached (given back and taken by another sequence): those positions are recomputed.
  int64_t AttachPrefix(int seq, const int32_t* tokens, int64_t n);
  // Publishes seq's full blocks over tokens[0, n), n <= Length(seq). tokens must be what seq's
  // positions hold. Blocks published before are skipped, so calling this every step is cheap.
  void PublishPrefix(int seq, const int32_t* tokens, int64_t n);
  // Published blocks that no sequence holds (counted in free_blocks()).
  int64_t cached_blocks() const { return static_cast<int64_t>(lru_.size()); }

 private:
  struct Sequence {
    std::vector<int32_t> blocks;  // block table
    std::vector<int32_t> swa;     // windowed table, as long as blocks; -1 before swa_first
    int64_t swa_first = 0;        // windowed entries [swa_first, size) are held
    int64_t length = 0;
    int64_t n_hashed = 0;     // leading blocks whose chain hash is known
    uint64_t chain_hash = 0;  // hash chained through block n_hashed - 1
  };

  explicit KvCache(const KvCacheOptions& options) : options_(options) {}
  uint8_t* Slice(bool key, int64_t layer, int32_t block, int64_t head) const {
    if (IsWindowedLayer(layer)) {
      uint8_t* base = key ? swa_k_.get() : swa_v_.get();
      return base + ((layer_slot_[layer] * options_.n_head_kv + head) * swa_n_blocks_ + block) *
                        slice_bytes_;
    }
    uint8_t* base = key ? k_.get() : v_.get();
    return base + ((layer_slot_[layer] * options_.n_head_kv + head) * options_.n_blocks + block) *
                      slice_bytes_;
  }
  float* F32(void* p) const {
    UF_CHECK(options_.type == KvType::kF32) << "kv cache: F32 access to a non-F32 cache";
    return static_cast<float*>(p);
  }
  int32_t TakeBlock();
  void ReleaseBlock(int32_t block);
  void Unpublish(int32_t block);
  int32_t TakeSwaBlock();
  void ReleaseSwaBlock(int32_t block);
  // Gives back seq's windowed blocks wholly behind its length's window and slack.
  void Slide(Sequence& s);
  uint64_t ChainHash(uint64_t parent, const int32_t* tokens) const;

  KvCacheOptions options_;
  size_t slice_bytes_ = 0;  // block_size * KvRowBytes(type, head_dim)
  size_t pool_bytes_ = 0;   // n_main_layers_ * n_head_kv * n_blocks * slice_bytes_
  int64_t n_main_layers_ = 0;        // layers in the main pool
  std::vector<int64_t> layer_slot_;  // [n_layer] index of the layer within its pool
  std::vector<uint8_t> is_swa_;      // [n_layer] kept in the windowed pool
  // [n_layer][n_head_kv][n_blocks] slices, in 2 MiB pages. Attention reads one head's slices of
  // a sequence's blocks in order: head-major, a sequence whose block ids run consecutively is
  // one sequential stream per head (11.1-11.4 ms against 13.0-13.4 for a 4k-position decode's
  // attention on one core, block-major). With small pages every 1-4 KB slice also missed the
  // TLB (6 GB/s per core against 8 with huge pages).
  kernels::HugeBuffer k_;
  kernels::HugeBuffer v_;       // same layout as k_
  std::vector<int32_t> free_;   // free block ids (stack)
  std::vector<Sequence> seqs_;  // [max_seqs]

  // Prefix reuse.
  std::vector<int32_t> refs_;          // [n_blocks] sequences holding each block
  std::vector<uint8_t> published_;     // [n_blocks] 1 when reachable through by_hash_
  std::vector<uint64_t> block_hash_;   // [n_blocks] chain hash of published blocks
  std::vector<int32_t> block_tokens_;  // [n_blocks][block_size] tokens of published blocks
  std::unordered_map<uint64_t, int32_t> by_hash_;  // chain hash -> published block
  std::list<int32_t> lru_;  // published blocks with refs 0, least recently used first
  std::vector<std::list<int32_t>::iterator> lru_pos_;  // [n_blocks] position in lru_

  // Windowed pool: [n_swa_layers][n_head_kv][swa_n_blocks_] slices. A windowed block published
  // with a main block (swa_of_ / swa_owner_ pair them) stays cached in swa_lru_ when no
  // sequence holds it, so that a prefix ending there can be attached.
  int64_t swa_n_blocks_ = 0;
  size_t swa_pool_bytes_ = 0;
  kernels::HugeBuffer swa_k_;
  kernels::HugeBuffer swa_v_;
  std::vector<int32_t> swa_free_;
  std::vector<int32_t> swa_refs_;   // [swa_n_blocks_]
  std::vector<int32_t> swa_owner_;  // [swa_n_blocks_] published main block it belongs to, or -1
  std::vector<int32_t> swa_of_;     // [n_blocks] windowed block of a published block, or -1
  std::list<int32_t> swa_lru_;
  std::vector<std::list<int32_t>::iterator> swa_lru_pos_;  // [swa_n_blocks_]
};

}  // namespace uf::engine
