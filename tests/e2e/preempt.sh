#!/usr/bin/env bash
# preempt.sh - Slurm preemption end to end, with a stand-in `scontrol` on PATH that records its
# arguments and a fake SLURM_* environment: trainer.preempt_signal (SIGUSR1) sent to a running
# fit saves one checkpoint and, under Slurm (trainer.requeue: auto), has rank 0 run
# `scontrol requeue JOB` (an array task's ARRAY_TASK) and exit 75; without Slurm, with
# requeue false, or with scontrol missing or failing it exits 143 as for SIGTERM, saying why;
# the run resumes from the checkpoint. With MPIRUN, the same for 2 ranks where the signal
# reaches rank 1 only: one requeue, by rank 0.
#     usage: preempt.sh PATH/TO/ctrain [PATH/TO/mpirun]
# shellcheck source=tests/e2e/harness.sh
source "$(dirname "$(realpath "$0")")/harness.sh"
ctrain=$(realpath "$1")
mpirun=${2:+$(command -v "$2")}
examples=$(realpath "$(dirname "$(realpath "$0")")/../../examples")
enter_workdir preempt
mkdir -p bin
cat >bin/scontrol <<'SH'
#!/bin/sh
echo "$*" >>"$SCONTROL_CALLS"
exit "${SCONTROL_EXIT:-0}"
SH
chmod +x bin/scontrol
export SCONTROL_CALLS=$work/calls
stub_path=$work/bin:$PATH
# the same PATH without any scontrol (the stand-in's folder, or a real one, left out)
bare_path=$(tr ':' '\n' <<<"$PATH" | while read -r d; do [[ -x $d/scontrol ]] || printf '%s:' "$d"; done)
bare_path=${bare_path%:}
unset SLURM_JOB_ID SLURM_ARRAY_JOB_ID SLURM_ARRAY_TASK_ID

cat >tiny.yaml <<'YAML'
seed: 1
threads: 1
data:
  train: {type: synthetic, kind: blobs, n: 20000, features: 8, classes: 4, seed: 3}
  batch_size: 16
model: {type: mlp, hidden: [32]}
optimizer: {type: adam, lr: 0.01}
scheduler: {type: cosine, t_max: 1000000}
trainer: {max_epochs: 100000}
logging: {progress: plain, interval_seconds: 0.2}
YAML

# signal_fit SIG DIR ENV... [-- OVERRIDE...]: `ctrain fit tiny.yaml output_dir=DIR OVERRIDE...`
# (the command in the array fit_cmd) started with the environment ENV, sent SIG once it
# trains (to the process whose pid victim_of prints, default the fit itself); its exit code in
# $rc, the step it stopped at in $step, the checkpoint `latest` names in $latest
fit_cmd=("$ctrain" fit tiny.yaml)
victim_of() { echo "$1"; }
signal_fit() {
    local sig=$1 dir=$2 vars=()
    shift 2
    while [[ $# -gt 0 && $1 != "--" ]]; do
        vars+=("$1")
        shift
    done
    [[ $# -gt 0 ]] && shift
    rm -f "$SCONTROL_CALLS" out
    env "${vars[@]}" "${fit_cmd[@]}" output_dir="$dir" "$@" >out 2>&1 &
    bg_pid=$!
    for _ in $(seq 300); do grep -q '^train epoch' out 2>/dev/null && break; sleep 0.1; done
    local v
    v=$(victim_of "$bg_pid" "$dir")
    [[ -n $v ]] && kill "-$sig" "$v"
    # a signalled fit of this model stops within a second; 15 s each keeps a regression that
    # stops none from running past the test's limit with jobs left behind
    wait_gone "$bg_pid" 15
    if [[ -z $ended ]]; then # the signal did not stop it: the check fails on this rc
        end_job "$bg_pid" "$dir"
        rc="still running 15 s after SIG$sig"
    fi
    bg_pid=
    step=$(cat out "$dir/log.txt" 2>/dev/null | grep -oE '^stopped by .* at step [0-9]+' | head -n 1 |
        grep -oE '[0-9]+$')
    latest=$(head -n 1 "$dir/checkpoints/latest" 2>/dev/null)
}
# check NAME RC CALLS PATTERN: the last fit exited RC (a number, or alternatives: 75|0), saved the checkpoint of the step it
# stopped at, called scontrol with CALLS (lines; "" for none), and said PATTERN
check() {
    local calls
    calls=$(cat "$SCONTROL_CALLS" 2>/dev/null)
    if [[ ! $rc =~ ^($2)$ ]]; then
        fail "$1" "exit $rc, expected $2: $(tail_of out)"
    elif [[ -z $step || $latest != "$(printf 'step-%08d' "$step")" ]]; then
        fail "$1" "stopped at step '${step}', latest is '$latest': $(tail_of out)"
    elif [[ $calls != "$3" ]]; then
        fail "$1" "scontrol called with '$calls', expected '$3'"
    elif ! grep -qE -- "$4" out; then
        fail "$1" "output lacks /$4/: $(tail_of out)"
    else
        ok "$1"
    fi
}

if [[ -z $mpirun ]]; then
    # ---- one process ----
    signal_fit USR1 runs/a PATH="$stub_path" SLURM_JOB_ID=4242
    check preempt_should_save_and_requeue_the_slurm_job 75 "requeue 4242" \
        "requeued Slurm job 4242 \\(scontrol requeue 4242\\)"
    stopped_at=$step
    # the requeued job starts again: the same command resumes where it stopped
    env PATH="$stub_path" SLURM_JOB_ID=4242 "$ctrain" fit tiny.yaml output_dir=runs/a \
        trainer.max_steps=$((stopped_at + 3)) >out 2>&1
    rc=$?
    if [[ $rc -eq 0 ]] && grep -q "resumed from .*step-$(printf '%08d' "$stopped_at")" out &&
        grep -q "^done: $((stopped_at + 3)) steps" out; then
        ok preempt_should_resume_from_its_checkpoint
    else
        fail preempt_should_resume_from_its_checkpoint "exit $rc: $(tail_of out)"
    fi

    signal_fit USR1 runs/b PATH="$stub_path" SLURM_JOB_ID=99 SLURM_ARRAY_JOB_ID=90 \
        SLURM_ARRAY_TASK_ID=7
    check preempt_should_requeue_an_array_task 75 "requeue 90_7" "requeued Slurm job 90_7"

    signal_fit USR1 runs/c PATH="$bare_path" SLURM_JOB_ID=4242
    check preempt_should_say_when_scontrol_is_missing 143 "" \
        "warning: trainer.requeue: scontrol is not on PATH: Slurm job 4242 is not requeued"

    signal_fit USR1 runs/d PATH="$stub_path" SLURM_JOB_ID=4242 SCONTROL_EXIT=1
    check preempt_should_say_when_scontrol_fails 143 "requeue 4242" \
        "scontrol requeue 4242 exited 1: the job is not requeued"

    signal_fit USR1 runs/e PATH="$stub_path"
    check preempt_should_not_requeue_outside_slurm 143 "" "stopped by SIGUSR1 at step"

    signal_fit USR2 runs/f PATH="$stub_path" SLURM_JOB_ID=5 -- \
        trainer.preempt_signal=USR2 trainer.requeue=false
    check preempt_should_take_usr2_and_requeue_false 143 "" "stopped by SIGUSR2 at step"
else
    # ---- 2 ranks, the signal to rank 1 only ----
    mpi_launch "$mpirun"
    launch+=(-np 2)
    fit_cmd=("${launch[@]}" "$ctrain" fit tiny.yaml)
    # the pid of rank 1 of the job training into DIR
    victim_of() { rank_pid 1 "$2"; }
    signal_fit USR1 runs/m PATH="$stub_path" SLURM_JOB_ID=99 SLURM_ARRAY_JOB_ID=90 \
        SLURM_ARRAY_TASK_ID=7
    check preempt_one_rank_should_requeue_once_from_rank_0 75 "requeue 90_7" \
        "requeued Slurm job 90_7"
    stopped_at=$step
    env PATH="$stub_path" SLURM_JOB_ID=99 "${launch[@]}" "$ctrain" fit tiny.yaml \
        output_dir=runs/m trainer.max_steps=$((stopped_at + 3)) >out 2>&1
    rc=$?
    if [[ $rc -eq 0 ]] && grep -q "resumed from .*step-$(printf '%08d' "$stopped_at")" out &&
        grep -q "^done: $((stopped_at + 3)) steps" out; then
        ok preempt_one_rank_should_resume_from_its_checkpoint
    else
        fail preempt_one_rank_should_resume_from_its_checkpoint "exit $rc: $(tail_of out)"
    fi

    # ---- examples/slurm/one_node.sbatch as Slurm runs it, its USR1 to the script alone (B:) ----
    ln -s "$ctrain" bin/ctrain
    printf '#!/bin/sh\nexec' >bin/mpirun
    printf ' %q' "${launch[@]:0:${#launch[@]}-2}" >>bin/mpirun
    printf ' "$@"\n' >>bin/mpirun
    chmod +x bin/mpirun
    victim_of() { echo "$1"; }
    fit_cmd=(bash "$examples/slurm/one_node.sbatch" tiny.yaml)
    signal_fit USR1 runs/s PATH="$stub_path" SLURM_JOB_ID=555 SLURM_NTASKS=2 \
        SLURM_CPUS_PER_TASK=1 -- trainer.max_epochs=100000
    # (MPICH's mpiexec, signalled itself, passes SIGUSR1 on to the ranks, but then exits with
    # rank 0's code or with 0, as it happens: the requeue is made all the same)
    want=75
    "$mpirun" --version 2>&1 | grep -qE "Open MPI|OpenRTE" || want="75|0"
    check preempt_sbatch_example_should_requeue "$want" "requeue 555" "requeued Slurm job 555"
fi

echo "preempt: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
