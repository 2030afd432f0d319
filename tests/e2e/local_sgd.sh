#!/usr/bin/env bash
# local_sgd.sh - trainer.strategy local_sgd end to end under mpirun with 2 processes: averaging
# after every step equals sync training (SGD with momentum, to 1e-6); two runs with an outer
# Nesterov optimizer, Adam inside and an EMA give the same bits, whatever the thread count; a
# run stopped mid-epoch and resumed equals the uninterrupted run bit for bit; one process
# equals sync bit for bit; what local SGD cannot honour is a configuration error (exit 2).
# With `verify`, instead: `ctrain verify-resume --ranks 2` on a local SGD run passes.
#     usage: local_sgd.sh PATH/TO/ctrain PATH/TO/mpirun [verify]
# Prints "ok   NAME" or "FAIL NAME: WHY" per check and "local_sgd: N passed, M failed".
set -uo pipefail
# shellcheck source=tests/e2e/harness.sh
source "$(dirname "$(realpath "$0")")/harness.sh"

if [[ $# -lt 2 || $# -gt 3 || ${3:-verify} != verify ]]; then
    echo "usage: $0 CTRAIN MPIRUN [verify]" >&2
    exit 2
fi
ctrain=$(realpath "$1")
mpi_launch "$2"
enter_workdir local-sgd

# ---- with `verify`: ctrain verify-resume --ranks 2 on a local SGD run, each fit a job of this
# launcher (an `mpirun` on PATH that is it), cut mid window, at an epoch's end, after an
# evaluation and inside a checkpoint write; every checkpoint and record the straight run's; and
# in one process ----
if [[ ${3:-} == verify ]]; then
    export TMPDIR=$work/tmp
    mkdir -p "$TMPDIR" bin
    printf '#!/bin/sh\nexec %q "$@"\n' "$(command -v "$2")" >bin/mpirun
    chmod +x bin/mpirun
    cat >exp.yaml <<'YAML'
seed: 7
threads: 1
data:
  train: {type: synthetic, kind: blobs, n: 640, features: 16, classes: 4, seed: 2}
  valid: {split: 0.125}
  batch_size: 16
model: {type: mlp, hidden: [32], dropout: 0.1}
optimizer: {type: adam, lr: 0.01}
trainer:
  max_epochs: 10
  accum_steps: 2
  valid_every_steps: 7
  ema: {decay: 0.99}
  strategy: local_sgd
  local_sgd: {steps: 4, outer_lr: 0.8, outer_momentum: 0.5}
metrics:
  valid: [accuracy]
YAML
    expect verify_resume_should_pass_under_local_sgd 0 \
        'SIGKILL mid accumulation window on rank 1 +[0-9]+-[0-9]+ +identical' \
        'SIGTERM at the last step of epoch [0-9]+ on rank 0 +[0-9]+-[0-9]+ +identical' \
        'SIGKILL right after an evaluation on every rank +[0-9]+-[0-9]+ +identical' \
        'SIGKILL during a checkpoint write on rank 0 +[0-9]+-[0-9]+ +identical' \
        'every checkpoint file and metrics record equals' '!differs|failed' -- \
        env PATH="$work/bin:$PATH" "$ctrain" verify-resume exp.yaml --steps 24 --cuts 4 --ranks 2
    # one process, 18 steps an epoch: checkpoints at averages only leave room for 3 of the 5
    # cuts asked for, a SIGTERM's stop at the next average being one
    expect verify_resume_should_fit_its_cuts_to_the_averages 0 \
        'SIGTERM at the last step of epoch 1 +[0-9-]+ +identical' \
        'SIGKILL during a checkpoint write +[0-9]+-[0-9]+ +identical' \
        '24 steps, 3 cuts: every checkpoint file and metrics record equals' '!differs|failed' -- \
        "$ctrain" verify-resume exp.yaml --steps 24 --cuts 5
    echo "local_sgd verify: $passed passed, $failed failed"
    [[ $failed -eq 0 ]]
    exit
fi

# run NP ARGS...: ctrain fit under mpirun with NP processes; output in out, exit code in $rc
run() {
    local np=$1
    shift
    "${launch[@]}" -np "$np" "$ctrain" fit "$@" logging.progress=none >out 2>&1
    rc=$?
}
# latest DIR: the run's latest checkpoint directory
latest() { echo "$1/checkpoints/$(head -n1 "$1/checkpoints/latest" 2>/dev/null)"; }
# same A B FILE...: whether each FILE is byte-identical in checkpoint directories A and B
same() {
    local a=$1 b=$2 f
    shift 2
    for f in "$@"; do cmp -s "$a/$f" "$b/$f" || return 1; done
}
# steady FILE: metrics.jsonl without its wall-clock values
steady() { sed -E 's/"(time|samples_per_sec|comm_ms_per_step|train\/average_ms)":[0-9.e+-]+,?//g' "$1"; }
# momentum DIR: the outer momentum saved in DIR/state.json
momentum() { grep -o '"momentum": *"[0-9a-f]*"' "$1/state.json" 2>/dev/null; }

# 1280 training samples: 40 steps of 16 per process and epoch
cat >tiny.yaml <<'YAML'
seed: 1
threads: 1
data:
  train: {type: synthetic, kind: blobs, n: 1600, features: 8, classes: 4, seed: 3}
  valid: {split: 0.2}
  batch_size: 16
model: {type: mlp, hidden: [32]}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
trainer: {max_epochs: 2}
YAML

# ---- every step averaged: SGD with momentum is linear in the gradients, so averaging the
# weights and momenta after each local step is sync's averaged gradient step, up to rounding ----
run 2 tiny.yaml output_dir=runs/sync
rc1=$rc
run 2 tiny.yaml output_dir=runs/h1 trainer.strategy=local_sgd trainer.local_sgd.steps=1
a=$(latest runs/sync)
b=$(latest runs/h1)
if [[ $rc1 -ne 0 || $rc -ne 0 ]]; then
    fail h1_equals_sync "exit $rc1 then $rc: $(tail_of out)"
elif ! grep -q "on 2 processes (.*weights averaged every 1 steps)" out; then
    fail h1_equals_sync "no 'weights averaged every 1 steps' line: $(tail_of out)"
elif ! "$ctrain" diff --tolerance 1e-6 "$a/model.safetensors" "$b/model.safetensors" >diff 2>&1 ||
    ! "$ctrain" diff --tolerance 1e-6 "$a/optimizer.safetensors" "$b/optimizer.safetensors" \
        >>diff 2>&1; then
    fail h1_equals_sync "the weights or momenta differ: $(tail_of diff)"
elif ! grep -q '"train/averages":10' runs/h1/metrics.jsonl ||
    ! grep -q '"train/average_ms":' runs/h1/metrics.jsonl; then
    fail h1_equals_sync "no train/averages 10 and train/average_ms in the records"
else
    ok h1_equals_sync
fi

# ---- DiLoCo: Adam inside, outer Nesterov, an EMA; the same bits twice, on 1 or 2 threads ----
dil=(trainer.strategy=local_sgd trainer.local_sgd.steps=4 trainer.local_sgd.outer_lr=0.7
    trainer.local_sgd.outer_momentum=0.5 "optimizer={type: adam, lr: 0.01}"
    "trainer.ema={decay: 0.9}" trainer.max_epochs=3 trainer.valid_every_steps=6
    checkpoint.save_every_steps=10 checkpoint.keep=0)
run 2 tiny.yaml output_dir=runs/d1 "${dil[@]}"
rc1=$rc
run 2 tiny.yaml output_dir=runs/d2 "${dil[@]}" threads=2
a=$(latest runs/d1)
b=$(latest runs/d2)
if [[ $rc1 -ne 0 || $rc -ne 0 ]]; then
    fail outer_nesterov_reproducible "exit $rc1 then $rc: $(tail_of out)"
elif [[ ${a##*/} != step-00000120 || ${b##*/} != step-00000120 ]]; then
    fail outer_nesterov_reproducible "latest is $a and $b, expected step-00000120"
elif ! same "$a" "$b" model.safetensors optimizer.safetensors ema.safetensors; then
    fail outer_nesterov_reproducible "the checkpoints of $a and $b differ"
elif [[ -z $(momentum "$a") || $(momentum "$a") != "$(momentum "$b")" ]]; then
    fail outer_nesterov_reproducible "the outer momentum is missing or differs"
elif ! diff <(steady runs/d1/metrics.jsonl) <(steady runs/d2/metrics.jsonl) >/dev/null; then
    fail outer_nesterov_reproducible "the records differ"
else
    ok outer_nesterov_reproducible
fi
# evaluations every 6 steps and checkpoints every 10 at the first average (every 4) at or
# after they fall due: on the averaged weights (the best checkpoints too)
valid=$(grep '"valid/acc"' runs/d1/metrics.jsonl | grep -oE '^\{"step":[0-9]+' | cut -d: -f2 |
    head -n 7 | tr '\n' ' ')
saves=$(ls runs/d1/checkpoints | grep -E '^step-' | sed 's/^step-0*//' | tr '\n' ' ')
verdict cadences_wait_for_averages "$(
    [[ $valid == "8 12 20 24 32 36 40 " ]] || echo "valid/ records at steps $valid"
    for k in 12 20 32 52 120; do [[ " $saves" == *" $k "* ]] || echo "no checkpoint $k: $saves"; done
    for k in $saves; do ((k % 4 == 0)) || echo "checkpoint $k between averages"; done
)"

# ---- stopped at step 44 (epoch 2, an average), resumed to the end: the same bits ----
run 2 tiny.yaml output_dir=runs/r "${dil[@]}" trainer.max_steps=44
rc1=$rc
run 2 tiny.yaml output_dir=runs/r "${dil[@]}"
b=$(latest runs/r)
if [[ $rc1 -ne 0 || $rc -ne 0 ]]; then
    fail resume_equals_straight_run "exit $rc1 then $rc: $(tail_of out)"
elif ! grep -q "resumed from .*step-00000044" runs/r/log.txt; then
    fail resume_equals_straight_run "not resumed from step 44: $(tail_of runs/r/log.txt)"
elif [[ ${b##*/} != step-00000120 ]] ||
    ! same "$a" "$b" model.safetensors optimizer.safetensors ema.safetensors; then
    fail resume_equals_straight_run "the final checkpoint $b differs from $a"
elif [[ $(momentum "$a") != "$(momentum "$b")" ]]; then
    fail resume_equals_straight_run "the outer momentum differs"
else
    ok resume_equals_straight_run
fi

# ---- one process: averaging changes nothing, the run is sync's bit for bit ----
run 1 tiny.yaml output_dir=runs/one
rc1=$rc
run 1 tiny.yaml output_dir=runs/one_l trainer.strategy=local_sgd trainer.local_sgd.steps=3
if [[ $rc1 -ne 0 || $rc -ne 0 ]]; then
    fail one_process_equals_sync "exit $rc1 then $rc: $(tail_of out)"
elif ! same "$(latest runs/one)" "$(latest runs/one_l)" model.safetensors \
    optimizer.safetensors; then
    fail one_process_equals_sync "the checkpoints differ"
else
    ok one_process_equals_sync
fi

# ---- what local SGD cannot honour: configuration errors, exit 2 ----
lsgd=(trainer.strategy=local_sgd trainer.local_sgd.steps=4)
expect steps_below_one_refused 2 "trainer.local_sgd.steps" -- \
    "$ctrain" fit tiny.yaml output_dir=runs/e trainer.strategy=local_sgd trainer.local_sgd.steps=0
expect outer_momentum_of_one_refused 2 "local_sgd.outer_momentum is 1, expected a value in" -- \
    "$ctrain" fit tiny.yaml output_dir=runs/e "${lsgd[@]}" trainer.local_sgd.outer_momentum=1
expect outer_lr_of_zero_refused 2 "local_sgd.outer_lr is 0, expected > 0" -- \
    "$ctrain" fit tiny.yaml output_dir=runs/e "${lsgd[@]}" trainer.local_sgd.outer_lr=0
expect sharded_update_refused 2 "shard_optimizer is 'always', but strategy local_sgd" -- \
    "$ctrain" fit tiny.yaml output_dir=runs/e "${lsgd[@]}" trainer.shard_optimizer=always
expect buckets_refused 2 "bucket_bytes is 1048576, but strategy local_sgd" -- \
    "$ctrain" fit tiny.yaml output_dir=runs/e "${lsgd[@]}" trainer.bucket_mb=1
expect nonfinite_skip_refused 2 "on_nonfinite skip and rollback are not available" -- \
    "$ctrain" fit tiny.yaml output_dir=runs/e "${lsgd[@]}" trainer.on_nonfinite=skip
expect spike_detection_refused 2 "on_spike is not available with strategy local_sgd" -- \
    "$ctrain" fit tiny.yaml output_dir=runs/e "${lsgd[@]}" "trainer.on_spike={action: warn}"

echo "local_sgd: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
