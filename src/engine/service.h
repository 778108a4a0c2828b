// The serving engine: one thread owns the model's Decoder, the paged KV cache and every running
// sequence, and runs continuous batching. Each step it builds one Batch holding one decode token
// per running sequence plus chunks of waiting prompts (at most prefill_chunk prompt tokens per
// step, so running streams keep flowing while a long prompt is read), runs one Forward (one pass
// over the weights for all of them), samples, and pushes text to each request's channel.
// Requests join and leave only at step boundaries. Other threads only Submit, Cancel (through
// the channel) and read Stats.
//
// KV memory: a request is admitted when a sequence slot is free and the pool can hold its prompt;
// when decoding runs out of blocks the newest sequence is preempted (its blocks released, its
// tokens kept) and recomputed later, so running out of KV never fails a request.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "engine/kv_cache.h"
#include "engine/request.h"
#include "model/batch.h"
#include "model/decoder.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace uf::engine {

struct ServiceOptions {
  int max_seqs = 8;             // sequences decoded together
  int64_t ctx = 4096;           // tokens per sequence (prompt + output)
  int64_t kv_tokens = 0;        // KV pool size in tokens; 0 = ctx * max_seqs
  int64_t block_size = 16;      // tokens per KV block
  int64_t prefill_chunk = 256;  // prompt tokens per step, all sequences together
  int max_queue = 64;           // waiting requests beyond which Submit fails
  bool prefix_cache = true;     // reuse KV blocks of identical prompt prefixes
  int n_threads = 0;            // 0 = ThreadPool::DefaultThreads()
  // Tests: runs on the engine thread before every step (e.g. to slow the engine down).
  std::function<void()> step_hook;
};

class Service {
 public:
  // model and tokenizer must outlive the service. Starts the engine thread.
  static StatusOr<std::unique_ptr<Service>> Create(const model::Model& model,
                                                   const Tokenizer& tokenizer,
                                                   const ServiceOptions& options);
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  // Queues a request. InvalidArgument for an empty prompt, OutOfRange when the prompt leaves no
  // room in the context, ResourceExhausted when the queue is full, Unavailable after Shutdown.
  // max_tokens is clamped to the room left in the context.
  StatusOr<std::shared_ptr<RequestChannel>> Submit(GenerationRequest request);

  // Stops the engine thread; unfinished requests get a final kError event (Unavailable).
  // Idempotent.
  void Shutdown();

  EngineStats Stats() const;
  const ServiceOptions& options() const { return options_; }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  const model::Model& model() const { return model_; }

 private:
  struct Sequence;

  Service(const model::Model& model, const Tokenizer& tokenizer, const ServiceOptions& options);
  void Loop();
  // One continuous-batching step; false when there was nothing to do.
  bool Step();
  void Admit();
  bool BuildBatch();
  void Preempt(size_t index);
  void Sample(Sequence& seq, const float* logits);
  void Finish(Sequence& seq, FinishReason reason, Status error = OkStatus());
  void Release(Sequence& seq);
  int64_t BlocksToHold(int64_t tokens) const;
  void PublishStats();

  const model::Model& model_;
  const Tokenizer& tokenizer_;
  ServiceOptions options_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<model::Decoder> decoder_;

  // Shared with Submit (guarded by mu_).
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Sequence>> incoming_;
  bool stopping_ = false;
  std::atomic<int64_t> queued_{0};  // incoming_ + waiting_

  // Engine thread only.
  std::deque<std::unique_ptr<Sequence>> waiting_;   // admission order (preempted ones first)
  std::vector<std::unique_ptr<Sequence>> running_;  // admission order
  std::vector<int> free_slots_;                     // KV sequence ids not in use
  model::Batch batch_;
  std::vector<Sequence*> batch_outputs_;  // [n_outputs] sequence of each logits row
  std::vector<std::pair<Sequence*, int64_t>> batch_feeds_;  // tokens fed per sequence this step
  std::vector<int32_t> eog_ids_;  // end-of-generation tokens (banned when ignoring EOS)
  std::vector<float> scratch_;    // [n_vocab] logits being sampled

  // Stats, written by the engine thread.
  std::atomic<int64_t> running_count_{0};
  std::atomic<int64_t> kv_used_{0}, kv_cached_{0}, kv_free_{0};
  std::atomic<int64_t> prefix_hit_tokens_{0}, prompt_tokens_computed_{0};
  std::atomic<int64_t> steps_{0}, preemptions_{0};

  std::thread thread_;
  std::once_flag shutdown_once_;
};

}  // namespace uf::engine
