// Reading a serving engine's output in tests: a request's events collected into one Output, and
// the engine's stats once the last step's bookkeeping has settled.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/request.h"
#include "engine/service.h"

namespace uf::engine::testing_service {

struct Output {
  std::string text;
  std::vector<int32_t> tokens;  // from the logprobs (ask top_logprobs >= 0 to get them)
  std::vector<float> logprobs;  // the tokens' own logprobs, beside them
  FinishReason finish = FinishReason::kNone;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
  GenerationEvent final_event;
};

// Holds the engine before its hold_at-th step (1 = the first) until Open(), for tests that need
// something to be true before the engine goes on: requests queued together, or a stream still
// running when they act. Waiting for that condition, instead of racing a millisecond-scale model,
// keeps them deterministic on a loaded machine. Give Hook() to ServiceOptions::step_hook; Open()
// before the service is destroyed (a gate left closed lets go after 60 s, so a failed test ends).
class StepGate {
 public:
  explicit StepGate(int64_t hold_at = 1) : state_(std::make_shared<State>()) {
    state_->hold_at = hold_at;
  }
  std::function<void()> Hook() const {
    return [state = state_] {
      std::unique_lock<std::mutex> lock(state->mu);
      if (++state->steps < state->hold_at) return;
      state->cv.wait_for(lock, std::chrono::seconds(60), [&] { return state->open; });
    };
  }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->open = true;
    }
    state_->cv.notify_all();
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    int64_t hold_at = 1;
    int64_t steps = 0;
    bool open = false;
  };
  std::shared_ptr<State> state_;
};

// Stats are published after the step that sent the final events: poll until they settle (the
// 30 s cap only ends a test that would otherwise hang).
inline EngineStats SettledStats(const Service& s) {
  EngineStats st = s.Stats();
  for (int i = 0; i < 30000 && (st.running > 0 || st.kv_blocks_used > 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    st = s.Stats();
  }
  return st;
}

// Pops events until the final one (which must carry no error), failing after 60 s of silence.
inline Output Collect(RequestChannel& ch) {
  Output out;
  std::vector<GenerationEvent> events;
  for (;;) {
    if (!ch.Pop(&events, 60.0)) {
      ADD_FAILURE() << "no event within 60 s";
      return out;
    }
    for (GenerationEvent& e : events) {
      out.text += e.text;
      for (const TokenLogprob& lp : e.logprobs) {
        out.tokens.push_back(lp.token);
        out.logprobs.push_back(lp.logprob);
      }
      if (e.finish != FinishReason::kNone) {
        EXPECT_TRUE(e.error.ok()) << e.error.ToString();
        out.finish = e.finish;
        out.completion_tokens = e.completion_tokens;
        out.cached_tokens = e.cached_tokens;
        out.final_event = e;
        return out;
      }
    }
  }
}

}  // namespace uf::engine::testing_service
