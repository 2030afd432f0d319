#!/usr/bin/env bash
# kill.sh - SIGKILL at many moments, checkpoint writes included, then `ctrain fit` again until
# the run completes: every restart must resume from an intact checkpoint, and the final
# weights, optimizer state and metrics records must equal those of a run never interrupted.
# Usage: tests/e2e/kill.sh PATH/TO/ctrain
set -uo pipefail
CTRAIN=$(realpath "$1")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

# ~1 MB of weights and 2 MB of Adam moments per checkpoint, a checkpoint every 4 steps and
# keep 2: kills land in saves, retention deletions and pointer updates as well as in steps.
cat > exp.yaml <<'EOF'
seed: 7
data:
  train: {type: synthetic, kind: blobs, n: 4096, features: 64, classes: 8, seed: 2}
  valid: {split: 0.125}
  batch_size: 64
model: {type: mlp, hidden: [384, 384], dropout: 0.1}
optimizer: {type: adam, lr: 0.001}
trainer: {max_epochs: 6, steps_per_loop: 4}
checkpoint: {save_every_steps: 4, keep: 2}
logging: {progress: none}
EOF

passed=0
failed=0
ok() { echo "ok   $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1: $2"; failed=$((failed + 1)); }

# records without the wall-clock fields
records() { sed -E 's/,"time":[0-9.]+//; s/,"samples_per_sec":[0-9.e+-]+//' "$1"; }
final_sums() {
    local d="$1/checkpoints/$(head -n1 "$1/checkpoints/latest")"
    sha256sum "$d/model.safetensors" "$d/optimizer.safetensors" | cut -d' ' -f1
}

# scenario TAG MAX_KILLS MIN_KILLS OVERRIDES...: a reference run, then a run killed up to
# MAX_KILLS times (at least MIN_KILLS must land before it completes) and finished, compared
scenario() {
    local tag=$1 max_kills=$2 min_kills=$3
    shift 3
    local ref=ref_$tag run=run_$tag
    "$CTRAIN" fit exp.yaml ++output_dir=$ref "$@" >$ref.log 2>&1 || bad "$tag: reference run" "$(tail -3 $ref.log)"

    local kills=0 attempts=0 pid rc
    while [ $attempts -lt 40 ]; do
        attempts=$((attempts + 1))
        "$CTRAIN" fit exp.yaml ++output_dir=$run "$@" >>$run.log 2>&1 &
        pid=$!
        # 20..250 ms: from start-up (data, model) into the training and its saves; short
        # enough that a run, which resumes each time, rarely completes before MIN_KILLS land
        sleep "0.$(printf '%03d' $(( (attempts * 97) % 230 + 20 )))"
        if kill -9 "$pid" 2>/dev/null; then
            kills=$((kills + 1))
            wait "$pid" 2>/dev/null
        else
            wait "$pid"
            rc=$?
            [ $rc -eq 0 ] && break
            bad "$tag: restart $attempts" "exit $rc: $(tail -3 $run.log)"
            break
        fi
        [ $kills -ge "$max_kills" ] && break
    done
    # finish whatever is left
    "$CTRAIN" fit exp.yaml ++output_dir=$run "$@" >>$run.log 2>&1 || bad "$tag: final resume" "$(tail -3 $run.log)"
    [ $kills -ge "$min_kills" ] && ok "$tag: killed $kills times with SIGKILL" || bad "$tag: kills" "only $kills landed"

    if grep -q "fell back\|falling back\|damaged" $run.log; then
        echo "     (a resume fell back to an older intact checkpoint, as designed)"
    fi
    [ "$(final_sums $ref)" = "$(final_sums $run)" ] && ok "$tag: final weights and optimizer equal the uninterrupted run's" \
        || bad "$tag: final state" "checksums differ"
    if diff <(records $ref/metrics.jsonl) <(records $run/metrics.jsonl) >/dev/null; then
        ok "$tag: metrics.jsonl equals the uninterrupted run's (no duplicate or missing records)"
    else
        bad "$tag: metrics.jsonl" "$(diff <(records $ref/metrics.jsonl) <(records $run/metrics.jsonl) | head -5)"
    fi
    ls $run/checkpoints | grep -q '\.tmp$' && bad "$tag: tmp left" "$(ls $run/checkpoints)" || ok "$tag: no .tmp entries left"
    "$CTRAIN" inspect $run >inspect.log 2>&1 && ok "$tag: inspect: every checkpoint verifies" \
        || bad "$tag: inspect" "$(tail -5 inspect.log)"
}

scenario f32 12 5
# bf16 mixed precision resumes bit for bit too (issue 6)
scenario bf16 6 3 trainer.precision=bf16
[ "$(final_sums ref_f32)" != "$(final_sums ref_bf16)" ] && ok "bf16 trained other weights than f32" \
    || bad "bf16" "the bf16 run's weights equal the f32 run's: the setting did nothing"

echo "kill: $passed passed, $failed failed"
[ $failed -eq 0 ]
