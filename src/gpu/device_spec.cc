#include <charconv>
#include <cstdlib>
#include <string>

#include "base/log.h"
#include "gpu/backend.h"
#include "gpu/env_choice.h"

namespace uf::gpu {

std::string DeviceSpec::ToString() const {
  if (!vulkan) return "cpu";
  return index < 0 ? "vulkan" : "vulkan:" + std::to_string(index);
}

StatusOr<DeviceSpec> ParseDeviceSpec(std::string_view s) {
  DeviceSpec d;
  if (s == "cpu") return d;
  if (s.substr(0, 6) == "vulkan") {
    d.vulkan = true;
    std::string_view rest = s.substr(6);
    if (rest.empty()) return d;
    if (rest[0] == ':' && rest.size() > 1) {
      int n = -1;
      auto [p, ec] = std::from_chars(rest.data() + 1, rest.data() + rest.size(), n);
      if (ec == std::errc() && p == rest.data() + rest.size() && n >= 0) {
        d.index = n;
        return d;
      }
    }
  }
  return InvalidArgumentError(
      "--device: expected cpu, vulkan or vulkan:N (N from `ultrafast "
      "devices`), got '" +
      std::string(s) + "'");
}

namespace {

constexpr Choices<NormTail, 5> kNormTails = {{"tune", NormTail::kTune},
                                             {"on", NormTail::kOn},
                                             {"off", NormTail::kOff},
                                             {"1", NormTail::kOn},
                                             {"0", NormTail::kOff}};

constexpr Choices<MatMul, 3> kMatMuls = {
    {"off", MatMul::kOff}, {"tiled", MatMul::kTiled}, {"coopmat", MatMul::kCoopMat}};
constexpr Choices<AttentionTiles, 4> kAttentionTiles = {{"tune", AttentionTiles::kTune},
                                                        {"auto", AttentionTiles::kAuto},
                                                        {"tiled", AttentionTiles::kTiled},
                                                        {"token", AttentionTiles::kToken}};

constexpr Choices<bool, 4> kChain = {{"on", true}, {"off", false}, {"1", true}, {"0", false}};

}  // namespace

bool ChainSteps() { return EnvChoice("UF_GPU_CHAIN", kChain); }

NormTail ResolveNormTail(NormTail t) {
  return t != NormTail::kDefault ? t : EnvChoice("UF_GPU_NORM_TAIL", kNormTails);
}

const char* NormTailName(NormTail t) { return ChoiceName(kNormTails, t); }

MatMul ResolveMatMul(MatMul m) {
  return m != MatMul::kDefault ? m : EnvChoice("UF_GPU_MATMUL", kMatMuls);
}

const char* MatMulName(MatMul m) { return ChoiceName(kMatMuls, m); }

AttentionTiles ResolveAttentionTiles(AttentionTiles a) {
  return a != AttentionTiles::kDefault ? a : EnvChoice("UF_GPU_ATTENTION", kAttentionTiles);
}

const char* AttentionTilesName(AttentionTiles a) { return ChoiceName(kAttentionTiles, a); }

}  // namespace uf::gpu
