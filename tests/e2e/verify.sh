#!/usr/bin/env bash
# verify.sh - `ctrain verify-resume` end to end, on a tiny MLP with accumulation, evaluations by
# steps and epochs of 9 steps, so that each kind of cut has its place: the real build's resume
# is found exact (exit 0, every row identical); ctrain_broken_resume, whose resume drops the
# training loader's position (CT_TEST_BREAK_RESUME), is found out (exit 1, the table names the
# first differing file); configuration and usage errors exit 2 as fit's do; the scratch
# directory is removed, or kept with --keep.
#     usage: verify.sh PATH/TO/ctrain PATH/TO/ctrain_broken_resume
# shellcheck source=tests/e2e/harness.sh
source "$(dirname "$(realpath "$0")")/harness.sh"
ctrain=$(realpath "$1")
broken=$(realpath "$2")
enter_workdir verify
export TMPDIR=$work/tmp
mkdir -p "$TMPDIR"

cat >exp.yaml <<'YAML'
seed: 7
data:
  train: {type: synthetic, kind: blobs, n: 640, features: 16, classes: 4, seed: 2}
  valid: {split: 0.125}
  batch_size: 32
model: {type: mlp, hidden: [32], dropout: 0.1}
optimizer: {type: adam, lr: 0.01}
trainer: {max_epochs: 10, accum_steps: 2, valid_every_steps: 7, ema: {decay: 0.99}}
metrics:
  valid: [accuracy]
YAML

# the real build: every kind of cut made, every row identical, the scratch directory removed
expect verify_resume_should_pass_on_the_real_build 0 \
    'SIGKILL mid accumulation window +[0-9]+-[0-9]+ +identical' \
    'SIGTERM at the last step of epoch [0-9]+ +[0-9]+-[0-9]+ +identical' \
    'SIGKILL right after an evaluation +[0-9]+-[0-9]+ +identical' \
    'SIGKILL during a checkpoint write +[0-9]+-[0-9]+ +identical' \
    'SIGTERM \(graceful stop\) +[0-9]+-[0-9]+ +identical' \
    'every checkpoint file and metrics record equals' '!differs|failed' -- \
    "$ctrain" verify-resume exp.yaml --steps 40 --cuts 5
leftover=$(ls -A "$TMPDIR")
verdict verify_resume_should_remove_its_scratch_directory "${leftover:+left: $leftover}"

# the broken resume: found, with the file and byte of the first difference, and the first record
# and key
expect verify_resume_should_report_a_broken_resume 1 \
    "differs: checkpoints/step-[0-9]{8}/[a-z]+\\.safetensors: byte [0-9]+; metrics\\.jsonl record [0-9]+ \\(step [0-9]+\\): key '[a-z/_]+': [0-9.e-]+, interrupted [0-9.e-]+" \
    'resuming does NOT reproduce' -- \
    "$broken" verify-resume exp.yaml optimizer.lr=0.02 --steps 24 --cuts 3 --dir kept --keep
# the first fit makes no resume: its steps agree even there
grep -qE '^ +- +- +none: the first fit +1-[0-9]+ +identical' out &&
    ok verify_resume_should_charge_the_difference_to_a_resume ||
    fail verify_resume_should_charge_the_difference_to_a_resume "$(tail_of out)"
[[ -d kept/straight/checkpoints && -d kept/resumed/checkpoints && -f kept/resumed.log ]] &&
    ok verify_resume_should_keep_its_runs_with_keep ||
    fail verify_resume_should_keep_its_runs_with_keep "$(ls -R kept 2>&1 | head -n 5)"
expect verify_resume_should_refuse_a_dir_that_is_not_empty 2 'not empty' -- \
    "$ctrain" verify-resume exp.yaml --dir kept

# a bad configuration: fit's message and exit code
printf 'model: {type: mlp, hidden: [4]}\noptimizer: {type: adam, lr: 0.1}\ntrainer: {max_epocs: 3}\n' \
    >bad.yaml
"$ctrain" fit bad.yaml >fit.out 2>&1
fit_rc=$?
expect verify_resume_should_fail_a_bad_config_as_fit_does "$fit_rc" \
    "$(grep -m1 -oE "unknown key 'trainer\.max_epocs'" fit.out)" -- \
    "$ctrain" verify-resume bad.yaml
[[ $fit_rc -eq 2 ]] && ok verify_resume_bad_config_exit_is_2 ||
    fail verify_resume_bad_config_exit_is_2 "fit exits $fit_rc"
expect verify_resume_should_fail_a_bad_override_as_fit_does 2 "optimizer.lr" -- \
    "$ctrain" verify-resume exp.yaml optimizer.lr=abc
expect verify_resume_should_refuse_more_cuts_than_steps 2 '--cuts must be less than --steps' -- \
    "$ctrain" verify-resume exp.yaml --steps 4 --cuts 4
expect verify_resume_should_refuse_a_bad_count 2 "--steps: expected a whole number" -- \
    "$ctrain" verify-resume exp.yaml --steps many
expect verify_resume_should_refuse_an_unknown_option 2 "unknown option '--restart'" -- \
    "$ctrain" verify-resume exp.yaml --restart
expect verify_resume_should_want_a_config 2 'missing CONFIG' -- "$ctrain" verify-resume
expect verify_resume_help 0 'usage: ctrain verify-resume CONFIG' -- \
    "$ctrain" verify-resume --help
expect fit_should_refuse_a_bad_cut_hook 2 'CTRAIN_VERIFY_CUT=.nap@3.: expected HOW@STEP' -- \
    env CTRAIN_VERIFY_CUT=nap@3 "$ctrain" fit exp.yaml ++output_dir=hook
leftover=$(ls -A "$TMPDIR")
verdict verify_resume_should_leave_nothing_after_errors "${leftover:+left: $leftover}"

echo "verify.sh: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
