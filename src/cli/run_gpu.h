// `run --device vulkan`: the prompt and the generated tokens one at a time through a GpuDecoder
// (no batched prefill and no speculation on the GPU yet), sampled by the same sampler chain as
// the CPU path, so greedy output is the CPU path's wherever the logits agree.
#pragma once

#include <span>

#include "engine/generate.h"
#include "gpu/backend.h"
#include "tokenizer/tokenizer.h"

namespace uf::cli {

Status GenerateOnGpu(gpu::GpuDecoder& decoder, const Tokenizer& tokenizer,
                     std::span<const int32_t> prompt, const engine::GenerateOptions& options,
                     const engine::TextCallback& on_text, engine::GenerateStats* stats);

}  // namespace uf::cli
