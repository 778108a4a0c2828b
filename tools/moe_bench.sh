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
    *) sed -n '2,14p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ $# -ge 1 ]] || { sed -n '2,14p' "$0"; exit 2; }

uf=${UF:-build/ultrafast}
lb=${LLAMA_BENCH:-/tmp/llama.cpp/build/bin/llama-bench}
[[ -x $uf ]] || { echo "moe_bench: no ultrafast binary at $uf (set UF)" >&2; exit 1; }
[[ -x $lb ]] || { echo "moe_bench: no llama-bench at $lb (set LLAMA_BENCH)" >&2; exit 1; }
export LD_LIBRARY_PATH="$(dirname "$lb")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# "tg_tok_s pp_tok_s roofline cpu_share" from one `ultrafast bench --json` (one load for both
# halves: a full-size file takes many seconds to load and repack).
uf_run() {  # model
  "$uf" bench -m "$1" -p "$n_prompt" -n "$n_gen" -t "$threads" --reps 1 --json 2>/dev/null |
    python3 -c 'import json,sys; j=json.loads(sys.stdin.read().strip().splitlines()[-1])
print(j["tg_tok_s"], j["pp_tok_s"], j.get("roofline_fraction", 0), j.get("tg_cpu_share", 0))'
}
# "tg_tok_s pp_tok_s" from one llama-bench run (0 for a half not run).
lb_run() {  # model
  "$lb" -m "$1" -p "$n_prompt" -n "$n_gen" -t "$threads" -r 1 -o json 2>/dev/null |
    python3 -c 'import json,sys
tg = pp = 0
for r in json.load(sys.stdin):
    if r["n_gen"] > 0: tg = r["avg_ts"]
    else: pp = r["avg_ts"]
print(tg, pp)'
}

# Medians of the rounds in file $2 ("uf_tg lcpp_tg roofline cpu uf_pp lcpp_pp" per line).
summarize() {  # model rounds_file
  python3 -c '
import os, statistics as st, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[2]) if l.strip()]
def med(f):
    xs = [x for x in map(f, rows) if x == x]
    return st.median(xs) if xs else float("nan")
ratio = lambda a, b: a / b if b > 0 else float("nan")
cols = (med(lambda r: r[0]), med(lambda r: r[1]), med(lambda r: ratio(r[0], r[1])),
        med(lambda r: r[2]), med(lambda r: r[3]),
        med(lambda r: r[4]), med(lambda r: r[5]), med(lambda r: ratio(r[4], r[5])))
print("%-32s %9.2f %9.2f %6.2f %9.2f %6.2f | %9.1f %9.1f %6.2f" %
      ((os.path.basename(sys.argv[1])[-32:],) + cols))' "$1" "$2"
}

printf '%-32s %9s %9s %6s %9s %6s | %9s %9s %6s\n' model uf_tg lcpp_tg ratio roofline cpu \
  "uf_pp$n_prompt" lcpp_pp ratio
for model in "$@"; do
  : >"$tmp/rounds"
  for ((i = 0; i < rounds; ++i)); do
    # Alternate which engine goes first, so neither always runs right after the other.
    if ((i % 2 == 0)); then
      read -r ut up roof cpu < <(uf_run "$model")
      read -r lt lp < <(lb_run "$model")
    else
      read -r lt lp < <(lb_run "$model")
      read -r ut up roof cpu < <(uf_run "$model")
    fi
    echo "$ut $lt $roof $cpu $up $lp" >>"$tmp/rounds"
    printf '  round %d: decode ultrafast %.2f, llama.cpp %.2f; prefill ultrafast %.1f, llama.cpp %.1f tok/s\n' \
      $((i + 1)) "$ut" "$lt" "$up" "$lp" >&2
  done
  summarize "$model" "$tmp/rounds"
done
