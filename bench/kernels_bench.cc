// Weight-streaming benchmark of the matmul kernels against the machine's own read bandwidth.
//
// For each weight type and ISA tier: a Llama-3.2-1B-shaped set of matrices (alternating
// 8192x2048 and 2048x8192, as the FFN's gate/up and down) totalling more than any cache, timed
// as a decode pass (MatMul, n_tokens = 1, or --decode_tokens for batched decode, every matrix
// once: GB/s of weights) and as a prefill
// tile (n_tokens = 64: GFLOP/s). The DRAM read bandwidth is measured in the same run between
// passes, with the same threads, so ratios survive a noisy shared machine.
//
//   kernels_bench [--threads=2] [--reps=7] [--mb=384] [--types=q4_0,q8_0,...]
//                 [--isas=avx2,avx512] [--gemm_tokens=64] [--decode_tokens=1] [--shape=RxC]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "base/thread_pool.h"
#include "gguf/types.h"
#include "kernels/blocks.h"
#include "kernels/matmul.h"
#include "kernels/membw.h"
#include "kernels/quant.h"

namespace uf::kernels {
namespace {

struct Options {
  int threads = 2;
  int reps = 7;
  size_t mb = 384;
  int gemm_tokens = 64;
  // Tokens per decode pass: > 1 measures batched decode (several sequences, one weight pass).
  int decode_tokens = 1;
  // Every matrix this shape (rows x cols) instead of alternating the 1B FFN shapes; with a small
  // --mb the set stays cache-resident (e.g. the tiny model's 32000x256 output matrix).
  int64_t shape_rows = 0, shape_cols = 0;
  // Time a second decode pass right after the first, so a set that fits the caches is read from
  // them (the bandwidth probe in between evicts everything otherwise).
  bool warm = false;
  // Thread CPU time instead of wall time (with --threads=1 only): on a machine shared with
  // other jobs, time-slicing then does not count, only the speed while running.
  bool cpu_clock = false;
  std::vector<GgmlType> types = {GgmlType::kQ4_0, GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ6_K,
                                 GgmlType::kF16,  GgmlType::kBF16, GgmlType::kF32};
  std::vector<Isa> isas;
};

std::vector<std::string> Split(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const size_t end = comma == std::string_view::npos ? s.size() : comma;
    if (end > start) out.emplace_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

bool ParseOptions(int argc, char** argv, Options* o) {
  const Isa best = ActiveIsa();
  for (int i = static_cast<int>(Isa::kAvx2); i <= static_cast<int>(best); ++i) {
    o->isas.push_back(static_cast<Isa>(i));
  }
  if (o->isas.empty()) o->isas.push_back(Isa::kScalar);
  for (int i = 1; i < argc; ++i) {
    const std::string_view a(argv[i]);
    const size_t eq = a.find('=');
    const std::string_view key = a.substr(0, eq);
    const std::string value(eq == std::string_view::npos ? "" : a.substr(eq + 1));
    if (key == "--threads") {
      o->threads = std::max(1, std::atoi(value.c_str()));
    } else if (key == "--reps") {
      o->reps = std::max(1, std::atoi(value.c_str()));
    } else if (key == "--mb") {
      o->mb = std::max(1, std::atoi(value.c_str()));
    } else if (key == "--clock") {
      o->cpu_clock = value == "cpu";
    } else if (key == "--decode_tokens") {
      o->decode_tokens = std::clamp(std::atoi(value.c_str()), 1, 64);
    } else if (key == "--shape") {
      if (std::sscanf(value.c_str(), "%ldx%ld", &o->shape_rows, &o->shape_cols) != 2 ||
          o->shape_rows < 1 || o->shape_cols < 256 || o->shape_cols % 256 != 0) {
        std::fprintf(stderr, "--shape wants ROWSxCOLS with COLS a multiple of 256\n");
        return false;
      }
    } else if (key == "--warm") {
      o->warm = value != "0";
    } else if (key == "--gemm_tokens") {
      o->gemm_tokens = std::max(0, std::atoi(value.c_str()));
    } else if (key == "--types") {
      o->types.clear();
      for (const auto& t : Split(value)) {
        const auto parsed = ParseGgmlType(t);
        if (!parsed) {
          std::fprintf(stderr, "unknown type %s\n", t.c_str());
          return false;
        }
        o->types.push_back(*parsed);
      }
    } else if (key == "--isas") {
      o->isas.clear();
      for (const auto& t : Split(value)) {
        Isa isa = t == "scalar" ? Isa::kScalar : t == "avx2" ? Isa::kAvx2 : Isa::kAvx512;
        if (static_cast<int>(isa) > static_cast<int>(best)) {
          std::fprintf(stderr, "isa %s not available (best: %s)\n", t.c_str(),
                       IsaName(best).c_str());
          return false;
        }
        o->isas.push_back(isa);
      }
    } else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return false;
    }
  }
  if (o->cpu_clock && o->threads != 1) {
    std::fprintf(stderr, "--clock=cpu needs --threads=1\n");
    return false;
  }
  return true;
}

bool g_cpu_clock = false;

double Now() {
  if (!g_cpu_clock) return NowSeconds();
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Random weights with sane scales, written directly as blocks (quantizing hundreds of MB of
// floats with the reference quantizers would take minutes; the kernels' speed does not depend
// on the values as long as they are finite).
struct Rng {
  uint64_t s = 0x9E3779B97F4A7C15ull;
  uint64_t Next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  float Uniform() { return static_cast<float>(Next() >> 40) / 16777216.0f * 2.0f - 1.0f; }
};

void FillWeights(GgmlType type, uint8_t* p, size_t bytes, Rng& rng) {
  for (size_t i = 0; i + 8 <= bytes; i += 8) {
    const uint64_t v = rng.Next();
    std::memcpy(p + i, &v, 8);
  }
  const uint16_t scale = Fp32ToFp16(0.01f);
  switch (type) {
    case GgmlType::kF32:
      for (size_t i = 0; i < bytes / 4; ++i) reinterpret_cast<float*>(p)[i] = rng.Uniform();
      break;
    case GgmlType::kF16:
      for (size_t i = 0; i < bytes / 2; ++i) {
        reinterpret_cast<uint16_t*>(p)[i] = Fp32ToFp16(rng.Uniform());
      }
      break;
    case GgmlType::kBF16:
      for (size_t i = 0; i < bytes / 2; ++i) {
        reinterpret_cast<uint16_t*>(p)[i] = Fp32ToBf16(rng.Uniform());
      }
      break;
    case GgmlType::kQ4_0:
      for (size_t i = 0; i < bytes / sizeof(BlockQ4_0); ++i) {
        reinterpret_cast<BlockQ4_0*>(p)[i].d = scale;
      }
      break;
    case GgmlType::kQ8_0:
      for (size_t i = 0; i < bytes / sizeof(BlockQ8_0); ++i) {
        reinterpret_cast<BlockQ8_0*>(p)[i].d = scale;
      }
      break;
    case GgmlType::kQ4_K:
      for (size_t i = 0; i < bytes / sizeof(BlockQ4_K); ++i) {
        reinterpret_cast<BlockQ4_K*>(p)[i].d = scale;
        reinterpret_cast<BlockQ4_K*>(p)[i].dmin = scale;
      }
      break;
    case GgmlType::kQ6_K:
      for (size_t i = 0; i < bytes / sizeof(BlockQ6_K); ++i) {
        reinterpret_cast<BlockQ6_K*>(p)[i].d = scale;
      }
      break;
    case GgmlType::kMXFP4:  // scale 2^-7: no infinities or subnormals from random bytes
      for (size_t i = 0; i < bytes / sizeof(BlockMxfp4); ++i) {
        reinterpret_cast<BlockMxfp4*>(p)[i].e = 120;
      }
      break;
    default:
      break;
  }
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Result {
  std::string type, isa;
  double weights_mb = 0, pack_s = 0;
  double decode_best = 0, decode_median = 0;  // GB/s of weights
  double bw_best = 0, bw_median = 0;          // GB/s, read probe, same rounds
  double ratio_median = 0;                    // median over rounds of decode / bandwidth
  double gflops = 0;
};

Result RunOne(const Options& o, GgmlType type, Isa isa, ThreadPool* pool,
              ReadBandwidthProbe* probe) {
  SetIsaForTesting(isa);
  Result res;
  res.type = std::string(GgmlTypeName(type));
  res.isa = IsaName(isa);
  // Alternate the FFN shapes until the set exceeds the target size.
  int64_t dims[2][2] = {{8192, 2048}, {2048, 8192}};
  if (o.shape_rows > 0) {
    dims[0][0] = dims[1][0] = o.shape_rows;
    dims[0][1] = dims[1][1] = o.shape_cols;
  }
  const size_t per_matrix = KernelRowBytes(type, dims[0][1]) * dims[0][0];
  const size_t n_mats = std::max<size_t>(o.shape_rows > 0 ? 1 : 2, (o.mb << 20) / per_matrix);
  std::vector<std::unique_ptr<uint8_t[]>> storage;
  std::vector<Matrix> mats;
  Rng rng;
  double pack_s = 0;
  for (size_t i = 0; i < n_mats; ++i) {
    const int64_t rows = dims[i % 2][0], cols = dims[i % 2][1];
    storage.emplace_back(new uint8_t[KernelRowBytes(type, cols) * rows]);
    FillWeights(type, storage.back().get(), KernelRowBytes(type, cols) * rows, rng);
    const double t0 = Now();
    auto m = Matrix::Create(type, storage.back().get(), rows, cols);
    pack_s += Now() - t0;
    if (!m.ok()) {
      std::fprintf(stderr, "%s\n", m.status().ToString().c_str());
      std::exit(1);
    }
    mats.push_back(std::move(m).value());
  }
  size_t total = 0;
  for (const auto& m : mats) total += m.bytes();
  res.weights_mb = total / 1048576.0;
  res.pack_s = pack_s;

  const int64_t max_dim = std::max<int64_t>({8192, dims[0][0], dims[0][1]});
  const int64_t nt = std::max({1, o.gemm_tokens, o.decode_tokens});
  std::vector<float> x(max_dim * nt), y(max_dim * nt);
  for (auto& v : x) v = rng.Uniform();

  auto decode_pass = [&] {
    const double t0 = Now();
    for (const auto& m : mats) MatMul(m, x.data(), o.decode_tokens, y.data(), pool);
    return total / (Now() - t0) / 1e9;
  };
  decode_pass();  // warm-up: page faults of the outputs, thread wake-up
  std::vector<double> dec, bw, ratio;
  for (int r = 0; r < o.reps; ++r) {
    const double t0 = Now();
    probe->Read(pool);
    const double b = probe->bytes() / (Now() - t0) / 1e9;
    if (o.warm) decode_pass();
    const double d = decode_pass();
    dec.push_back(d);
    bw.push_back(b);
    ratio.push_back(d / b);
  }
  res.decode_best = *std::max_element(dec.begin(), dec.end());
  res.decode_median = Median(dec);
  res.bw_best = *std::max_element(bw.begin(), bw.end());
  res.bw_median = Median(bw);
  res.ratio_median = Median(ratio);

  if (o.gemm_tokens > 0 && isa != Isa::kScalar) {
    // Two matrices (one of each shape) are enough: the prefill tile is compute-bound.
    double best = 0;
    for (int r = 0; r < std::max(2, o.reps / 3); ++r) {
      const double t0 = Now();
      double flops = 0;
      for (size_t i = 0; i < 2; ++i) {
        MatMul(mats[i], x.data(), nt, y.data(), pool);
        flops += 2.0 * mats[i].rows() * mats[i].cols() * nt;
      }
      best = std::max(best, flops / (Now() - t0) / 1e9);
    }
    res.gflops = best;
  }
  return res;
}

}  // namespace
}  // namespace uf::kernels

int main(int argc, char** argv) {
  using namespace uf::kernels;
  Options o;
  if (!ParseOptions(argc, argv, &o)) return 2;
  g_cpu_clock = o.cpu_clock;
  uf::ThreadPool pool(o.threads);
  ReadBandwidthProbe probe(256u << 20);
  std::printf("threads=%d reps=%d set=%zuMB gemm_tokens=%d best_isa=%s\n", o.threads, o.reps, o.mb,
              o.gemm_tokens, IsaName(ActiveIsa()).c_str());
  std::printf("%-6s %-7s %8s %7s %10s %10s %10s %10s %8s %9s\n", "type", "isa", "MB", "pack_s",
              "dec_best", "dec_med", "bw_best", "bw_med", "ratio", "GFLOP/s");
  std::vector<Result> results;
  for (auto type : o.types) {
    for (auto isa : o.isas) {
      const Result r = RunOne(o, type, isa, &pool, &probe);
      std::printf("%-6s %-7s %8.0f %7.3f %10.1f %10.1f %10.1f %10.1f %8.3f %9.1f\n", r.type.c_str(),
                  r.isa.c_str(), r.weights_mb, r.pack_s, r.decode_best, r.decode_median, r.bw_best,
                  r.bw_median, r.ratio_median, r.gflops);
      std::fflush(stdout);
      results.push_back(r);
    }
  }
  std::string json =
      "{\"bench\":\"kernels\",\"threads\":" + std::to_string(o.threads) + ",\"results\":[";
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    char buf[512];
    std::snprintf(buf, sizeof(buf),
                  "%s{\"type\":\"%s\",\"isa\":\"%s\",\"weights_mb\":%.1f,\"pack_s\":%.4f,"
                  "\"decode_gbs_best\":%.2f,\"decode_gbs_median\":%.2f,\"read_bw_gbs_best\":%.2f,"
                  "\"read_bw_gbs_median\":%.2f,\"decode_over_bw_median\":%.4f,"
                  "\"gemm_gflops\":%.1f}",
                  i ? "," : "", r.type.c_str(), r.isa.c_str(), r.weights_mb, r.pack_s,
                  r.decode_best, r.decode_median, r.bw_best, r.bw_median, r.ratio_median, r.gflops);
    json += buf;
  }
  json += "]}";
  std::printf("%s\n", json.c_str());
  return 0;
}
