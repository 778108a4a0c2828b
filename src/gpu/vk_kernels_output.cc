// Kernels at the ends of a step: the embedding (alone or with the first norm), the gather of the
// rows that want logits, and the reductions of the logits rows on the device (arg-max, top-k,
// the masks of edited tokens, whole rows copied back).
#include <cstdint>

#include "base/check.h"
#include "gpu/vk_kernels.h"
#include "gpu/vk_kernels_internal.h"
#include "sampling/sampler.h"

namespace uf::gpu {

using kernels_internal::FusedDOff;
using kernels_internal::Grid;
using kernels_internal::Groups64;

namespace {

// embed.glsl's number for a table's type.
uint32_t EmbedType(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return 0;
    case GgmlType::kF16:
      return 1;
    case GgmlType::kQ8_0:
      return 2;
    case GgmlType::kQ4_0:
      return 3;
    case GgmlType::kQ6_K:
      return 4;
    case GgmlType::kBF16:
      return 5;
    case GgmlType::kQ4_K:
      return 6;
    case GgmlType::kMXFP4:
      return 7;
    default:
      UF_CHECK(false) << "no embedding kernel for " << GgmlTypeName(type);
  }
  return 0;
}

}  // namespace

void Kernels::Embed(Recorder* r, const GpuMatrix& table, const Buffer& x, const Buffer& tok,
                    int64_t n) const {
  struct {
    uint32_t type, cols, d_off;
  } push{EmbedType(table.type), static_cast<uint32_t>(table.cols), table.d_off};
  r->Dispatch(*embed_, {table.buffer, x, tok}, push, Groups64(table.cols),
              static_cast<uint32_t>(n));
}

void Kernels::EmbedNorm(Recorder* r, const GpuMatrix& table, const Buffer& x, const Buffer& tok,
                        int64_t n, const Buffer& w, const Buffer& y, float eps, Activation act,
                        const Buffer& q) const {
  UF_CHECK(table.cols % ActivationBlock(act) == 0) << "embed_q: rows of " << table.cols;
  struct {
    uint32_t type, cols, d_off;
    float eps;
    uint32_t format, q_d_off, n;
  } push{EmbedType(table.type),
         static_cast<uint32_t>(table.cols),
         table.d_off,
         eps,
         static_cast<uint32_t>(act),
         act == Activation::kF32 ? 0u : FusedDOff(act, n * table.cols),
         static_cast<uint32_t>(n)};
  uint32_t gx, gy;
  Grid(n, &gx, &gy);
  r->Dispatch(*embed_q_, {table.buffer, x, tok, w, y, q}, push, gx, gy);
}

void Kernels::Gather(Recorder* r, const Buffer& x, const Buffer& y, const Buffer& idx, int64_t cols,
                     int64_t n_rows) const {
  const auto push = static_cast<uint32_t>(cols);
  r->Dispatch(*gather_, {x, y, idx}, push, Groups64(cols), static_cast<uint32_t>(n_rows));
}

void Kernels::ArgMax(Recorder* r, const Buffer& logits, const Buffer& out, const Buffer& part,
                     int64_t n_vocab, int64_t rows, int64_t chunk, const Feed* feed) const {
  const int64_t n_chunks = (n_vocab + chunk - 1) / chunk;
  UF_CHECK(chunk >= 64 && n_chunks <= 65535 && rows <= 65535) << n_vocab << " / " << chunk;
  UF_CHECK(feed == nullptr || (rows == 1 && feed->block_size > 0 && feed->ring_size > 0));
  struct {
    uint32_t n_vocab, chunk, n_chunks, pass, feed, block_size, max_blocks, ring_size;
  } push{static_cast<uint32_t>(n_vocab),
         static_cast<uint32_t>(chunk),
         static_cast<uint32_t>(n_chunks),
         0,
         0,
         1,
         0,
         1};
  // Without a feed its bindings are never touched: any buffer fills them.
  const Buffer& tok = feed != nullptr ? *feed->tok : part;
  const Buffer& bt = feed != nullptr ? *feed->bt : part;
  const Buffer& ring = feed != nullptr ? *feed->ring : part;
  r->Dispatch(*argmax_, {logits, out, part, tok, bt, ring}, push, static_cast<uint32_t>(n_chunks),
              static_cast<uint32_t>(rows));
  push.pass = 1;
  if (feed != nullptr) {
    push.feed = 1;
    push.block_size = static_cast<uint32_t>(feed->block_size);
    push.max_blocks = static_cast<uint32_t>(feed->max_blocks);
    push.ring_size = static_cast<uint32_t>(feed->ring_size);
  }
  r->Dispatch(*argmax_, {logits, out, part, tok, bt, ring}, push, static_cast<uint32_t>(rows));
}

void Kernels::SampleFeed(Recorder* r, const Buffer& top, const Buffer& draw, const Feed& feed,
                         const Buffer& top_ring, int64_t k, int64_t n_vocab, int64_t rows,
                         int64_t draw_words, const Buffer& known, int64_t cap) const {
  UF_CHECK(k >= 1 && k <= kMaxTopK && feed.block_size > 0 && feed.ring_size > 0 && rows >= 1 &&
           rows <= 65535 && draw_words > kDrawHeaderWords && cap >= 0 && cap <= kMaxChainKnown)
      << k << " " << rows << " " << cap;
  const struct {
    uint32_t k, n_vocab, block_size, max_blocks, ring_size, draw_words, cap;
  } push = {static_cast<uint32_t>(k),
            static_cast<uint32_t>(n_vocab),
            static_cast<uint32_t>(feed.block_size),
            static_cast<uint32_t>(feed.max_blocks),
            static_cast<uint32_t>(feed.ring_size),
            static_cast<uint32_t>(draw_words),
            static_cast<uint32_t>(cap)};
  r->Dispatch(*sample_, {top, draw, *feed.tok, *feed.bt, *feed.ring, top_ring, known}, push,
              static_cast<uint32_t>(rows));
}

void Kernels::EditRows(Recorder* r, const Buffer& logits, const Buffer& state, const Buffer& tok,
                       const Buffer& ring, int64_t n_vocab, int64_t rows, int64_t cap,
                       int64_t ring_size) const {
  UF_CHECK(cap >= 1 && cap <= kMaxChainKnown && rows >= 1 && rows <= 65535 && ring_size > 0)
      << cap << " " << rows;
  const struct {
    uint32_t n_vocab, cap, state_words, ring_size;
  } push = {static_cast<uint32_t>(n_vocab), static_cast<uint32_t>(cap),
            static_cast<uint32_t>(EditStateWords(cap)), static_cast<uint32_t>(ring_size)};
  r->Dispatch(*edit_rows_, {logits, state, tok, ring}, push, static_cast<uint32_t>(rows));
}

void Kernels::ChainRedo(Recorder* r, const Buffer& redo, const Feed& feed, const Buffer& draw,
                        int64_t rows, int64_t draw_words) const {
  UF_CHECK(rows >= 1 && feed.block_size > 0 && draw_words > kDrawHeaderWords) << rows;
  const struct {
    uint32_t rows, block_size, max_blocks, draw_words;
  } push = {static_cast<uint32_t>(rows), static_cast<uint32_t>(feed.block_size),
            static_cast<uint32_t>(feed.max_blocks), static_cast<uint32_t>(draw_words)};
  r->Dispatch(*chain_redo_, {redo, *feed.tok, *feed.bt, draw}, push, Groups64(rows));
}

namespace {

// SampleReduced bounds the error of the lse this summation gives.
static_assert(Kernels::kTopKChunk == sampling::Sampler::kTopKChunk);

struct TopKPush {
  uint32_t n_vocab, k, chunk, n_chunks, pass;
};
TopKPush MakeTopKPush(int64_t n_vocab, int64_t rows, int64_t k, int64_t chunk, uint32_t pass) {
  const int64_t n_chunks = (n_vocab + chunk - 1) / chunk;
  UF_CHECK(k >= 1 && k <= Kernels::kMaxTopK && chunk >= 1 && n_chunks <= 65535 && rows <= 65535)
      << k << " of " << n_vocab << " / " << chunk;
  return {static_cast<uint32_t>(n_vocab), static_cast<uint32_t>(k), static_cast<uint32_t>(chunk),
          static_cast<uint32_t>(n_chunks), pass};
}

}  // namespace

void Kernels::TopKChunks(Recorder* r, const Buffer& logits, const Buffer& out, const Buffer& part,
                         int64_t n_vocab, int64_t rows, int64_t k, int64_t chunk) const {
  const TopKPush push = MakeTopKPush(n_vocab, rows, k, chunk, 0);
  r->Dispatch(*topk_, {logits, out, part}, push, push.n_chunks, static_cast<uint32_t>(rows));
}

void Kernels::TopKMerge(Recorder* r, const Buffer& logits, const Buffer& out, const Buffer& part,
                        int64_t n_vocab, int64_t rows, int64_t k, int64_t chunk) const {
  const TopKPush push = MakeTopKPush(n_vocab, rows, k, chunk, 1);
  r->Dispatch(*topk_, {logits, out, part}, push, static_cast<uint32_t>(rows));
}

void Kernels::MaskRows(Recorder* r, const Buffer& logits, const Buffer& known, const Buffer& raw,
                       int64_t n_vocab, int64_t rows, int64_t cap) const {
  UF_CHECK(cap >= 1);
  const struct {
    uint32_t n_vocab, cap;
  } push = {static_cast<uint32_t>(n_vocab), static_cast<uint32_t>(cap)};
  r->Dispatch(*mask_rows_, {logits, known, raw}, push, Groups64(cap), static_cast<uint32_t>(rows));
}

void Kernels::AllowRows(Recorder* r, const Buffer& logits, const Buffer& allow, int64_t n_vocab,
                        int64_t rows) const {
  const struct {
    uint32_t n_vocab, words;
  } push = {static_cast<uint32_t>(n_vocab), static_cast<uint32_t>(AllowWords(n_vocab) - 1)};
  r->Dispatch(*allow_rows_, {logits, allow}, push, Groups64(n_vocab), static_cast<uint32_t>(rows));
}

void Kernels::CopyRows(Recorder* r, const Buffer& x, const Buffer& y, const Buffer& flags,
                       int64_t cols, int64_t n_rows) const {
  const auto push = static_cast<uint32_t>(cols);
  r->Dispatch(*copy_rows_, {x, y, flags}, push, Groups64(cols), static_cast<uint32_t>(n_rows));
}

}  // namespace uf::gpu
