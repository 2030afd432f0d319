#!/usr/bin/env bash
# follow.sh - `ctrain eval RUN --follow`, the continuous evaluator, beside a fit that saves a
# checkpoint every 3 steps and keeps 2: the evaluator scores every checkpoint still kept when it
# looks, each with the values the fit's own evaluation of that step recorded, and skips with a
# note the one retention deleted while it waited between listing and loading it (the test hook
# CTRAIN_FOLLOW_PAUSE holds it there); the fit's files are byte for byte those of a fit without
# an evaluator; the polling fallback does the same; a second evaluator resumes where the first
# stopped; a checkpoint deleted while it is being read is skipped; --timeout ends the wait on a
# run that never finishes; usage errors exit 2.
#     usage: follow.sh PATH/TO/ctrain PATH/TO/jsonq
# shellcheck source=tests/e2e/harness.sh
source "$(dirname "$(realpath "$0")")/harness.sh"
ctrain=$(realpath "$1")
jsonq=$(realpath "$2")
enter_workdir follow

cat >exp.yaml <<'YAML'
seed: 3
threads: 1
data:
  train: {type: synthetic, kind: blobs, n: 1280, features: 32, classes: 4, seed: 5}
  valid: {split: 0.25}
  batch_size: 16
model: {type: mlp, hidden: [64]}
optimizer: {type: adam, lr: 0.003}
trainer: {max_steps: 30, valid_every_steps: 3, valid_every_epochs: 0}
checkpoint: {save_every_steps: 3, save_every_epochs: 0, keep: 2}
metrics:
  valid: [accuracy]
logging: {tensorboard: true}
YAML

# the steps in RUN's evaluator records / in its checkpoints
eval_steps() { sed -nE 's/^\{"step":([0-9]+),.*/\1/p' "$1/eval/metrics.jsonl" 2>/dev/null; }
kept_steps() { ls "$1/checkpoints" | sed -nE 's/^step-0*([0-9]+)$/\1/p'; }
# what the evaluator recorded must be the fit's own evaluation of that step, value for value
same_values() {
    local run=$1 why="" s k compared=0
    for s in $(eval_steps "$run"); do
        grep -q "^{\"step\":$s,.*\"valid/loss\"" "$run/metrics.jsonl" || continue # not evaluated by the fit
        compared=$((compared + 1))
        for k in valid/loss valid/acc; do
            local mine theirs
            mine=$(grep "^{\"step\":$s," "$run/eval/metrics.jsonl" | "$jsonq" "$k" 2>&1)
            theirs=$(grep "^{\"step\":$s,.*\"$k\"" "$run/metrics.jsonl" | "$jsonq" "$k" 2>&1)
            [[ -n $mine && $mine == "$theirs" ]] || why+="step $s $k: $mine, fit's $theirs; "
        done
    done
    [[ $compared -ge 2 ]] || why+="only $compared steps to compare; "
    echo "$why"
}
# side_by_side RUN: the evaluator is started first (it waits for the fit to make RUN), then
# the fit; the evaluator's output goes to RUN.out/RUN.err and its exit code to RUN.rc
side_by_side() {
    local run=$1
    timeout 60 "$ctrain" eval exp.yaml "output_dir=$run" --follow >"$run.out" 2>"$run.err" &
    local pid=$!
    bg_pid=$pid
    "$ctrain" fit exp.yaml "output_dir=$run" >"$run.fit" 2>&1 || fail "fit_$run" "$(tail_of "$run.fit")"
    wait "$pid"
    echo "$?" >"$run.rc"
    bg_pid=
}
# ---- a fit alone, the reference ----
"$ctrain" fit exp.yaml output_dir=alone >alone.fit 2>&1 ||
    fail fit_alone "$(tail_of alone.fit)"
[[ $("$jsonq" step alone/finished.json 2>&1) == 30 ]] &&
    ok fit_should_mark_a_finished_run ||
    fail fit_should_mark_a_finished_run "$(cat alone/finished.json 2>&1)"

# ---- a fit and the evaluator side by side (inotify) ----
side_by_side beside
why=""
[[ $(cat beside.rc) == 0 ]] || why+="exit $(cat beside.rc); "
grep -q "following .*beside (inotify)" beside.err || why+="no inotify; "
grep -q "the run finished at step 30" beside.err || why+="did not see the end; "
verdict follow_should_end_when_the_run_finishes "${why:+$why$(tail_of beside.err)}" || true
why=""
for s in $(kept_steps beside); do
    eval_steps beside | grep -qx "$s" || why+="kept step $s not evaluated; "
done
dups=$(eval_steps beside | sort | uniq -d)
[[ -z $dups ]] || why+="evaluated twice: $dups; "
for s in $(eval_steps beside); do
    [[ $((s % 3)) == 0 ]] || why+="step $s is no checkpoint's; "
done
verdict follow_should_evaluate_every_kept_checkpoint "${why:+$why$(tail_of beside.err)}" || true
verdict follow_should_record_the_fits_own_values "$(same_values beside)" || true
ls beside/eval/events.out.tfevents.* >/dev/null 2>&1 &&
    ok follow_should_write_its_own_tensorboard_events ||
    fail follow_should_write_its_own_tensorboard_events "$(ls beside/eval)"
grep -qE '^valid \(step [0-9]+\): valid/acc [0-9.e-]+ valid/loss' beside.out &&
    ok follow_should_print_each_evaluation ||
    fail follow_should_print_each_evaluation "$(tail_of beside.out)"

# the fit's own files: those of the fit without an evaluator, byte for byte
why=""
diff -r alone/checkpoints beside/checkpoints >cmp.out 2>&1 || why+="checkpoints: $(tail_of cmp.out); "
[[ "$(records alone/metrics.jsonl)" == "$(records beside/metrics.jsonl)" ]] ||
    why+="metrics.jsonl differs; "
cmp -s alone/finished.json beside/finished.json || why+="finished.json differs; "
# TensorBoard's file names hold the time and the pid: their count is compared
files() { (cd "$1" && find . -path ./eval -prune -o -print | sed 's/tfevents\..*/tfevents/' | sort); }
[[ "$(files alone)" == "$(files beside)" ]] ||
    why+="files: $(diff <(files alone) <(files beside) | tr '\n' ' '); "
verdict follow_should_leave_the_fits_files_untouched "$why" || true

# ---- the polling fallback ----
CTRAIN_FOLLOW_POLL=0.05 side_by_side polled
why=""
[[ $(cat polled.rc) == 0 ]] || why+="exit $(cat polled.rc); "
grep -q "following .*polled (polling every 0.05 s)" polled.err || why+="not polling; "
grep -q "the run finished at step 30" polled.err || why+="did not see the end; "
for s in $(kept_steps polled); do
    eval_steps polled | grep -qx "$s" || why+="kept step $s not evaluated; "
done
diff -r alone/checkpoints polled/checkpoints >cmp.out 2>&1 || why+="checkpoints differ; "
verdict follow_should_poll_when_asked "${why:+$why$(tail_of polled.err)}" || true
verdict follow_polling_should_record_the_fits_own_values "$(same_values polled)" || true

# ---- retention deletes a checkpoint the evaluator has listed ----
# the fit stops after step 8 (SIGTERM, verify-resume's cut hook): checkpoints 6 and 8 are kept;
# the evaluator lists them and is held before loading step 6 (CTRAIN_FOLLOW_PAUSE) while the
# fit is resumed to its end, whose retention deletes step 6
CTRAIN_VERIFY_CUT=term@8 "$ctrain" fit exp.yaml output_dir=cut >cut.fit 2>&1
[[ $? == 143 && -d cut/checkpoints/step-00000006 ]] || fail fit_cut "$(tail_of cut.fit)"
CTRAIN_FOLLOW_PAUSE=$PWD/cut.pause timeout 60 "$ctrain" eval cut --follow >cut.out 2>cut.err &
pid=$!
bg_pid=$pid
for _ in $(seq 1500); do [[ -f cut.pause ]] && break; sleep 0.02; done
held=$(cat cut.pause 2>/dev/null)
"$ctrain" fit exp.yaml output_dir=cut >cut.fit2 2>&1 || fail fit_cut_resumed "$(tail_of cut.fit2)"
while kill -0 "$pid" 2>/dev/null; do
    rm -f cut.pause
    sleep 0.02
done
wait "$pid"
rc=$?
bg_pid=
why=""
[[ $rc == 0 ]] || why+="exit $rc; "
[[ $held == step-00000006 ]] || why+="held '$held'; "
[[ ! -d cut/checkpoints/step-00000006 ]] || why+="step 6 was kept; "
grep -q "skipped step-00000006: deleted" cut.err || why+="no note; "
eval_steps cut | grep -qx 6 && why+="step 6 recorded; "
for s in $(kept_steps cut); do
    eval_steps cut | grep -qx "$s" || why+="kept step $s not evaluated; "
done
verdict follow_should_skip_a_checkpoint_retention_deleted "${why:+$why$(tail_of cut.err)}" || true
verdict follow_should_record_the_resumed_fits_values "$(same_values cut)" || true

# ---- resuming: a finished run whose 10 checkpoints are all kept ----
"$ctrain" fit exp.yaml output_dir=all checkpoint.keep=0 >all.fit 2>&1 || fail fit_all "$(tail_of all.fit)"
# the first evaluator is stopped while it waits to load its third checkpoint
CTRAIN_FOLLOW_PAUSE=$PWD/all.pause "$ctrain" eval all --follow >first.out 2>first.err &
pid=$!
bg_pid=$pid
n=0
while kill -0 "$pid" 2>/dev/null; do
    if [[ -f all.pause ]]; then
        n=$((n + 1))
        if [[ $n -ge 3 ]]; then kill -TERM "$pid"; break; fi
        rm -f all.pause
    fi
    sleep 0.02
done
wait "$pid"
rc=$?
bg_pid=
rm -f all.pause
why=""
[[ $rc == 143 ]] || why+="exit $rc; "
[[ $(eval_steps all | tr '\n' ' ') == "3 6 " ]] || why+="records: $(eval_steps all | tr '\n' ' '); "
verdict follow_should_stop_at_a_signal "${why:+$why$(tail_of first.err)}" || true
expect follow_should_resume_where_it_stopped 0 "2 checkpoints already in" \
    "the run finished at step 30: 8 checkpoints evaluated, 0 skipped" -- \
    timeout 60 "$ctrain" eval all --follow --json
[[ $(eval_steps all | tr '\n' ' ') == "3 6 9 12 15 18 21 24 27 30 " ]] &&
    ok follow_should_evaluate_each_step_once ||
    fail follow_should_evaluate_each_step_once "$(eval_steps all | tr '\n' ' ')"
[[ $(wc -l <out) == 8 ]] && "$jsonq" valid/loss out >/dev/null &&
    ok follow_json_should_print_a_record_per_checkpoint ||
    fail follow_json_should_print_a_record_per_checkpoint "$(tail_of out)"
cp all/eval/metrics.jsonl before.jsonl
expect follow_should_not_evaluate_again 0 "10 checkpoints already in" \
    "0 checkpoints evaluated, 0 skipped" -- timeout 60 "$ctrain" eval all --follow
cmp -s before.jsonl all/eval/metrics.jsonl && ok follow_should_leave_its_records_as_they_were ||
    fail follow_should_leave_its_records_as_they_were "$(diff before.jsonl all/eval/metrics.jsonl)"
verdict follow_should_record_the_values_of_every_step "$(same_values all)" || true

# ---- a new checkpoint wakes a waiting evaluator (inotify, and polling) ----
# a copy of the finished run, unfinished again and without its last checkpoints; the evaluator
# scores what is there, then each checkpoint renamed in as a save publishes one, then ends at
# the mark
wake() {
    local run=$1
    rm -rf "$run" "$run.stash"
    cp -r all "$run"
    rm -rf "$run/eval" "$run/finished.json"
    mkdir "$run.stash"
    mv "$run"/checkpoints/step-0000002[1-9] "$run"/checkpoints/step-00000030 "$run.stash"/
    timeout 60 "$ctrain" eval "$run" --follow >"$run.out" 2>"$run.err" &
    local pid=$! why="" s
    bg_pid=$pid
    for s in 18 21 24; do
        [[ $s != 18 ]] && mv "$run.stash/step-000000$s" "$run/checkpoints/"
        local until=$((SECONDS + 15))
        while ((SECONDS < until)); do eval_steps "$run" | grep -qx "$s" && break; sleep 0.02; done
        eval_steps "$run" | grep -qx "$s" || why+="step $s not evaluated within 15 s; "
    done
    cp all/finished.json "$run/finished.json.tmp" # published as fit does it
    mv "$run/finished.json.tmp" "$run/finished.json"
    wait "$pid"
    local rc=$?
    bg_pid=
    [[ $rc == 0 ]] || why+="exit $rc; "
    [[ $(eval_steps "$run" | tr '\n' ' ') == "3 6 9 12 15 18 21 24 " ]] ||
        why+="records: $(eval_steps "$run" | tr '\n' ' '); "
    echo "$why"
}
verdict follow_should_wake_for_a_new_checkpoint "$(wake woken)" || true
verdict follow_polling_should_see_a_new_checkpoint "$(CTRAIN_FOLLOW_POLL=0.05 wake polled_woken)" ||
    true

# a last line cut short (an evaluator killed mid write) is cut off, and its step scored again
head -c -20 before.jsonl >all/eval/metrics.jsonl
expect follow_should_cut_off_a_torn_last_line 0 "last line is incomplete" \
    "9 checkpoints already in" "1 checkpoint evaluated" -- timeout 60 "$ctrain" eval all --follow
cmp -s <(records before.jsonl) <(records all/eval/metrics.jsonl) &&
    ok follow_should_rewrite_the_torn_record ||
    fail follow_should_rewrite_the_torn_record "$(diff before.jsonl all/eval/metrics.jsonl)"

# ---- a checkpoint deleted while the evaluator reads it ----
rm -rf all/eval
CTRAIN_FOLLOW_PAUSE=$PWD/all.pause "$ctrain" eval all --follow >del.out 2>del.err &
pid=$!
bg_pid=$pid
n=0
while kill -0 "$pid" 2>/dev/null; do
    if [[ -f all.pause ]]; then
        n=$((n + 1))
        # as retention deletes: renamed aside, then removed
        if [[ $n == 4 ]]; then
            mv all/checkpoints/step-00000012 all/checkpoints/step-00000012.del.tmp
            rm -rf all/checkpoints/step-00000012.del.tmp
        fi
        rm -f all.pause
    fi
    sleep 0.02
done
wait "$pid"
rc=$?
bg_pid=
why=""
[[ $rc == 0 ]] || why+="exit $rc; "
grep -q "skipped step-00000012: deleted" del.err || why+="no note; "
[[ $(eval_steps all | tr '\n' ' ') == "3 6 9 15 18 21 24 27 30 " ]] ||
    why+="records: $(eval_steps all | tr '\n' ' '); "
verdict follow_should_skip_a_checkpoint_deleted_mid_read "${why:+$why$(tail_of del.err)}" || true

# a damaged checkpoint is skipped with a warning, the others scored, and the exit code says so
rm -rf all/eval
printf 'x' | dd of=all/checkpoints/step-00000021/model.safetensors bs=1 seek=100 conv=notrunc \
    2>/dev/null
expect follow_should_skip_a_damaged_checkpoint 1 "warning: skipped step-00000021: .*CRC" \
    "8 checkpoints evaluated, 1 skipped" -- timeout 60 "$ctrain" eval all --follow

# ---- a run that does not finish: --timeout ----
cp -r alone open
rm open/finished.json
start=$(date +%s)
expect follow_should_stop_after_the_timeout 0 "no new checkpoint for 1 s" \
    "2 checkpoints evaluated" -- timeout 60 "$ctrain" eval open --follow --timeout 1
[[ $(($(date +%s) - start)) -lt 20 ]] || fail follow_timeout_should_be_prompt "took too long"

# fit takes the mark away when it trains again (a run stopped by a signal has none), and puts
# it back at its new end
CTRAIN_VERIFY_CUT=term@31 "$ctrain" fit exp.yaml output_dir=alone trainer.max_steps=33 >more.fit 2>&1
rc=$?
[[ $rc == 143 && ! -e alone/finished.json ]] && ok fit_should_unmark_a_run_it_trains_again ||
    fail fit_should_unmark_a_run_it_trains_again "exit $rc; $(ls alone | tr '\n' ' ')"
"$ctrain" fit exp.yaml output_dir=alone trainer.max_steps=33 >>more.fit 2>&1
[[ $("$jsonq" step alone/finished.json 2>&1) == 33 ]] && ok fit_should_mark_its_new_end ||
    fail fit_should_mark_its_new_end "$(cat alone/finished.json 2>&1) $(tail_of more.fit)"

# ---- usage ----
expect follow_should_refuse_a_checkpoint 2 "takes no --checkpoint" -- \
    "$ctrain" eval alone --follow --checkpoint latest
expect follow_timeout_needs_follow 2 "--timeout goes with --follow" -- \
    "$ctrain" eval alone --timeout 3
expect follow_should_refuse_a_bad_timeout 2 "--timeout: expected seconds >= 0, got 'soon'" -- \
    "$ctrain" eval alone --follow --timeout soon
expect follow_should_refuse_an_unknown_split 2 "'train' is not an evaluation split.*valid" -- \
    "$ctrain" eval alone --follow --split train
expect eval_should_refuse_an_empty_split 2 "--split: '' is not an evaluation split.*valid" -- \
    "$ctrain" eval alone --checkpoint latest --split ''
expect follow_should_refuse_a_missing_run 2 "nowhere" -- "$ctrain" eval nowhere --follow
expect follow_should_refuse_a_bad_poll_setting 2 "CTRAIN_FOLLOW_POLL='fast'" -- \
    env CTRAIN_FOLLOW_POLL=fast "$ctrain" eval alone --follow
expect fit_should_refuse_follow 2 "options of eval" -- "$ctrain" fit exp.yaml --follow
mkdir -p second/eval
cp alone/config.yaml second/
exec 9>second/eval/.lock
flock -n 9
expect follow_should_refuse_a_second_evaluator 2 "another .ctrain eval --follow. is evaluating" -- \
    "$ctrain" eval second --follow
exec 9>&-
expect eval_split_should_score_only_those_splits 0 "valid \(step 33\)" -- \
    "$ctrain" eval alone --checkpoint latest --split valid

echo "follow.sh: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
