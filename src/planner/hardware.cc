#include "planner/hardware.h"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace uf::planner {
namespace {

constexpr double kGB = 1e9;
constexpr double kTB = 1e12;

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// Shared by the NVIDIA parts: what their decode kernels reach, not what the datasheet promises.
// Bandwidth 0.85: SGLang's Llama-3.1-8B at 158 tok/s on an H100 streams 2.4 TB/s of 3.35 (0.72)
// with launch gaps included; microbenchmarks reach ~0.9. Compute 0.6: batched decode GEMMs are
// skinny. Layer latency 5 us: a layer is ~7 kernels under CUDA graphs, ~0.7 us launch and tail
// each. All-reduce 8 us: the small-message latency of NCCL over NVLink.
HardwareProfile Nvidia(std::string name, std::string display, double memory, double bandwidth,
                       double bf16, int domain, double price, std::string source) {
  HardwareProfile p;
  p.name = std::move(name);
  p.display = std::move(display);
  p.memory_bytes = memory;
  p.bandwidth_bytes_s = bandwidth;
  p.bf16_flops = bf16;
  p.quantized_ops_s = bf16;  // W4A16 / W8A16: weights dequantized into BF16 matmuls
  p.parallelism = Parallelism::kTensor;
  p.devices_per_domain = domain;
  p.bandwidth_efficiency = 0.85;
  p.compute_efficiency = 0.6;
  p.layer_latency_s = 5e-6;
  p.link_latency_s = 8e-6;
  p.overlap_exponent = 6.0;
  p.usable_memory_fraction = 0.9;
  p.price_per_hour = price;
  p.source = std::move(source);
  return p;
}

std::vector<HardwareProfile> MakeProfiles() {
  std::vector<HardwareProfile> v;
  // NVIDIA H100 SXM5 datasheet: 80 GB HBM3, 3.35 TB/s, BF16 989 TFLOPS dense (1,979 with
  // sparsity), 8 GPUs per HGX board on NVLink 4 (900 GB/s). Price: typical 2025 on-demand cloud
  // rate per GPU-hour (assumption).
  v.push_back(Nvidia("h100", "NVIDIA H100 SXM5 (80 GB HBM3)", 80 * kGB, 3.35 * kTB, 989e12, 8, 2.50,
                     "NVIDIA H100 datasheet: 80 GB, 3.35 TB/s, 989 TFLOPS BF16 dense; "
                     "$2.50/GPU-h assumed"));
  // NVIDIA H200 SXM datasheet: 141 GB HBM3e, 4.8 TB/s, the H100's compute (989 TFLOPS BF16).
  v.push_back(Nvidia("h200", "NVIDIA H200 SXM (141 GB HBM3e)", 141 * kGB, 4.8 * kTB, 989e12, 8,
                     3.50,
                     "NVIDIA H200 datasheet: 141 GB, 4.8 TB/s, 989 TFLOPS BF16 dense; "
                     "$3.50/GPU-h assumed"));
  // NVIDIA HGX B200: 180 GB HBM3e usable (192 GB physical), 8 TB/s, BF16 2.25 PFLOPS dense
  // (4.5 sparse), 8 GPUs per board on NVLink 5 (1.8 TB/s).
  v.push_back(Nvidia("b200", "NVIDIA HGX B200 (180 GB HBM3e)", 180 * kGB, 8 * kTB, 2.25e15, 8, 5.00,
                     "NVIDIA HGX B200 specifications: 180 GB, 8 TB/s, 2.25 PFLOPS BF16 dense; "
                     "$5.00/GPU-h assumed"));
  // NVIDIA GB300 NVL72: 72 Blackwell Ultra GPUs in one NVLink domain; rack figures 20.7 TB HBM3e
  // at 576 TB/s and 360 PFLOPS BF16 with sparsity, so per GPU 288 GB, 8 TB/s, 2.5 PFLOPS dense.
  v.push_back(Nvidia("gb300", "NVIDIA GB300 NVL72 (per GPU, 72 per NVLink domain)", 288 * kGB,
                     8 * kTB, 2.5e15, 72, 7.00,
                     "NVIDIA GB300 NVL72 specifications: 20.7 TB HBM3e, 576 TB/s, 72 GPUs; per "
                     "GPU 288 GB, 8 TB/s, 2.5 PFLOPS BF16 dense; $7.00/GPU-h assumed"));

  // Cerebras WSE-3 (CS-3 system): 44 GB on-chip SRAM, 21 PB/s memory bandwidth, 125 PFLOPS peak.
  // The bandwidth roofline is irrelevant here (a 16 GB model streams in under a microsecond), so
  // the speed is set by latency, which no datasheet gives. Both latencies are fitted to
  // Cerebras's launch figures (2024-08-27, 16-bit weights): Llama-3.1-8B at 1,800 tok/s on one
  // wafer gives 1 / 1800 / 32 layers = 17 us per layer; Llama-3.1-70B at 450 tok/s on 4 wafers
  // (141 GB / 39.6 GB usable) then leaves 2.22 - 80 x 0.017 = 0.86 ms for 3 wafer boundaries,
  // 0.29 ms each. Those two anchors are therefore fits, not checks (docs/planner.md). Price: no
  // public rental rate per wafer; ~$2.5M per CS-3 over 3 years plus ~23 kW of power is ~$100/h
  // (assumption).
  {
    HardwareProfile p;
    p.name = "wse3";
    p.display = "Cerebras WSE-3 (CS-3, 44 GB SRAM per wafer)";
    p.memory_bytes = 44 * kGB;
    p.bandwidth_bytes_s = 21e15;
    p.bf16_flops = 125e15;
    p.quantized_ops_s = 125e15;
    p.parallelism = Parallelism::kPipeline;
    p.devices_per_domain = 0;
    p.bandwidth_efficiency = 0.85;
    p.compute_efficiency = 0.3;
    p.layer_latency_s = 17e-6;
    p.link_latency_s = 0.29e-3;
    p.overlap_exponent = 6.0;
    p.usable_memory_fraction = 0.9;
    p.price_per_hour = 100.0;
    p.source =
        "Cerebras WSE-3: 44 GB SRAM, 21 PB/s, 125 PFLOPS; latencies fitted to Cerebras Inference "
        "launch (8B 1,800 tok/s, 70B 450 tok/s); $100/wafer-h assumed";
    v.push_back(p);
  }
  // Groq LPU (GroqChip): 230 MB SRAM per chip, 80 TB/s on-die bandwidth, 188 TFLOPS FP16,
  // 750 TOPS INT8 (TechPowerUp, 2024-02); a model spans hundreds of chips in a pipeline. Latency
  // per layer fitted to Groq's Llama-2-7B at 750 tok/s (32 layers: 1 / 750 / 32 = 41.7 us), with
  // chip-to-chip hops folded into it; the same source's Llama-2-70B at 300 tok/s (80 layers) is
  // then a check: 80 x 41.7 us = 3.3 ms, 300 tok/s. Price: ~$20k per card over 3 years plus power
  // is ~$1 per chip-hour (assumption).
  {
    HardwareProfile p;
    p.name = "groq";
    p.display = "Groq LPU (230 MB SRAM per chip)";
    p.memory_bytes = 0.23 * kGB;
    p.bandwidth_bytes_s = 80 * kTB;
    p.bf16_flops = 188e12;
    p.quantized_ops_s = 750e12;
    p.parallelism = Parallelism::kPipeline;
    p.devices_per_domain = 0;
    p.bandwidth_efficiency = 0.85;
    p.compute_efficiency = 0.5;
    p.layer_latency_s = 41.7e-6;
    p.link_latency_s = 0;
    p.overlap_exponent = 6.0;
    p.usable_memory_fraction = 0.9;
    p.price_per_hour = 1.0;
    p.source =
        "Groq LPU: 230 MB SRAM, 80 TB/s, 188 TFLOPS FP16, 750 TOPS INT8; layer latency fitted "
        "to Llama-2-7B at 750 tok/s; $1/chip-h assumed";
    v.push_back(p);
  }
  return v;
}

}  // namespace

const std::vector<HardwareProfile>& HardwareProfiles() {
  static const std::vector<HardwareProfile>* const kProfiles =
      new std::vector<HardwareProfile>(MakeProfiles());
  return *kProfiles;
}

StatusOr<HardwareProfile> FindHardware(std::string_view name) {
  std::string n = Lower(name);
  if (n == "h100-sxm" || n == "h100sxm") n = "h100";
  if (n == "b300" || n == "gb300-nvl72" || n == "nvl72") n = "gb300";
  if (n == "cerebras" || n == "wse-3" || n == "cs3" || n == "cs-3") n = "wse3";
  if (n == "lpu") n = "groq";
  for (const HardwareProfile& p : HardwareProfiles()) {
    if (p.name == n) return p;
  }
  std::string known = "local";
  for (const HardwareProfile& p : HardwareProfiles()) known += ", " + p.name;
  return NotFoundError("unknown hardware '" + std::string(name) + "' (known: " + known + ")");
}

StatusOr<HardwareProfile> LocalProfile(double bandwidth_gb_s, double bf16_gflops, double int8_gops,
                                       double memory_bytes) {
  for (double x : {bandwidth_gb_s, bf16_gflops, int8_gops, memory_bytes}) {
    if (!(x > 0) || !std::isfinite(x)) {
      return InvalidArgumentError("local profile: probe figures must be positive");
    }
  }
  HardwareProfile p;
  p.name = "local";
  p.display = "this machine (measured)";
  p.memory_bytes = memory_bytes;
  p.bandwidth_bytes_s = bandwidth_gb_s * 1e9;
  p.bf16_flops = bf16_gflops * 1e9;
  p.quantized_ops_s = int8_gops * 1e9;
  p.parallelism = Parallelism::kTensor;
  p.devices_per_domain = 1;
  // Calibrated against `ultrafast bench` (docs/planner.md, calibration): decode streams 0.78-0.90
  // of the probe's read bandwidth (docs/performance.md, 0.82 on average); batched Q4_0 decode at
  // 8 sequences reaches 0.24 of the bare int8 dot rate on a quiet host (72 tok/s against 657-820
  // GOP/s of vpmaddubsw: the kernels add a vpmaddwd on the same pipes, unpacking and scales);
  // each layer costs the thread pool a few synchronisations.
  p.bandwidth_efficiency = 0.82;
  p.compute_efficiency = 0.25;
  p.layer_latency_s = 20e-6;
  p.link_latency_s = 0;
  p.overlap_exponent = 6.0;
  p.usable_memory_fraction = 0.8;
  p.price_per_hour = 0.10;
  p.source =
      "measured by the plan command's probe (read bandwidth, bf16/f32 and int8 peaks); "
      "$0.10/h assumed";
  return p;
}

StatusOr<std::vector<std::string>> ParseHardwareList(std::string_view list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string_view::npos) comma = list.size();
    const std::string_view item = list.substr(start, comma - start);
    if (item.empty())
      return InvalidArgumentError("--hw: empty name in '" + std::string(list) + "'");
    std::string name = Lower(item);
    std::vector<std::string> names = {name};
    if (name == "all") {  // every compiled-in profile (not local: that one needs the probe)
      names.clear();
      for (const HardwareProfile& p : HardwareProfiles()) names.push_back(p.name);
    } else if (name != "local") {
      UF_ASSIGN_OR_RETURN(HardwareProfile p, FindHardware(item));
      names = {p.name};
    }
    for (const std::string& n : names) {
      if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
    }
    start = comma + 1;
  }
  if (out.empty()) return InvalidArgumentError("--hw: no hardware named");
  return out;
}

}  // namespace uf::planner
