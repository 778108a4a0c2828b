#!/usr/bin/env bash
# The GPU check of the Vulkan backend (docs/gpu.md), in two halves:
#   tools/gpu_check.sh prepare       here (Debian 12): build, collect the runtime .debs, fill .gpu/
#   tools/gpu_check.sh dry-run       here: the same run with build/ultrafast on a local device
#                                    (lavapipe), the tiny models standing in for the presets
#   bash .gpu/gpu_check.sh run [all] on the GPU machine (device tool, carry [".gpu"]): make the
#                                    synthetic models with `synth`, run `bench --device vulkan` on
#                                    each and 1B F16 batched decode at 1, 2, 4, 8, 16, 32 and 64 streams,
#                                    print one table; the 1B F16, Q8_0 and Q4_0 decode runs
#                                    with the basic and the wide GEMV (UF_GPU_GEMV, the `gemv`
#                                    column; Q8_0 and Q4_0 also with `tune`, the default, which
#                                    times both), and the GEMV kernel tests (bit-identity of
#                                    rows across batch sizes, both variants) run first when
#                                    prepare carried them, and the fused kernels' (gpu_fused_test, gpu_stage_test:
#                                    each fusion the unfused kernels' bits). 1B Q4_0 also runs
#                                    unfused (UF_GPU_FUSE=0; the `gemv` column says `unfused`),
#                                    1B Q8_0 and Q4_0 without the packed int8 dot (UF_GPU_DOT4=0,
#                                    `nodot4`; `devices` prints whether the device has it) and
#                                    with a blocking fence wait (UF_GPU_SPIN_US=0, `nospin`),
#                                    and 1B F16, Q4_0, Q4_K_M with the GEMMs' norm tail on and
#                                    off (UF_GPU_NORM_TAIL=on / off, `normtail` / `notail`; the
#                                    default times both and keeps the faster, `basic`):
#                                    the table's dispatches and barriers per step and tok/s
#                                    measure what the fusions save; then the GPU time per kernel
#                                    of a 1B F16, Q4_0 and Q4_K_M decode step (bench --profile;
#                                    Q4_K_M also runs with and without the packed dot), one 1B
#                                    Q4_0 stream served on the device (bench --serve) and the
#                                    host's own cost a token (bench --serve --host-only). The batched run repeats at
#                                    16 and 64 streams with token tiles of 8 (UF_GPU_TILE=8,
#                                    gemv `tile8`): what the wider GEMM tiles save, and with the
#                                    tiled GEMM (UF_GPU_MATMUL=tiled / coopmat, gemv `tiled` /
#                                    `coopmat`; off by default until this run measures it, its
#                                    kernel test gpu_matmul_test first), and a 4,096-token
#                                    prefill with attention tiled and per token (UF_GPU_ATTENTION;
#                                    gpu_attention_test first: the same bits). Default: the 1B shapes (a few minutes);
#                                    `all` adds 8B F16 and Q4_0 (16 + 4.5 GB to write); `moe`
#                                    (or `all`) adds cut-down mixtures of experts: Qwen3-30B-A3B
#                                    Q4_K_M at 12 of its 48 layers and gpt-oss-20b MXFP4 at 8 of
#                                    24 (~4 + ~4 GB): decode, and a 512-token prefill with
#                                    the experts' grouped tiles up to 32 slots and capped at 8
#                                    (UF_GPU_GROUP_TILE); Qwen3 decode also without the MoE
#                                    tails (UF_GPU_MOE_TAILS=0, `nomoe`: the route and the
#                                    weighted sum apart, two barriers a layer) and without the
#                                    norm tails (`notail`).
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
    # The GEMV kernel tests travel too (1.5 MB, the same libraries as ultrafast): run first on
    # the GPU, they check the GEMMs' bit-identity under the driver's own compiler.
    tests="gpu_kernels_test gpu_integer_gemm_test gpu_fused_test gpu_stage_test gpu_topk_test gpu_moe_kernels_test gpu_matmul_test gpu_attention_test"
    # shellcheck disable=SC2086
    cmake --build build --target $tests || echo "no GPU kernel tests ($tests; UF_BUILD_TESTS?)"
    mkdir -p .gpu
    [ -d .gpu/debs ] || ../shared/gpu/collect-debs.sh .gpu/debs
    # The Khronos validation layer (4.5 MB), for the validated runs at the end of `run`.
    ls .gpu/debs/vulkan-validationlayers_*.deb >/dev/null 2>&1 ||
      (cd .gpu/debs && apt-get download vulkan-validationlayers 2>&1 | grep -v unsandboxed) ||
      echo "no vulkan-validationlayers .deb: run skips its validated runs"
    cp build/ultrafast ../shared/gpu/on-device.sh tools/gpu_check.sh .gpu/
    for t in $tests; do [ -x "build/$t" ] && cp "build/$t" .gpu/; done
    du -sh .gpu
    echo 'now, with the device tool: carry [".gpu"], command: bash .gpu/gpu_check.sh run'
    ;;
  run | dry-run)
    if [ "$1" = dry-run ]; then
      # Here (lavapipe or any local device): the built binary, the shared tiny models standing
      # in for the synthetic presets, short runs. Checks the script, not the speed.
      cd "$(dirname "$0")/.."
      [ -x build/ultrafast ] || { echo "build the ultrafast target first"; exit 2; }
      uf() { build/ultrafast "$@"; }
      dir=$(mktemp -d)
      trap 'rm -rf "$dir"' EXIT
      for t in f16 q8_0 q4_0 q4_k_m; do
        ln -s "$PWD/../shared/models/tiny-llama-256-$t.gguf" "$dir/llama-3.2-1b-$t.gguf"
      done
      # The tiny MoE presets (a few MiB) standing in for the cut-down MoE shapes.
      uf synth --preset tiny-qwen3moe --type q4_k_m -o "$dir/qwen3-30b-a3b-q4_k_m-12.gguf" >/dev/null
      uf synth --preset tiny-gpt-oss --type mxfp4 -o "$dir/gpt-oss-20b-mxfp4-8.gguf" >/dev/null
      n_gen=8 n_prompt=32 depth=${UF_GPU_DEPTH:-512} streams=1,4 streams8=4 long_prompt=160
    else
      [ -x .gpu/ultrafast ] || { echo "run from the repository root with .gpu/ carried"; exit 2; }
      uf() { bash .gpu/on-device.sh .gpu/ultrafast "$@"; }
      dir=${UF_GPU_MODELS:-/tmp/uf_gpu_models}
      mkdir -p "$dir"
      n_gen=64 n_prompt=512 depth=${UF_GPU_DEPTH:-4096} streams=1,2,4,8,16,32,64 streams8=16,64
      long_prompt=4096
      # The device tool returns only the output's last 12,000 characters, and files under $OUT:
      # the whole run goes there too.
      if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
        exec > >(tee "$OUT/gpu_check.log") 2>&1
      fi
    fi
    uf devices
    # The GEMV kernels against the CPU and across batch sizes, both variants (a few seconds).
    if [ "$1" = run ] && [ -x .gpu/gpu_kernels_test ]; then
      bash .gpu/on-device.sh .gpu/gpu_kernels_test --gtest_filter='*Gemm*:*Gemv*' 2>&1 |
        grep -E '^\[ *(OK|FAILED|PASSED|SKIPPED) *\]|Failure|gpu\]' || true
    fi
    # Tiled attention against the per-token kernel, bit for bit, under the driver's compiler.
    if [ "$1" = run ] && [ -x .gpu/gpu_attention_test ]; then
      bash .gpu/on-device.sh .gpu/gpu_attention_test 2>&1 |
        grep -E '^\[ *(OK|FAILED|PASSED|SKIPPED) *\]|Failure|Expected|Which is' || true
    fi
    # The fused kernels against the unfused ones, and the sampling and MoE reductions (arg-max,
    # top-64, router, grouping) against the host's, under the driver's own compiler.
    for t in gpu_integer_gemm_test gpu_fused_test gpu_stage_test gpu_topk_test gpu_moe_kernels_test; do
      if [ "$1" = run ] && [ -x ".gpu/$t" ]; then
        bash .gpu/on-device.sh ".gpu/$t" --gtest_filter='GpuKernelsTest.*' 2>&1 |
          grep -E '^\[ *(OK|FAILED|PASSED|SKIPPED) *\]|Failure' || true
      fi
    done
    # Fields: preset, weight type, depth, GEMV variant (UF_GPU_GEMV: basic, wide, or tune, the
    # default, which times Q8_0's and Q4_0's basic and wide one-token GEMVs; `unfused`: basic with
    # UF_GPU_FUSE=0; `nodot4`: basic with UF_GPU_DOT4=0, the integer GEMMs by byte extracts
    # instead of the packed int8 dot; `nospin`: basic with UF_GPU_SPIN_US=0, a blocking fence
    # wait instead of polling; `normtail` / `notail`: basic with UF_GPU_NORM_TAIL=on / off, the
    # norms after the o and down products in those GEMMs' last workgroup or apart (`basic` times
    # both and keeps the faster, UF_GPU_NORM_TAIL=tune); `tileattn`: basic with
    # UF_GPU_ATTENTION=tiled, decode steps through attention_tiled.comp's one-token tiles, a KV
    # head's query heads sharing its rows; `nomoe`: basic with UF_GPU_MOE_TAILS=0, a MoE
    # layer's route and weighted sum apart from its router and down GEMMs), layers (cut-down
    # MoE).
    runs=("llama-3.2-1b f16 0 basic" "llama-3.2-1b f16 0 wide" "llama-3.2-1b q8_0 0 basic"
          "llama-3.2-1b q8_0 0 wide" "llama-3.2-1b q8_0 0 tune" "llama-3.2-1b q8_0 0 nodot4"
          "llama-3.2-1b q4_0 0 basic" "llama-3.2-1b q4_0 0 tune"
          "llama-3.2-1b q4_0 0 unfused" "llama-3.2-1b q4_0 0 nodot4" "llama-3.2-1b q4_0 0 nospin"
          "llama-3.2-1b q4_0 0 wide" "llama-3.2-1b q4_k_m 0 basic" "llama-3.2-1b q4_k_m 0 nodot4"
          "llama-3.2-1b f16 $depth basic" "llama-3.2-1b f16 $depth tileattn"
          "llama-3.2-1b f16 0 normtail" "llama-3.2-1b f16 0 notail"
          "llama-3.2-1b q4_0 0 normtail" "llama-3.2-1b q4_0 0 notail"
          "llama-3.2-1b q4_k_m 0 normtail" "llama-3.2-1b q4_k_m 0 notail")
    [ "${2:-}" = all ] && runs+=("llama-3.1-8b f16 0 basic" "llama-3.1-8b f16 0 wide"
                                 "llama-3.1-8b q4_0 0 basic" "llama-3.1-8b q4_0 0 wide")
    # Mixtures of experts, cut down to a few layers (the 5th field) to fit the session.
    [ "${2:-}" = all ] || [ "${2:-}" = moe ] &&
      runs+=("qwen3-30b-a3b q4_k_m 0 basic 12" "qwen3-30b-a3b q4_k_m 0 nomoe 12"
             "qwen3-30b-a3b q4_k_m 0 notail 12" "gpt-oss-20b mxfp4 0 basic 8")
    results=() prefill=()
    for r in "${runs[@]}"; do
      read -r preset type d gemv layers <<<"$r"
      name=$preset${layers:+-${layers}L}
      model="$dir/$preset-$type${layers:+-$layers}.gguf"
      [ -f "$model" ] || uf synth --preset "$preset" --type "$type" ${layers:+--layers "$layers"} \
        -o "$model" >/dev/null
      fuse=1 g=$gemv dot4=1 spin= tail=tune attn=tune moe=1
      [ "$gemv" = unfused ] && fuse=0 g=basic
      [ "$gemv" = nomoe ] && moe=0 g=basic
      [ "$gemv" = normtail ] && tail=on g=basic
      [ "$gemv" = notail ] && tail=off g=basic
      [ "$gemv" = nodot4 ] && dot4=0 g=basic
      [ "$gemv" = nospin ] && spin=0 g=basic
      [ "$gemv" = tileattn ] && attn=tiled g=basic
      line=$(UF_GPU_FUSE=$fuse UF_GPU_GEMV=$g UF_GPU_DOT4=$dot4 UF_GPU_SPIN_US=$spin \
             UF_GPU_NORM_TAIL=$tail UF_GPU_ATTENTION=$attn UF_GPU_MOE_TAILS=$moe uf bench --device vulkan -m "$model" -p 0 -n "$n_gen" --reps 1 \
             --depth "$d" --json | tail -n 1)
      echo "$line"
      results+=("$name $type $d $gemv $line")
    done
    # Batched decode (the serving engine's steps): 1B F16, N streams after n_prompt-token
    # prompts, aggregate tok/s; the prompts also give the batched prefill figure.
    model="$dir/llama-3.2-1b-f16.gguf"
    line=$(uf bench --device vulkan -m "$model" -p "$n_prompt" -n 32 --reps 1 --batch "$streams" \
             --json | tail -n 1)
    echo "$line"
    results+=("llama-3.2-1b f16 0 basic $line")
    # Again with the GEMMs' token tiles of 8 only (UF_GPU_TILE=8, the `gemv` column says
    # `tile8`): what the tiles of 16 and 32 save, where they differ (16 and 64 streams, and the
    # prefill's 512-token batches).
    line=$(UF_GPU_TILE=8 uf bench --device vulkan -m "$model" -p "$n_prompt" -n 32 --reps 1 \
             --batch "$streams8" --json | tail -n 1)
    echo "$line"
    results+=("llama-3.2-1b f16 0 tile8 $line")
    # The tiled GEMM's products against a double-precision reference: its plain kernel and, where
    # `devices` says coopmat yes, the matrix units' (the worst error as a fraction of the bound).
    # Here, after the decode runs: the coopmat kernels have never run on any device before.
    if [ "$1" = run ] && [ -x .gpu/gpu_matmul_test ]; then
      # ~200 lines of per-case errors: only the verdicts, the skip reason, and each kernel's
      # worst error as a fraction of its bound.
      bash .gpu/on-device.sh .gpu/gpu_matmul_test 2>&1 |
        awk '/^\[ *(OK|FAILED|PASSED|SKIPPED) *\]|Failure|matrix units/ { print }
             /gemm\]/ { k = $1 " " $3; w = $(NF - 3) + 0; if (w > worst[k]) worst[k] = w }
             END { for (k in worst) printf "%s: worst error %.3f of the bound\n", k, worst[k] }' ||
        true
    fi
    # With the tiled GEMM (gemm_tiled.glsl: 32 x 64 blocks through shared memory) for batches of
    # 16 tokens or more: its plain kernels, and the matrix units (coopmat; where the device lacks
    # them bench says `tiled GEMM tiled` and the row repeats the plain one). Then 1B Q4_0 (its
    # Q4_0 layers and Q6_K lm_head) without and with the matrix units. Never run on a GPU before:
    # a run that fails is reported and left out of the table, which still prints.
    tiled_run() {  # name type matmul model
      local line
      line=$(UF_GPU_MATMUL=$3 uf bench --device vulkan -m "$4" -p "$n_prompt" -n 32 --reps 1 \
               --batch "$streams8" --json | tail -n 1) || line=
      case "$line" in
        "{"*) echo "$line"; results+=("$1 $2 0 $3 $line") ;;
        *) echo "UF_GPU_MATMUL=$3 $1 $2: bench failed" ;;
      esac
    }
    tiled_run llama-3.2-1b f16 tiled "$model"
    tiled_run llama-3.2-1b f16 coopmat "$model"
    tiled_run llama-3.2-1b q4_0 off "$dir/llama-3.2-1b-q4_0.gguf"
    tiled_run llama-3.2-1b q4_0 coopmat "$dir/llama-3.2-1b-q4_0.gguf"
    # Batched decode with every step's attention tiled (one-token tiles; gemv `tileattn`).
    line=$(UF_GPU_ATTENTION=tiled uf bench --device vulkan -m "$model" -p "$n_prompt" -n 32 \
             --reps 1 --batch "$streams8" --json | tail -n 1) || line=
    case "$line" in
      "{"*) echo "$line"; results+=("llama-3.2-1b f16 0 tileattn $line") ;;
      *) echo "UF_GPU_ATTENTION=tiled batched: bench failed" ;;
    esac
    # A long prompt's prefill (1B F16, 4,096 tokens in batches of 512) with attention tiled over
    # the prompt's tokens (attention_tiled.comp, the default for prefill batches) and one
    # workgroup per (head, token) (attention.comp): the same bits, so this is speed only.
    for attn in tiled token; do
      line=$(UF_GPU_ATTENTION=$attn uf bench --device vulkan -m "$model" -p "$long_prompt" -n 1 \
               --reps 1 --json | tail -n 1) || line=
      case "$line" in
        "{"*) prefill+=("$attn $(python3 -c 'import json, sys
print(round(json.loads(sys.argv[1])["pp_tok_s"]))' "$line")") ;;
        *) prefill+=("$attn failed") ;;
      esac
    done
    # The cut-down MoE shapes' prefill ($n_prompt tokens in one batch) with the grouped expert
    # GEMMs' tiles chosen by GroupTile (up to 32 slots of one expert a tile) and capped at 8
    # (UF_GPU_GROUP_TILE=8): what the wider tiles' fewer expert reads save.
    moe_prefill=()
    if [ "${2:-}" = all ] || [ "${2:-}" = moe ] || [ "$1" = dry-run ]; then
      for m in qwen3-30b-a3b-q4_k_m-12 gpt-oss-20b-mxfp4-8; do
        for gt in 32 8; do
          line=$(UF_GPU_GROUP_TILE=$gt uf bench --device vulkan -m "$dir/$m.gguf" -p "$n_prompt" \
                   -n 0 --reps 1 --json | tail -n 1) || line=
          case "$line" in
            "{"*) moe_prefill+=("$m $gt $(python3 -c 'import json, sys
print(round(json.loads(sys.argv[1])["pp_tok_s"]))' "$line")") ;;
            *) moe_prefill+=("$m $gt failed") ;;
          esac
        done
      done
    fi
    echo
    # One table: decode per model (streams 1), then the batched runs (aggregate over streams).
    python3 - "${results[@]}" <<'PY'
import json, sys
# tok/s: logits rows back to the host (what a sampling server step costs); argmax: greedy with
# the arg-max on the device, one token back; chain: greedy with each token fed to the next step
# on the device, the next step queued while one runs (`run --temp 0`); sampled: chained too, each
# token drawn on the device from the row's best 64 (T 0.8, top-k 40) and checked by the host's
# sampler (`run --temp 0.8`; in a batched row, every stream's row so, the serving engine's
# chained decode batch); penal: sampled with presence and frequency penalties applied on the
# device; GPU tok/s: the step's GPU time alone.
print(f"{'model':<18} {'type':<6} {'depth':>6} {'gemv':<7} {'streams':>7} {'tok/s':>10} "
      f"{'argmax':>10} {'chain':>10} {'sampled':>10} {'penal':>10} {'GPU tok/s':>10} {'read GB/s':>10} {'roofline':>9} "
      f"{'disp/step':>9} {'barr/step':>9}")
first = json.loads(sys.argv[1].split(" ", 4)[4])
print(f"device: {first.get('device', '?')} (../shared/gpu/README.md's llama.cpp figures are an "
      f"H200's)")
for arg in sys.argv[1:]:
    p, t, d, g, j = arg.split(" ", 4)
    j = json.loads(j)
    bw = j["read_bw_gb_s"]
    if "batch" not in j:
        print(f"{p:<18} {t:<6} {d:>6} {g:<7} {1:>7} {j['tg_tok_s']:>10.1f} "
              f"{j.get('tg_argmax_tok_s', 0):>10.1f} {j.get('tg_chain_tok_s', 0):>10.1f} "
              f"{j.get('tg_sampled_tok_s', 0):>10.1f} {j.get('tg_penalized_tok_s', 0):>10.1f} "
              f"{j['tg_gpu_tok_s']:>10.1f} {bw:>10.0f} {100 * j['roofline']:>8.1f}% "
              f"{j.get('step_dispatches', 0):>9} {j.get('step_barriers', 0):>9}")
        continue
    for b in j["batch"]:
        print(f"{p:<18} {t:<6} {d:>6} {g:<7} {b['streams']:>7} {b['tok_s']:>10.1f} "
              f"{'':>10} {'':>10} {b.get('sampled_tok_s', 0):>10.1f} {'':>10} {b['gpu_tok_s']:>10.1f} "
              f"{bw:>10.0f} {100 * b['roofline']:>8.1f}%")
    print(f"prefill (the batched runs' prompts, batches of up to 512): {j['pp_tok_s']:.0f} tok/s")

# Issue 28's targets (an H200's; llama.cpp CUDA on the same shapes, ../shared/gpu/README.md):
# each the best run of any variant, decode by the fastest of logits back, the device arg-max and
# the chained steps (the roofline column is the logits-back figure's).
single, batched = {}, {}
for arg in sys.argv[1:]:
    p, t, d, g, j = arg.split(" ", 4)
    j = json.loads(j)
    if "batch" in j:
        if p == "llama-3.2-1b" and t == "f16":
            rows = {b["streams"]: max(b["tok_s"], b.get("sampled_tok_s", 0)) for b in j["batch"]}
            if 64 in rows and rows[64] > batched.get("agg", (0, ""))[0]:
                batched["agg"] = (rows[64], g)
            if 64 in rows and 1 in rows:
                ratio = rows[64] / 64 / rows[1]
                if ratio > batched.get("ratio", (0, ""))[0]:
                    batched["ratio"] = (ratio, g)
        continue
    key = (p, t, "depth" if d != "0" else "0")
    v = max(j["tg_tok_s"], j.get("tg_argmax_tok_s", 0), j.get("tg_chain_tok_s", 0))
    if v > single.get(key, (0, ""))[0]:
        single[key] = (v, g)
targets = [(("llama-3.2-1b", "f16", "0"), 1300, 794), (("llama-3.2-1b", "q4_0", "0"), 1600, 959),
           (("llama-3.1-8b", "f16", "0"), 260, 208), (("llama-3.1-8b", "q4_0", "0"), 520, 331),
           (("llama-3.2-1b", "f16", "depth"), 1100, 711)]
print()
print(f"{'target':<40} {'wanted':>8} {'llama.cpp':>10} {'here':>10} {'best run':<9} verdict")
for key, want, ref in targets:
    if key not in single:
        continue
    v, g = single[key]
    name = f"{key[0]} {key[1]} batch 1" + (" at depth" if key[2] == "depth" else "")
    print(f"{name:<40} {want:>8} {ref:>10} {v:>10.0f} {g:<9} {'met' if v >= want else 'not met'}")
if "agg" in batched:
    v, g = batched["agg"]
    print(f"{'llama-3.2-1b f16, 64 streams aggregate':<40} {20000:>8} {12930:>10} {v:>10.0f} "
          f"{g:<9} {'met' if v >= 20000 else 'not met'}")
if "ratio" in batched:
    # A stream among 64 decodes at the 64-stream step's pace: the ultrafast stream riding in that
    # batch (65 rows) would run at about this fraction of its solo speed.
    v, g = batched["ratio"]
    print(f"{'1B f16: a stream of 64 / a stream alone':<40} {0.9:>8} {'':>10} {v:>10.2f} "
          f"{g:<9} {'met' if v >= 0.9 else 'not met'}")
# What the tuned choices (UF_GPU_ATTENTION, UF_GPU_NORM_TAIL, UF_GPU_GEMV=tune) measured and
# chose in the 1B runs.
for arg in sys.argv[1:]:
    p, t, d, g, j = arg.split(" ", 4)
    j = json.loads(j)
    if p == "llama-3.2-1b" and g in ("basic", "tune") and j.get("step_tuning"):
        print(f"tuned choices, {p} {t} depth {d}{' batched' if 'batch' in j else ''}:")
        for line in j["step_tuning"]:
            print(f"  {line}")
PY
    for p in "${prefill[@]}"; do
      read -r attn tok_s <<<"$p"
      echo "prefill of $long_prompt tokens (1B F16), attention $attn: $tok_s tok/s"
    done
    for p in "${moe_prefill[@]}"; do
      read -r m gt tok_s <<<"$p"
      echo "prefill of $n_prompt tokens ($m), grouped expert tiles up to $gt slots: $tok_s tok/s"
    done
    # Where a decode step's GPU time goes, per kernel (bench --profile: a timestamp after every
    # dispatch), for the 1B F16, Q4_0 and Q4_K_M shapes.
    for t in f16 q4_0 q4_k_m; do
      echo
      echo "== llama-3.2-1b $t: GPU time per kernel of a one-token decode step"
      uf bench --device vulkan -m "$dir/llama-3.2-1b-$t.gguf" -p 0 -n 16 --reps 1 --profile |
        sed -n '/^profile:/,$p'
    done
    # Short runs under the Khronos validation layer (UF_GPU_VALIDATE=log: every Vulkan call
    # checked, and synchronization validation: a dispatch reading what another wrote without a
    # barrier between them). CI runs every GPU test under it on lavapipe; this is the same check
    # on the GPU's driver, its limits and its extensions (the coopmat kernels, the packed dot).
    # New buffers start as NaNs under it (UF_GPU_POISON follows UF_GPU_VALIDATE): a read of
    # memory nothing wrote shows as NaN logits or an error.
    echo
    echo "== the Khronos validation layer: errors in short runs (1B Q4_0 and F16)"
    layers=/opt/ufdeps/usr/share/vulkan/explicit_layer.d
    [ "$1" = dry-run ] && layers=/usr/share/vulkan/explicit_layer.d
    if [ -f "$layers/VkLayer_khronos_validation.json" ]; then
      vlog=$(mktemp)
      # Fields: weight type, UF_GPU_MATMUL (- for the default), bench's arguments.
      for v in "q4_0 - -p $n_prompt -n 8" "q4_0 - -p $n_prompt -n 8 --batch 1,4" \
               "f16 - -p $n_prompt -n 8 --batch 1,4" "f16 coopmat -p $n_prompt -n 8 --batch 4"; do
        read -r t mm args <<<"$v"
        [ "$mm" = - ] && mm=
        # shellcheck disable=SC2086
        VK_LAYER_PATH=$layers UF_GPU_VALIDATE=log UF_GPU_MATMUL=$mm \
          uf bench --device vulkan -m "$dir/llama-3.2-1b-$t.gguf" $args --reps 1 >"$vlog" 2>&1 ||
          echo "bench $t $args under validation failed"
        echo "$t${mm:+ UF_GPU_MATMUL=$mm} $args: $(grep -c 'validation error' "$vlog") errors"
        grep 'validation error' "$vlog" | cut -c1-400 | sort | uniq -c | sort -rn | head -n 3 || true
      done
      rm -f "$vlog"
    else
      echo "no validation layer at $layers (prepare carries vulkan-validationlayers)"
    fi
    # Greedy text with every new buffer filled with NaNs against without: a kernel reading memory
    # that nothing wrote changes the tokens (the same kernels and data otherwise: the same bits).
    echo
    echo "== greedy text with new buffers poisoned (UF_GPU_POISON=on) against without"
    for t in q4_0 f16; do
      a=$(UF_GPU_POISON=off uf run --device vulkan -m "$dir/llama-3.2-1b-$t.gguf" -p "The" -n 24 \
            --temp 0 --ignore-eos 2>/dev/null) || echo "run $t failed"
      b=$(UF_GPU_POISON=on uf run --device vulkan -m "$dir/llama-3.2-1b-$t.gguf" -p "The" -n 24 \
            --temp 0 --ignore-eos 2>/dev/null) || echo "run $t poisoned failed"
      if [ -n "$a" ] && [ "$a" = "$b" ]; then echo "$t: the same text"; else echo "$t: DIFFERENT"; fi
    done
    # One stream through the serving engine and HTTP on the device against the engine alone
    # (1B Q4_0: the ultrafast lane's pace), and the host's own cost a token on this machine's
    # CPU with a Llama-3 vocabulary (--host-only: no model computed).
    echo
    echo "== llama-3.2-1b q4_0: one stream served on the device (bench --serve)"
    uf bench --serve --device vulkan -m "$dir/llama-3.2-1b-q4_0.gguf" -n 128 --reps 3 |
      tail -n 13 || echo "bench --serve failed"
    echo
    echo "== the host's own cost a token, no model computed (bench --serve --host-only)"
    uf bench --serve --host-only -m "$dir/llama-3.2-1b-q4_0.gguf" -n 256 --reps 5 |
      tail -n 9 || echo "bench --serve --host-only failed"
    ;;
  *)
    sed -n 2,17p "$0"
    exit 2
    ;;
esac
