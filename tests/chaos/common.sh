# shellcheck shell=bash
# common.sh - what the chaos tests share, sourced by each: the experiment they torture (small,
# with a checkpoint every few steps, Adam state and EMA, so that faults land in saves as often
# as in steps), a seeded random source, reference runs, and the comparisons that say whether
# a run that went through faults ended exactly as one that did not.
#
# Environment: CHAOS_SCALE multiplies the number of faults (1 in `make test`, more in `make
# chaos`); CHAOS_SEED fixes the random choices (printed, to repeat a failing run).
set -uo pipefail
CTRAIN=$(realpath "$1")
SCALE=${CHAOS_SCALE:-1}
SEED=${CHAOS_SEED:-$(( $(date +%s%N) % 1000000 ))}
RANDOM=$SEED
work=$(mktemp -d "${TMPDIR:-/tmp}/ctrain-chaos.XXXXXX")
bg_pid=
trap '[[ -n $bg_pid ]] && kill -KILL $bg_pid 2>/dev/null; rm -rf "$work"' EXIT
cd "$work" || exit 1

# ~330 KB of weights, twice that of Adam moments and an EMA copy per checkpoint, one every 4 steps,
# keep 2 and a best: faults land in saves, retention deletions and pointer updates.
cat >exp.yaml <<'YAML'
seed: 7
data:
  train: {type: synthetic, kind: blobs, n: 4096, features: 64, classes: 8, seed: 2}
  valid: {split: 0.125}
  batch_size: 64
model: {type: mlp, hidden: [256, 256], dropout: 0.1}
optimizer: {type: adam, lr: 0.001}
trainer: {max_epochs: 3, steps_per_loop: 4, ema: {decay: 0.99}}
metrics:
  valid: [accuracy]
checkpoint: {save_every_steps: 4, keep: 2, monitor: valid/acc}
logging: {progress: none, csv: true}
YAML

passed=0
failed=0
ok() { echo "ok   $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
tail_of() { cat "$@" 2>/dev/null | tail -c 400 | tr '\n' '|'; }

# A number in [lo, hi] from the seeded source.
rand() { echo $(( $1 + (RANDOM * 32768 + RANDOM) % ($2 - $1 + 1) )); }
# Seconds as a decimal of milliseconds in [lo_ms, hi_ms].
rand_ms() {
    local v
    v=$(rand "$1" "$2")
    printf '%d.%03d' $((v / 1000)) $((v % 1000))
}

# records FILE: metrics.jsonl without the wall-clock fields
records() { sed -E 's/,"time":[0-9.]+//; s/,"samples_per_sec":[0-9.e+-]+//' "$1"; }
csv_records() { cut -d, -f1,2,4,5 "$1" | grep -v ',samples_per_sec,'; }

# The latest checkpoint's files, by content
final_sums() {
    local d
    d="$1/checkpoints/$(head -n1 "$1/checkpoints/latest" 2>/dev/null)"
    sha256sum "$d/model.safetensors" "$d/optimizer.safetensors" "$d/ema.safetensors" 2>/dev/null |
        cut -d' ' -f1 | tr '\n' ' '
}

# reference DIR [OVERRIDES]: an uninterrupted run
reference() {
    local dir=$1
    shift
    "$CTRAIN" fit exp.yaml ++output_dir="$dir" "$@" >"$dir.log" 2>&1 ||
        bad "reference run $dir" "$(tail_of "$dir.log")"
}

# same_as_reference NAME RUN REF: the final checkpoint byte for byte, every record, no debris,
# every checkpoint verifying
same_as_reference() {
    local name=$1 run=$2 ref=$3 why=
    [[ "$(final_sums "$run")" == "$(final_sums "$ref")" && -n "$(final_sums "$ref")" ]] ||
        why+="final checkpoint differs; "
    diff <(records "$run/metrics.jsonl") <(records "$ref/metrics.jsonl") >/dev/null ||
        why+="metrics.jsonl differs: $(diff <(records "$run/metrics.jsonl") <(records "$ref/metrics.jsonl") | head -n 3 | tr '\n' '|'); "
    diff <(csv_records "$run/metrics.csv") <(csv_records "$ref/metrics.csv") >/dev/null ||
        why+="metrics.csv differs; "
    compgen -G "$run/checkpoints/*.tmp" >/dev/null && why+="debris: $(ls "$run/checkpoints" | tr '\n' ' '); "
    "$CTRAIN" inspect "$run" >inspect.out 2>&1 || why+="inspect: $(tail_of inspect.out); "
    if [[ -z $why ]]; then ok "$name"; else bad "$name" "$why"; fi
}

# finish DIR [OVERRIDES]: fit until it completes (exit 0), at most 3 tries
finish() {
    local dir=$1
    shift
    for _ in 1 2 3; do
        "$CTRAIN" fit exp.yaml ++output_dir="$dir" "$@" >>"$dir.log" 2>&1 && return 0
    done
    bad "finish $dir" "$(tail_of "$dir.log")"
    return 1
}

# summary NAME COUNTS...: the last line, and the exit status
summary() {
    echo "$1: $passed passed, $failed failed; seed $SEED, scale $SCALE; ${*:2}"
    [[ $failed -eq 0 && $passed -gt 0 ]]
}
