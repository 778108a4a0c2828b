// Helpers of the chained-decoding tests on a Vulkan device (gpu_chain_test.cc,
// gpu_chain_edits_test.cc): a forward with a small-block cache, the prompt, one sampled step at
// a time, and chains of one stream or several judged by their samplers as the engine judges
// them (each chain's bias and penalties from the sampler as it starts: engine::ChainEditsFor).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "base/check.h"
#include "engine/kv_cache.h"
#include "engine/seq_sampler.h"
#include "gpu/backend.h"
#include "gpu_service_util.h"
#include "model/batch.h"
#include "model/model.h"
#include "sampling/sampler.h"
#include "shared_data.h"

namespace uf::testing_chain {

// A test on each of the shared tiny models (its parameter: a model's name in ../shared/models),
// skipped, saying why, where no Vulkan device exists or ../shared is missing.
class ChainModelTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const std::string skip = testing_gpu::SkipReason();
    if (!skip.empty()) GTEST_SKIP() << skip;
    UF_REQUIRE_SHARED();
    auto m = model::Model::Load(std::string("../shared/models/") + GetParam() + ".gguf");
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value();
  }
  std::unique_ptr<model::Model> model_;
};
// The models' names as test names ('-' is not allowed in them).
inline std::string ModelTestName(const ::testing::TestParamInfo<const char*>& info) {
  std::string s = info.param;
  for (char& ch : s) ch = ch == '-' ? '_' : ch;
  return s;
}

inline constexpr gpu::DeviceSpec kVulkan{.vulkan = true, .index = -1};
inline const std::vector<int32_t> kPrompt = {1, 9038, 2501, 263, 931, 727, 3300};
inline const auto kP0 =
    static_cast<int32_t>(kPrompt.size());  // the first position after the prompt

inline engine::KvCacheOptions CacheFor(const model::Model& m, int max_seqs, int64_t ctx) {
  engine::KvCacheOptions co;
  co.n_layer = m.config().n_layer;
  co.n_head_kv = m.config().n_head_kv;
  co.head_dim = m.config().head_dim;
  co.block_size = 4;  // small blocks: a chain's steps cross block boundaries (and its feed)
  co.max_seqs = max_seqs;
  co.max_seq_len = ctx;
  co.n_blocks = engine::KvCacheOptions::BlocksFor(ctx * max_seqs, max_seqs, co.block_size);
  co.type = engine::KvType::kF16;
  co.host_storage = false;
  return co;
}

struct Device {
  std::unique_ptr<engine::KvCache> cache;
  std::unique_ptr<gpu::GpuForward> fwd;
};

inline Device Make(const model::Model& m, int max_seqs, int64_t ctx,
                   gpu::GpuForwardOptions o = {}) {
  Device d;
  auto cache = engine::KvCache::Create(CacheFor(m, max_seqs, ctx));
  UF_CHECK(cache.ok()) << cache.status().ToString();
  d.cache = std::move(cache).value();
  o.max_batch = 16;
  auto fwd = gpu::GpuForward::Create(m, kVulkan, d.cache.get(), o);
  UF_CHECK(fwd.ok()) << fwd.status().ToString();
  d.fwd = std::move(fwd).value();
  return d;
}

// The prompt into sequence seq; returns its greedy next token.
inline int32_t Prefill(gpu::GpuForward& f, int seq) {
  model::Batch b;
  for (size_t i = 0; i < kPrompt.size(); ++i) {
    b.Add(kPrompt[i], static_cast<int32_t>(i), seq, i + 1 == kPrompt.size());
  }
  int32_t next = -1;
  UF_CHECK(f.ForwardGreedy(b, &next).ok());
  return next;
}

// n sampled steps of seq from (token, pos), one Forward a step, each row sampled whole.
inline std::vector<int32_t> SampledOneAtATime(gpu::GpuForward& f, sampling::Sampler& s, int seq,
                                              int32_t token, int32_t pos, int64_t n) {
  std::vector<int32_t> out;
  model::Batch b;
  for (int64_t i = 0; i < n; ++i) {
    b.Clear();
    b.Add(token, pos + static_cast<int32_t>(i), seq, true);
    EXPECT_TRUE(f.Forward(b).ok());
    token = s.Sample(f.logits(0));
    s.Accept(token);
    out.push_back(token);
  }
  return out;
}

struct ChainCounts {
  int64_t chains = 0;          // ForwardSampledChain calls
  int64_t taken = 0;           // tokens the chains took
  int64_t whole = 0;           // of those, drawn from the whole row (SampleReduced undecided: -1)
  int64_t overruled = 0;       // of the others, tokens the device had drawn otherwise
  int64_t differed = 0;        // tokens the device had drawn otherwise, whole rows' too
  int64_t whole_differed = 0;  // of those, drawn from the whole row
  // SampledChainsBatch: the tokens each stream took in the first chain, and those that differed.
  std::vector<int64_t> first_chain;
  int64_t first_differed = 0, first_whole_differed = 0;
};

// The sampler's token for a chained step's row (-1: the chain is to bring the whole row),
// counted in c: drawn from the whole row, or overruling the device's draw.
inline int32_t Judge(sampling::Sampler& s, const model::TopRow& row, const float* whole,
                     int32_t drawn, ChainCounts* c) {
  const int32_t t = engine::SampleFromTop(s, row, whole);
  if (t < 0) return t;
  c->differed += t != drawn;
  c->whole_differed += t != drawn && whole != nullptr;
  if (whole != nullptr) {
    ++c->whole;
  } else {
    c->overruled += t != drawn;
  }
  ++c->taken;
  return t;
}

// n sampled tokens of seq from (token, pos) as run --device vulkan takes them: chains, each row
// the best 64 cannot decide sampled whole (the chain brings it). With other_uniforms, the device
// draws with uniforms that are not the sampler's (1 - u), so that the host's sampler overrules
// it.
inline std::vector<int32_t> SampledChained(Device& d, sampling::Sampler& s, int seq, int32_t token,
                                           int32_t pos, int64_t n, ChainCounts* c,
                                           const std::vector<int32_t>& banned = {},
                                           bool other_uniforms = false) {
  std::vector<int32_t> out;
  std::vector<float> uniforms;
  engine::ChainEditsHeld held;  // the sampler's bias and penalties as each chain starts
  const auto take = [&](int32_t t) {
    s.Accept(t);
    out.push_back(t);
    token = t;
    ++pos;
  };
  while (static_cast<int64_t>(out.size()) < n) {
    const int64_t left = n - static_cast<int64_t>(out.size());
    const model::ChainDraw draw = engine::ChainDrawFor(s, left, &uniforms);
    if (other_uniforms) {
      for (float& u : uniforms) u = 1.0f - u;
    }
    ++c->chains;
    auto r = d.fwd->ForwardSampledChain(
        seq, token, pos, left, draw,
        [&](const model::TopRow& row, const float* whole, int32_t drawn, bool*) {
          const int32_t t = Judge(s, row, whole, drawn, c);
          if (t >= 0) take(t);
          return t;
        },
        banned, engine::ChainEditsFor(s, &held));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) break;
    EXPECT_EQ(d.cache->Length(seq), pos) << "the cache ends at the last taken step";
  }
  return out;
}

// A stream of a batch of chains (SampledChainsBatch): its sampler, sequence, next token and
// position, bans, the tokens it wants and has, and a token count at which it ends a chain once
// (a stop the caller sees, as a stop string is).
struct Stream {
  sampling::Sampler* s;
  int seq;
  int32_t token, pos;
  std::vector<int32_t> banned;
  int64_t n;
  int64_t stop_at = -1;
  std::vector<int32_t> out;
  bool other_uniforms = false;  // the device draws with 1 - u (the host overrules it)
  int64_t flip_at = -1;         // ... or only its flip_at-th draw (of its first chain)
  int64_t differed = 0;         // tokens the device had drawn otherwise
};

// The streams' tokens as the serving engine takes them: chains of every stream still short of
// its n, a row each (ForwardSampledChains), each row judged by its stream's sampler. A stream
// ends the chain at its n-th token or at stop_at; the others take the step queued behind it. A
// stream whose draw is overruled loses a step and the chain goes on.
inline void SampledChainsBatch(Device& d, std::vector<Stream>& st, ChainCounts* c,
                               bool other_uniforms = false) {
  std::vector<std::vector<float>> uniforms(st.size());
  std::vector<engine::ChainEditsHeld> held(st.size());
  for (;;) {
    std::vector<size_t> active;
    int64_t left = 0;
    for (size_t i = 0; i < st.size(); ++i) {
      const auto have = static_cast<int64_t>(st[i].out.size());
      if (have < st[i].n) {
        active.push_back(i);
        left = std::max(left, st[i].n - have);
      }
    }
    if (active.empty()) return;
    std::vector<model::ChainStream> cs;
    std::vector<int64_t> before, draws;
    for (size_t k = 0; k < active.size(); ++k) {
      Stream& s = st[active[k]];
      model::ChainStream x;
      x.seq = s.seq;
      x.token = s.token;
      x.pos = s.pos;
      x.draw = engine::ChainDrawFor(*s.s, left, &uniforms[k]);
      draws.push_back(s.s->draws());
      if (other_uniforms || s.other_uniforms) {
        for (float& u : uniforms[k]) u = 1.0f - u;
      }
      if (s.flip_at >= 0 && s.flip_at < left) {
        uniforms[k][s.flip_at] = 1.0f - uniforms[k][s.flip_at];
        s.flip_at = -1;
      }
      x.banned = s.banned;
      x.edits = engine::ChainEditsFor(*s.s, &held[k]);
      cs.push_back(x);
      before.push_back(static_cast<int64_t>(s.out.size()));
    }
    ++c->chains;
    auto r =
        d.fwd->ForwardSampledChains(cs, left,
                                    [&](int64_t k, const model::TopRow& row, const float* whole,
                                        int32_t drawn, model::ChainTurn* turn) {
                                      Stream& s = st[active[k]];
                                      const int32_t t = Judge(*s.s, row, whole, drawn, c);
                                      if (t < 0) return t;
                                      s.differed += t != drawn;
                                      s.s->Accept(t);
                                      s.out.push_back(t);
                                      s.token = t;
                                      ++s.pos;
                                      turn->draws = s.s->draws() - draws[k];
                                      const auto have = static_cast<int64_t>(s.out.size());
                                      if (have == s.n) turn->more = false;
                                      if (have == s.stop_at) {
                                        turn->more = false;
                                        s.stop_at = -1;
                                      }
                                      return t;
                                    });
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->size(), active.size());
    if (c->chains == 1) {
      c->first_chain = *r;
      c->first_differed = c->differed;
      c->first_whole_differed = c->whole_differed;
    }
    for (size_t k = 0; k < active.size(); ++k) {
      const Stream& s = st[active[k]];
      EXPECT_EQ((*r)[k], static_cast<int64_t>(s.out.size()) - before[k]);
      EXPECT_EQ(d.cache->Length(s.seq), s.pos) << "stream " << active[k] << "'s cache";
    }
  }
}

}  // namespace uf::testing_chain
