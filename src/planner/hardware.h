// Hardware profiles for the planner: what one device can hold, stream and compute, how devices
// are joined, and what a device-hour costs. The table is compiled in (hardware.cc, every figure
// with its source) so `ultrafast plan` finds it from any directory; `local` is measured on this
// machine by the CLI (plan_command.cc) and built with LocalProfile.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace uf::planner {

// How a model too big for one device is split. Tensor parallelism splits every matrix, so all
// devices stream their share at once and one user's token sees their summed bandwidth (GPUs in
// an NVLink domain). Pipeline parallelism gives each device whole layers, so one token visits
// the devices in turn (SRAM machines: Cerebras wafers, Groq chips).
enum class Parallelism { kTensor, kPipeline };

struct HardwareProfile {
  std::string name;              // CLI name, "h100"
  std::string display;           // "NVIDIA H100 SXM5"
  double memory_bytes = 0;       // weights + KV a device can hold (HBM, or SRAM on-chip)
  double bandwidth_bytes_s = 0;  // peak read bandwidth of that memory, per device
  double bf16_flops = 0;         // dense BF16 multiply-add rate (2 flops each), per device
  // Rate the matmuls of quantized weights run at. GPUs dequantize 4/8-bit weights to BF16 (W4A16,
  // W8A16 kernels), so it is the BF16 rate there; this CPU's kernels use int8 dot products.
  double quantized_ops_s = 0;
  Parallelism parallelism = Parallelism::kTensor;
  int devices_per_domain = 1;  // devices joined by the fast fabric (NVLink domain; 0 = no limit)
  // Fractions of the peaks that real kernels reach (decode streaming; batched matmuls).
  double bandwidth_efficiency = 0.85;
  double compute_efficiency = 0.5;
  // Fixed latency per layer and token that neither bandwidth nor compute explains: kernel
  // launches and synchronisation on a GPU, dataflow latency across a wafer.
  double layer_latency_s = 0;
  // Tensor parallel: two all-reduces per layer, each this long. Pipeline: one hop per device
  // boundary a token crosses.
  double link_latency_s = 0;
  // How memory time m and compute time c combine: (m^p + c^p)^(1/p). Large p is the roofline's
  // max(m, c); a smaller one is the partial overlap near the knee that this CPU shows (batch
  // 2/3/4/6/8 at 1.00/1.10/1.23/1.70/2.38x batch 1, docs/tiers.md run E, fits p = 6).
  double overlap_exponent = 6.0;
  double usable_memory_fraction = 0.9;  // the rest: activations, runtime, fragmentation
  double price_per_hour = 0;            // USD per device-hour (an assumption; --price-per-hour)
  std::string source;                   // where the figures come from
};

// The compiled-in profiles (every name except "local").
const std::vector<HardwareProfile>& HardwareProfiles();

// A profile by name (case-insensitive; a few aliases such as "cerebras" and "groq").
// NotFound naming the known profiles; "local" is NotFound here (it needs a measurement).
StatusOr<HardwareProfile> FindHardware(std::string_view name);

// "local" from a probe on this machine: read bandwidth in GB/s (1e9 bytes/s), the BF16 (or FP32
// FMA) rate in GFLOP/s and the int8 dot-product rate in GOP/s, as `ultrafast bench` measures
// them, and how many bytes of memory it has. InvalidArgument on non-positive figures.
StatusOr<HardwareProfile> LocalProfile(double bandwidth_gb_s, double bf16_gflops, double int8_gops,
                                       double memory_bytes);

// Comma-separated names -> profile names, validated, in order (duplicates dropped). "local"
// passes through for the caller to measure; "all" is every compiled-in profile. InvalidArgument
// on an empty list or name, NotFound on an unknown name.
StatusOr<std::vector<std::string>> ParseHardwareList(std::string_view list);

}  // namespace uf::planner
