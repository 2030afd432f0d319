#!/usr/bin/env bash
# portable.sh - what the portable build (the default, CT_NATIVE off) costs against a
# -march=native build of the same tree on this machine: the micro-benchmarks of bench_ops, the
# optimizer updates of bench_optim, the loader of bench_loader and short runs of the bundled
# examples, each run alternately in the two builds ROUNDS times; prints the best median (or
# time) of each and the ratio portable / native (above 1: the portable build is slower).
#
#   bench/portable.sh [ROUNDS]        (default 5; builds the current tree in
#                                      build-bench-portable and build-bench-native)
set -euo pipefail
rounds=${1:-5}
cd "$(dirname "$0")/.."
for kind in portable native; do
    dir=build-bench-$kind
    native=OFF
    [[ $kind == native ]] && native=ON
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCT_NATIVE=$native \
        -DCT_BUILD_TESTS=OFF >/dev/null
    cmake --build "$dir" -j 2 --target bench_ops bench_optim bench_loader ctrain_cli >/dev/null
done
model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')
flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|avx512f|avx512_bf16|amx_bf16)$' | tr '\n' ' ')
echo "cpu: $model ($(nproc) cores; $flags)"
echo "compiler: $(cc --version | head -1); $rounds rounds, best median of each (ms)"
printf '%-28s %10s %10s %8s\n' case portable native ratio

# Refuses a value that is not a number (a benchmark or a run that failed): the table would lie.
num() {
    [[ $1 =~ ^[0-9]+([.][0-9]+)?([eE][-+]?[0-9]+)?$ ]] || {
        echo "bench/portable.sh: $2 gave '$1', not a time" >&2
        exit 1
    }
    echo "$1"
}

# The smaller of two times; "inf" stands for none yet.
smaller() { awk -v a="$1" -v b="$2" 'BEGIN { print (a == "inf" || b < a) ? b : a }'; }

# best NAME CMD...: runs CMD in each build alternately, prints the line of the table. CMD's
# output: the median in field $field of its last line.
best() {
    local name=$1 field=$2
    shift 2
    local p n r v
    p=inf
    n=inf
    for ((r = 0; r < rounds; r++)); do
        v=$(num "$("build-bench-portable/bench/$@" 2>/dev/null | tail -1 | awk -v f="$field" '{print $f}')" "$name")
        p=$(smaller "$p" "$v")
        v=$(num "$("build-bench-native/bench/$@" 2>/dev/null | tail -1 | awk -v f="$field" '{print $f}')" "$name")
        n=$(smaller "$n" "$v")
    done
    awk -v name="$name" -v p="$p" -v n="$n" 'BEGIN { printf "%-28s %10.4f %10.4f %8.3f\n", name, p, n, p / n }'
}

for c in linear conv2d attention mlp_step mlp32_step; do
    best "$c" 2 bench_ops "$c" --threads 2
done
best loader_plain 2 bench_loader loader_plain --threads 2
best loader_aug 2 bench_loader loader_aug --threads 2
# whole runs of the bundled examples, S steps each (wall time, s: loading the data, the
# steps, the closing evaluation)
fit_case() {
    local name=$1 ex=$2 steps=$3 r p n t0 t
    shift 3
    p=inf
    n=inf
    for ((r = 0; r < rounds; r++)); do
        for kind in portable native; do
            rm -rf "build-bench-$kind/fit-run"
            t0=$(date +%s.%N)
            "build-bench-$kind/ctrain" fit "examples/$ex.yaml" trainer.max_steps="$steps" \
                output_dir="build-bench-$kind/fit-run" logging.progress=none \
                checkpoint.enabled=false "$@" >/dev/null 2>&1 || {
                echo "bench/portable.sh: $name failed in build-bench-$kind" >&2
                exit 1
            }
            t=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
            if [[ $kind == portable ]]; then
                p=$(smaller "$p" "$t")
            else
                n=$(smaller "$n" "$t")
            fi
        done
    done
    awk -v name="$name (s)" -v p="$p" -v n="$n" 'BEGIN { printf "%-28s %10.4f %10.4f %8.3f\n", name, p, n, p / n }'
}
fit_case "fit mlp 1000 steps" fashion_mnist_mlp 1000
fit_case "fit cnn 100 steps" fashion_mnist_cnn 100
fit_case "fit gpt 100 steps" char_gpt 100
fit_case "fit gpt bf16 100 steps" char_gpt 100 trainer.precision=bf16

# bench_optim prints a table: the step column of Adam with weight decay and of AdamW, on the
# larger of its two parameter counts (its last row of each)
for v in "adam weight_decay" "adamw"; do
    pc=$(awk -v v="$v" 'BEGIN { n = split(v, w, " "); print n + 2 }')
    p=inf
    n=inf
    for ((r = 0; r < rounds; r++)); do
        x=$(num "$(build-bench-portable/bench/bench_optim | grep -E "^$v +[0-9]" | tail -1 | awk -v c="$pc" '{print $(c)}')" "$v")
        p=$(smaller "$p" "$x")
        x=$(num "$(build-bench-native/bench/bench_optim | grep -E "^$v +[0-9]" | tail -1 | awk -v c="$pc" '{print $(c)}')" "$v")
        n=$(smaller "$n" "$x")
    done
    awk -v name="optim $v (us)" -v p="$p" -v n="$n" 'BEGIN { printf "%-28s %10.4f %10.4f %8.3f\n", name, p, n, p / n }'
done
