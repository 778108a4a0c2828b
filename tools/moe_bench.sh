#!/usr/bin/env bash
# Side-by-side decode and prefill of ultrafast and the reference engine (llama.cpp's llama-bench)
# on the same GGUF files, alternating the two engines round by round so that a noisy shared
# machine slows both alike; prints one table of medians.
#
#   tools/moe_bench.sh [-t 2] [-r 3] [-n 32] [-p 512] MODEL.gguf [MODEL.gguf ...]
#
# Environment: UF (default build/ultrafast), LLAMA_BENCH (default
# /tmp/llama.cpp/build/bin/llama-bench; its directory is put on LD_LIBRARY_PATH).
# Columns: decode tok/s of both engines and the median of the rounds' ratios; ultrafast's
# roofline fraction (decode bytes per token x tok/s over the read bandwidth `ultrafast bench`
# measures in the same run, counting only the bytes read: attention, router, selected experts,
# K/V) and its CPU share while decoding (< 1: the machine was contended); prefill tok/s of a
# -p token prompt, both engines, and the median ratio. -p 0 or -n 0 skips that half.
set -euo pipefail

threads=2 rounds=3 n_gen=32 n_prompt=512
while getopts "t:r:n:p:h" opt; do
  case "$opt" in
    t) threads=$OPTARG ;;
    r) rounds=$OPTARG ;;
    n) n_gen=$OPTARG ;;
    p) n_prompt=$OPTARG ;;
    *) sed -n '2,15p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ $# -ge 1 ]] || { sed -n '2,15p' "$0"; exit 2; }

uf=${UF:-build/ultrafast}
lb=${LLAMA_BENCH:-/tmp/llama.cpp/build/bin/llama-bench}
[[ -x $uf ]] || { echo "moe_bench: no ultrafast binary at $uf (set UF)" >&2; exit 1; }
[[ -x $lb ]] || { echo "moe_bench: no llama-bench at $lb (set LLAMA_BENCH)" >&2; exit 1; }
export LD_LIBRARY_PATH="$(dirname "$lb")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One line "uf_tok_s roofline cpu_share" from `ultrafast bench --json`.
uf_run() {  # model n_prompt n_gen
  "$uf" bench -m "$1" -p "$2" -n "$3" -t "$threads" --reps 1 --json 2>/dev/null |
    python3 -c 'import json,sys; j=json.loads(sys.stdin.read().strip().splitlines()[-1])
tg = j["tg_tok_s"]; pp = j["pp_tok_s"]
print(pp if tg == 0 else tg, j.get("roofline_fraction", 0), j.get("tg_cpu_share", 0))'
}
# tok/s of one llama-bench test.
lb_run() {  # model n_prompt n_gen
  "$lb" -m "$1" -p "$2" -n "$3" -t "$threads" -r 1 -o json 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["avg_ts"])'
}

printf '%-32s %9s %9s %6s %9s %6s | %9s %9s %6s\n' model uf_tg lcpp_tg ratio roofline cpu uf_pp$n_prompt \
  lcpp_pp ratio
for model in "$@"; do
  : >"$tmp/tg" && : >"$tmp/pp"
  for ((i = 0; i < rounds; ++i)); do
    if ((n_gen > 0)); then
      read -r u roof cpu < <(uf_run "$model" 0 "$n_gen")
      l=$(lb_run "$model" 0 "$n_gen")
      echo "$u $l $roof $cpu" >>"$tmp/tg"
      printf "  round %d decode: ultrafast %.2f, llama.cpp %.2f tok/s\n" $((i + 1)) "$u" "$l" >&2
    fi
    if ((n_prompt > 0)); then
      l=$(lb_run "$model" "$n_prompt" 0)  # the other engine first this time
      read -r u _ _ < <(uf_run "$model" "$n_prompt" 0)
      echo "$u $l" >>"$tmp/pp"
      printf "  round %d prefill: ultrafast %.1f, llama.cpp %.1f tok/s\n" $((i + 1)) "$u" "$l" >&2
    fi
  done
  python3 - "$model" "$tmp/tg" "$tmp/pp" <<'EOF'
import os, statistics as st, sys
model, tg, pp = sys.argv[1], sys.argv[2], sys.argv[3]
def rows(p):
    return [list(map(float, l.split())) for l in open(p) if l.strip()]
def med(xs):
    return st.median(xs) if xs else float("nan")
t, p = rows(tg), rows(pp)
cols = [med([r[0] for r in t]), med([r[1] for r in t]), med([r[0] / r[1] for r in t]),
        med([r[2] for r in t]), med([r[3] for r in t]),
        med([r[0] for r in p]), med([r[1] for r in p]), med([r[0] / r[1] for r in p])]
print("%-32s %9.2f %9.2f %6.2f %9.2f %6.2f | %9.1f %9.1f %6.2f" %
      ((os.path.basename(model)[-32:],) + tuple(cols)))
EOF
done
