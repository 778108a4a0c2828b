#!/usr/bin/env bash
# The GPU check of the Vulkan backend (docs/gpu.md), in two halves:
#   tools/gpu_check.sh prepare       here (Debian 12): build, collect the runtime .debs, fill .gpu/
#   bash .gpu/gpu_check.sh run [all] on the GPU machine (device tool, carry [".gpu"]): make the
#                                    synthetic models with `synth`, run `bench --device vulkan` on
#                                    each, print one table, then 1B F16 batched decode at 1, 4,
#                                    16 and 64 streams. Default: the 1B shapes (a few minutes);
#                                    `all` adds 8B F16 and Q4_0 (16 + 4.5 GB to write).
# UF_GPU_MODELS=DIR keeps the models elsewhere (default /tmp/uf_gpu_models); UF_GPU_DEPTH=N
# changes the depth of the depth run (default 4096).
# The figures are wall clock per step (submit + wait included), the GPU time alone (timestamps),
# and the device's read bandwidth measured in the same run; compare with ../shared/gpu/README.md (llama.cpp CUDA on an H200).
set -euo pipefail

case "${1:-}" in
  prepare)
    cd "$(dirname "$0")/.."
    exclude=$(git rev-parse --git-path info/exclude)
    mkdir -p "$(dirname "$exclude")"
    grep -qx '/.gpu/' "$exclude" 2>/dev/null || echo /.gpu/ >> "$exclude"
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build build --target ultrafast
    mkdir -p .gpu
    [ -d .gpu/debs ] || ../shared/gpu/collect-debs.sh .gpu/debs
    cp build/ultrafast ../shared/gpu/on-device.sh tools/gpu_check.sh .gpu/
    du -sh .gpu
    echo 'now, with the device tool: carry [".gpu"], command: bash .gpu/gpu_check.sh run'
    ;;
  run)
    [ -x .gpu/ultrafast ] || { echo "run from the repository root with .gpu/ carried"; exit 2; }
    uf() { bash .gpu/on-device.sh .gpu/ultrafast "$@"; }
    uf devices
    dir=${UF_GPU_MODELS:-/tmp/uf_gpu_models}
    mkdir -p "$dir"
    runs=("llama-3.2-1b f16 0" "llama-3.2-1b q8_0 0" "llama-3.2-1b q4_0 0"
          "llama-3.2-1b f16 ${UF_GPU_DEPTH:-4096}")
    [ "${2:-}" = all ] && runs+=("llama-3.1-8b f16 0" "llama-3.1-8b q4_0 0")
    results=()
    for r in "${runs[@]}"; do
      read -r preset type depth <<<"$r"
      model="$dir/$preset-$type.gguf"
      [ -f "$model" ] || uf synth --preset "$preset" --type "$type" -o "$model" >/dev/null
      line=$(uf bench --device vulkan -m "$model" -p 0 -n 64 --reps 1 --depth "$depth" --json |
             tail -n 1)
      echo "$line"
      results+=("$preset $type $depth $line")
    done
    echo
    printf '%-14s %-6s %6s %10s %10s %12s %10s\n' model type depth "tok/s" "GPU tok/s" \
      "read GB/s" roofline
    for r in "${results[@]}"; do
      read -r preset type depth json <<<"$r"
      python3 - "$preset" "$type" "$depth" "$json" <<'PY'
import json, sys
p, t, d, j = sys.argv[1:5]
j = json.loads(j)
print(f"{p:<14} {t:<6} {d:>6} {j['tg_tok_s']:>10.1f} {j['tg_gpu_tok_s']:>10.1f} "
      f"{j['read_bw_gb_s']:>12.0f} {100 * j['roofline']:>9.1f}%")
PY
    done
    # Batched decode (the serving engine's steps): 1B F16, N streams after 512-token prompts,
    # aggregate tok/s; the prompts also give the batched prefill figure.
    model="$dir/llama-3.2-1b-f16.gguf"
    line=$(uf bench --device vulkan -m "$model" -p 512 -n 32 --reps 1 --batch 1,4,16,64 --json |
           tail -n 1)
    echo "$line"
    python3 - "$line" <<'PY'
import json, sys
j = json.loads(sys.argv[1])
print(f"\nllama-3.2-1b f16: prefill pp512 {j['pp_tok_s']:.0f} tok/s (batches of 512)")
print(f"{'streams':>8} {'tok/s':>10} {'GPU tok/s':>10}")
for b in j.get("batch", []):
    print(f"{b['streams']:>8} {b['tok_s']:>10.1f} {b['gpu_tok_s']:>10.1f}")
PY
    ;;
  *)
    sed -n 2,10p "$0"
    exit 2
    ;;
esac
