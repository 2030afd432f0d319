#!/usr/bin/env bash
# profile.sh - where a reference model's training step spends its time: `ctrain fit` on the
# experiment of examples/ for a fixed number of steps (evaluation and checkpoints off) under
# `perf record`, then the shares of the top functions and of each library.
#     usage: scripts/profile.sh mlp|cnn|gpt [STEPS] [BUILD_DIR] [key=value ...]
# The overrides after BUILD_DIR go to `ctrain fit` (trainer.precision=bf16 for the bf16 step).
# Needs perf (Debian's linux-perf). oneDNN's JIT kernels have no symbols: perf shows them as
# addresses in anonymous memory, counted here under "JIT (oneDNN kernels)". docs/performance.md.
set -euo pipefail
model=${1:?usage: $0 mlp|cnn|gpt [STEPS] [BUILD_DIR] [key=value ...]}
steps=${2:-300}
build=${3:-build}
overrides=("${@:4}")
src=$(cd "$(dirname "$0")/.." && pwd)
case $model in
mlp) cfg=$src/examples/fashion_mnist_mlp.yaml
     extra=("~data.test" "~metrics" "~checkpoint.monitor") ;;
cnn) cfg=$src/examples/fashion_mnist_cnn.yaml
     extra=("~data.test" "~metrics" "~checkpoint.monitor") ;;
gpt) cfg=$src/examples/char_gpt.yaml
     extra=("~trainer.valid_every_steps" "~checkpoint.monitor") ;;
*) echo "$0: unknown model '$model' (mlp, cnn or gpt)" >&2; exit 2 ;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# threads fixed at the CPUs there are: perf's own work would otherwise look like another
# process on a core and make the run drop a thread (docs/performance.md, Sharing the cores)
perf record -q -F 1999 -o "$tmp/perf.data" -- "$build/ctrain" fit "$cfg" output_dir="$tmp/run" \
    threads="$(nproc)" \
    "~data.valid" checkpoint.enabled=false logging.progress=none logging.report=none \
    trainer.max_epochs=0 trainer.max_steps="$steps" trainer.steps_per_loop=$((steps / 10)) \
    scheduler.total="$steps" scheduler.warmup=$((steps / 10)) "${extra[@]}" ${overrides[@]+"${overrides[@]}"} \
    >/dev/null 2>&1
# one line per (library, function): "share% library function"
perf report -q -i "$tmp/perf.data" --sort dso,symbol --percent-limit 0 2>/dev/null |
    awk '{ share = $1; sub(/%/, "", share); dso = $2; sym = $4
           if (dso == "[JIT]" || dso ~ /^\[anon|^\/\/anon|^perf-|^\[unknown\]/)
               key = "oneDNN JIT kernels (GEMM and convolution)"
           else if (dso ~ /^libgomp/) key = "OpenMP runtime (threads waiting at barriers)"
           else if (dso ~ /^libz/) key = "zlib (reading the gzip dataset at start-up)"
           else if (dso ~ /kernel/) key = "the Linux kernel"
           else if (dso == "ctrain" && sym !~ /^0x/) key = "ctrain: " sym
           else key = dso
           total[key] += share }
         END { for (k in total) if (total[k] >= 0.5) printf "%6.1f%%  %s\n", total[k], k }' |
    sort -rn | head -25 | sed "1i == $model, $steps steps: where the time goes (share of samples) =="
