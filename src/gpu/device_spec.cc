#include <charconv>
#include <cstdlib>
#include <string>

#include "base/log.h"
#include "gpu/backend.h"

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

bool ResolveNormTail(bool option) {
  const char* env = std::getenv("UF_GPU_NORM_TAIL");
  if (env == nullptr || *env == '\0') return option;
  return std::string(env) != "0";
}

MatMul ResolveMatMul(MatMul m) {
  if (m != MatMul::kDefault) return m;
  const char* env = std::getenv("UF_GPU_MATMUL");
  if (env == nullptr || *env == '\0') return MatMul::kOff;
  const std::string v(env);
  if (v == "tiled") return MatMul::kTiled;
  if (v == "coopmat") return MatMul::kCoopMat;
  if (v != "off") {
    UF_LOG(WARNING) << "UF_GPU_MATMUL=" << v << " is not off, tiled or coopmat: off";
  }
  return MatMul::kOff;
}

const char* MatMulName(MatMul m) {
  switch (m) {
    case MatMul::kTiled:
      return "tiled";
    case MatMul::kCoopMat:
      return "coopmat";
    default:
      return "off";
  }
}

AttentionTiles ResolveAttentionTiles(AttentionTiles a) {
  if (a != AttentionTiles::kDefault) return a;
  const char* env = std::getenv("UF_GPU_ATTENTION");
  if (env == nullptr || *env == '\0') return AttentionTiles::kTune;
  const std::string v(env);
  if (v == "auto") return AttentionTiles::kAuto;
  if (v == "tiled") return AttentionTiles::kTiled;
  if (v == "token") return AttentionTiles::kToken;
  if (v != "tune") {
    UF_LOG(WARNING) << "UF_GPU_ATTENTION=" << v << " is not tune, auto, tiled or token: tune";
  }
  return AttentionTiles::kTune;
}

const char* AttentionTilesName(AttentionTiles a) {
  switch (a) {
    case AttentionTiles::kTiled:
      return "tiled";
    case AttentionTiles::kToken:
      return "token";
    case AttentionTiles::kAuto:
      return "auto";
    default:
      return "tune";
  }
}

}  // namespace uf::gpu
