// The online choice between two ways of running a step that give the same bits, so that the
// choice changes speed only and may be made while serving: the GPU forward's attention kernels
// (attention_tiled.comp against attention.comp, AttentionTiles::kTune) and the norm tail of a
// one-token step (NormTail::kTune). Which is faster depends on the device (its shared memory,
// caches, load paths and barrier cost) and on the step, so it is measured on the device rather
// than assumed. Steps are sorted into classes by what moves the balance: one sequence's run of
// tokens or single tokens of many sequences, the batch's tokens and its context depth, each in
// powers of two. A class's first 2 x kTrials steps alternate the two ways in balanced pairs
// (0 1 1 0 0 1), each timed; from then on the way with the lower median runs. Pure logic
// (tests/step_tuner_test.cc).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace uf::gpu {

class StepTuner {
 public:
  static constexpr int kTrials = 3;  // timed steps of each way per class

  // subject: what is chosen ("attention"); way0, way1: the two ways' names, for Describe.
  StepTuner(const char* subject, const char* way0, const char* way1)
      : subject_(subject), names_{way0, way1} {}

  struct Class {
    bool runs = false;    // tokens in runs of one sequence (a prefill chunk, a verify batch)
    int tokens_log2 = 0;  // bit width of the batch's token count
    int depth_log2 = 0;   // bit width of its longest context (last position + 1)
    auto operator<=>(const Class&) const = default;
  };
  // depth 0: a class for every depth (a choice whose cost does not grow with the context).
  static Class ClassOf(bool runs, int64_t tokens, int64_t depth);

  // The way (0 or 1) the next step of class c runs: the chosen one, or while trying, the one
  // timed fewer times, and on a tie 0 after an even number of pairs, 1 after an odd one.
  int Pick(const Class& c) const;
  // The step of class c that ran way `way` took `seconds` (GPU time; <= 0: unmeasured, ignored).
  void Report(const Class& c, int way, double seconds);
  // The way class c settled on, -1 while it is still being tried.
  int Chosen(const Class& c) const;
  // A line per class, led by the subject: its ways' median times and the one chosen (or
  // "trying").
  std::vector<std::string> Describe() const;
  // The same line for class c alone.
  std::string Describe(const Class& c) const;

 private:
  struct Trials {
    std::vector<double> seconds[2];
    int chosen = -1;
  };
  std::string Line(const Class& c, const Trials& t) const;

  const char* subject_;
  const char* names_[2];
  std::map<Class, Trials> classes_;
};

}  // namespace uf::gpu
