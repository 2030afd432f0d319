#!/usr/bin/env bash
# End-to-end test of data-parallel training from the command line: `ctrain fit` under mpirun
# with 2 and 3 processes on a tiny synthetic experiment. Checks that rank 0 alone writes, that a
# resume is bit-exact, that a resume with another number of processes is refused unless
# allowed, that a configuration error, a killed rank and a stopped one (the collective timeout)
# end the job with a message naming the cause in bounded time, and that SIGTERM to the job
# saves a checkpoint.
#     usage: mpi.sh PATH/TO/ctrain PATH/TO/mpirun
# Prints "ok   NAME" or "FAIL NAME: WHY" per check and "mpi: N passed, M failed".
set -uo pipefail
# shellcheck source=tests/e2e/harness.sh
source "$(dirname "$(realpath "$0")")/harness.sh"

if [[ $# -ne 2 ]]; then
    echo "usage: $0 CTRAIN MPIRUN" >&2
    exit 2
fi
ctrain=$(realpath "$1")
mpirun=$2
mpi_launch "$mpirun"
enter_workdir mpi

# run NP ARGS...: ctrain fit under mpirun with NP processes; output in out, exit code in $rc
run() {
    local np=$1
    shift
    "${launch[@]}" -np "$np" "$ctrain" fit "$@" >out 2>&1
    rc=$?
}

cat >tiny.yaml <<'YAML'
seed: 1
threads: 1
data:
  train: {type: synthetic, kind: blobs, n: 2000, features: 8, classes: 4, seed: 3}
  valid: {split: 0.2}
  test: {type: synthetic, kind: blobs, n: 501, features: 8, classes: 4, seed: 3}
  batch_size: 16
model: {type: mlp, hidden: [32]}
optimizer: {type: adam, lr: 0.01}
scheduler: {type: cosine, t_max: 300}
trainer: {max_epochs: 3}
checkpoint: {monitor: valid/acc}
logging: {progress: plain, interval_seconds: 0.2}
YAML

# ---- one run: rank 0 writes, the others say nothing ----
run 2 tiny.yaml output_dir=runs/a
if [[ $rc -ne 0 ]]; then
    fail fit_np2 "exit $rc: $(tail_of out)"
elif ! grep -q "on 2 processes (.*global batch 32.*, optimizer update sharded)" out; then
    fail fit_np2 "no 'on 2 processes ... global batch 32 ... optimizer update sharded' line: \
$(tail_of out)"
elif ! grep -qE "^ranks: 0 pid [0-9]+ on .+, 1 pid [0-9]+ on .+" out; then
    fail fit_np2 "no 'ranks: 0 pid N on HOST, 1 pid N on HOST' line: $(tail_of out)"
elif [[ $(grep -c '^done:' out) -ne 1 ]]; then
    fail fit_np2 "expected one 'done:' line (rank 0's): $(tail_of out)"
elif [[ $(records runs/a/metrics.jsonl | sort | uniq -d | wc -l) -ne 0 ]]; then
    fail fit_np2 "metrics.jsonl holds a record twice"
elif ! grep -q '"test/acc"' runs/a/metrics.jsonl || [[ ! -s runs/a/log.txt ]]; then
    fail fit_np2 "metrics.jsonl without test/acc, or no log.txt"
else
    ok fit_np2
fi
# 3 ranks split 1600 training samples into 533 each (one dropped) and 501 test samples into
# 167 each: the final test record counts every one of them (the confusion matrix's total)
run 3 tiny.yaml output_dir=runs/c "metrics.test=[accuracy,{type: confusion}]"
total=$(grep '"test/acc"' runs/c/metrics.jsonl 2>/dev/null | tail -1 |
    grep -oE '"test/confusion/[0-9]+/[0-9]+":[0-9.e+]+' | awk -F: '{s += $2} END {print s + 0}')
if [[ $rc -ne 0 ]]; then
    fail fit_np3 "exit $rc: $(tail_of out)"
elif ! grep -q "533 training samples each" out; then
    fail fit_np3 "expected 533 samples per rank: $(tail_of out)"
elif [[ $total -ne 501 ]]; then
    fail fit_np3 "the test confusion matrix counts $total samples, expected 501"
else
    ok fit_np3
fi

# ---- resume: 2 epochs, then the third, equals 3 epochs at once, bit for bit ----
run 2 tiny.yaml output_dir=runs/b trainer.max_epochs=2 logging.progress=none
rc1=$rc
run 2 tiny.yaml output_dir=runs/b logging.progress=none
a=runs/a/checkpoints/$(head -n1 runs/a/checkpoints/latest 2>/dev/null)
b=runs/b/checkpoints/$(head -n1 runs/b/checkpoints/latest 2>/dev/null)
if [[ $rc1 -ne 0 || $rc -ne 0 ]]; then
    fail resume_bit_exact "exit $rc1 then $rc: $(tail_of out)"
elif [[ ${a##*/} != "${b##*/}" || ! -d $a ]]; then
    fail resume_bit_exact "latest is $a in one run and $b in the resumed one"
elif ! cmp -s "$a/model.safetensors" "$b/model.safetensors" ||
    ! cmp -s "$a/optimizer.safetensors" "$b/optimizer.safetensors"; then
    fail resume_bit_exact "the weights or optimizer state of $b differ from $a"
elif ! grep -q '"world_size": *2' "$b/state.json" ||
    [[ $(grep -o '"stream"' "$b/state.json" | wc -l) -ne 3 ]]; then
    fail resume_bit_exact "state.json does not record world_size 2 and each rank's stream"
else
    ok resume_bit_exact
fi

# ---- a finished run asked again: nothing trained, its final test not repeated ----
tests_before=$(grep -c '"test/acc"' runs/a/metrics.jsonl)
run 2 tiny.yaml output_dir=runs/a logging.progress=none
if [[ $rc -eq 0 ]] && grep -q "is complete at step" out &&
    [[ $(grep -c '"test/acc"' runs/a/metrics.jsonl) -eq $tests_before ]]; then
    ok finished_run_again
else
    fail finished_run_again "exit $rc, test records $tests_before -> \
$(grep -c '"test/acc"' runs/a/metrics.jsonl): $(tail_of out)"
fi

# ---- another number of processes: refused, unless allowed ----
run 3 tiny.yaml output_dir=runs/b trainer.max_epochs=4 logging.progress=none
if [[ $rc -eq 2 ]] && grep -q "written by a run of 2 processes, and this run has 3" out; then
    ok world_size_change_refused
else
    fail world_size_change_refused "exit $rc: $(tail_of out)"
fi
run 3 tiny.yaml output_dir=runs/b trainer.max_epochs=4 logging.progress=none \
    trainer.allow_world_size_change=true
if [[ $rc -eq 0 ]] && grep -q "resumed by 3" out && grep -q '^done: ' out &&
    grep -q '"world_size": *3' "runs/b/checkpoints/$(head -n1 runs/b/checkpoints/latest)/state.json"; then
    ok world_size_change_allowed
else
    fail world_size_change_allowed "exit $rc: $(tail_of out)"
fi

# ---- failures end the whole job ----
run 2 tiny.yaml output_dir=runs/e optimizer.lr=abc
if [[ $rc -eq 2 ]] && grep -q "key 'optimizer.lr': expected a number" out; then
    ok config_error_exit_2
else
    fail config_error_exit_2 "exit $rc: $(tail_of out)"
fi

# a sharded update insisted on where a handler needs the whole averaged gradient
run 2 tiny.yaml output_dir=runs/h trainer.shard_optimizer=always logging.tensorboard=true \
    logging.histogram_every=1
if [[ $rc -eq 2 ]] && grep -q "shard_optimizer is 'always', but .*gradient histograms" out; then
    ok shard_always_refused
else
    fail shard_always_refused "exit $rc: $(tail_of out)"
fi

# no shared windows (Open MPI without its osc/sm component; MPICH has no such switch): `auto`
# says so and all-reduces instead, and ends with the sharded run's weights and optimizer
# state, bit for bit (2 ranks: the same rank-order sum)
if "$mpirun" --version 2>&1 | grep -qE "Open MPI|OpenRTE"; then
    "${launch[@]}" --mca osc ^sm -np 2 "$ctrain" fit tiny.yaml output_dir=runs/n \
        logging.progress=none >out 2>&1
    rc=$?
    a=runs/a/checkpoints/$(head -n1 runs/a/checkpoints/latest 2>/dev/null)
    n=runs/n/checkpoints/$(head -n1 runs/n/checkpoints/latest 2>/dev/null)
    if [[ $rc -eq 0 ]] && grep -q "no shared memory for the sharded update.*all-reducing" out &&
        [[ ${a##*/} == "${n##*/}" ]] && cmp -s "$a/model.safetensors" "$n/model.safetensors" &&
        cmp -s "$a/optimizer.safetensors" "$n/optimizer.safetensors"; then
        ok shard_fallback
    else
        fail shard_fallback "exit $rc, $a vs $n: $(tail_of out)"
    fi
fi

long=(tiny.yaml trainer.max_epochs=100000 "data.train={type: synthetic, kind: blobs, n: 20000,
features: 8, classes: 4, seed: 3}" scheduler.t_max=1000000)
"${launch[@]}" -np 2 "$ctrain" fit "${long[@]}" output_dir=runs/k >out 2>&1 &
bg_pid=$!
for _ in $(seq 200); do grep -q '^train epoch' out && break; sleep 0.1; done
victim=$(rank_pid 1 runs/k)
start=$SECONDS
[[ -n $victim ]] && kill -KILL "$victim"
wait_gone "$bg_pid"
[[ -z $ended ]] && end_job "$bg_pid" runs/k
bg_pid=
named=$(grep -oE 'PID [0-9]+ RUNNING AT' out | head -n1 | cut -d' ' -f2)
if [[ -z $victim ]]; then
    fail killed_rank_ends_job "found no rank 1 process to kill: $(tail_of out)"
elif [[ -z $ended ]]; then
    fail killed_rank_ends_job "the job still ran 60 s after rank 1 was killed"
elif [[ $rc -eq 0 ]]; then
    fail killed_rank_ends_job "exit 0 after rank 1 was killed: $(tail_of out)"
elif ! grep -qi "rank 1" out && ! { [[ -n $named ]] && grep -qE "^ranks: (.*, )?[0-9]+ pid $named on" out; }; then
    # Open MPI's launcher names the rank. MPICH's names a pid and host, and ctrain's "ranks:"
    # line says which rank that pid was; it names the first rank in rank order whose exit was
    # bad, and the ranks it kills while cleaning up exit with the victim's signal 9, so the pid
    # it names is rank 1's only when rank 0 got out first
    fail killed_rank_ends_job "no message naming rank 1 (pid $victim): $(tail_of out)"
else
    ok killed_rank_ends_job
    echo "     (the job ended $((SECONDS - start)) s after the kill)"
fi

# ---- a stopped rank: the collective timeout ends the job, naming the rank and the step ----
# stop_rank NP R: rank R of NP stopped (SIGSTOP) mid-training with a 3 s timeout. The lowest of
# the ranks left waiting says which rank did not arrive, once, and ends the job with exit 1;
# the stopped one (continued by the launcher to be killed) says nothing.
stop_rank() {
    local np=$1 r=$2 name=stopped_rank_$2_of_$1_ends_job dir=runs/s$1$2
    rm -f out # a line of the last job's must not pass for this one's
    "${launch[@]}" -np "$np" "$ctrain" fit "${long[@]}" output_dir=$dir \
        trainer.collective_timeout_s=3 >out 2>&1 &
    bg_pid=$!
    for _ in $(seq 200); do grep -q '^train epoch' out 2>/dev/null && break; sleep 0.1; done
    victim=$(rank_pid "$r" "$dir")
    [[ -n $victim ]] && kill -STOP "$victim"
    start=$SECONDS
    ended=
    for _ in $(seq 300); do
        if ! kill -0 "$bg_pid" 2>/dev/null; then
            ended=1
            break
        fi
        sleep 0.1
    done
    if [[ -z $ended ]]; then # hung: end the job and every rank of it
        [[ -n $victim ]] && kill -CONT "$victim"
        kill -TERM "$bg_pid"
        sleep 2
        for p in $(job_pids "$dir"); do kill -KILL "$p"; done
    fi
    wait "$bg_pid" 2>/dev/null
    rc=$?
    bg_pid=
    [[ -n $victim ]] && kill -CONT "$victim" 2>/dev/null
    local said
    said=$(grep -c 'collective timeout:' out)
    if [[ -z $victim ]]; then
        fail "$name" "found no rank $r process to stop: $(tail_of out)"
    elif [[ -z $ended ]]; then
        fail "$name" "the job still ran 30 s after rank $r was stopped: $(tail_of out)"
    elif [[ $rc -ne 1 ]]; then
        fail "$name" "exit $rc, expected 1: $(tail_of out)"
    elif ! grep -qE "collective timeout: rank $r did not arrive in 3 s at collective #[0-9]+ \(.+\) \
at step [0-9]+ \((training|evaluation|checkpoint)\), where ranks? [0-9, ]+ waited" out; then
        fail "$name" "no message naming rank $r and the step: $(tail_of out)"
    elif [[ $said -ne 1 ]]; then
        fail "$name" "$said 'collective timeout' messages, expected one: $(tail_of out)"
    else
        ok "$name"
        echo "     (the job ended $((SECONDS - start)) s after the stop)"
    fi
    local left
    left=$(job_pids "$dir")
    if [[ -n $left ]]; then
        fail "${name}_leftovers" "ranks still running: $(ps -o pid=,args= -p "${left//$'\n'/,}")"
        for p in $left; do kill -CONT "$p" && kill -KILL "$p"; done
    fi
}
stop_rank 2 1
stop_rank 3 0

# ---- SIGTERM to the launcher: every rank stops at the same step, one checkpoint ----
"${launch[@]}" -np 2 "$ctrain" fit "${long[@]}" output_dir=runs/t >out 2>&1 &
bg_pid=$!
for _ in $(seq 200); do grep -q '^train epoch' out && break; sleep 0.1; done
sleep 0.5
kill -TERM "$bg_pid"
wait "$bg_pid"
rc=$?
bg_pid=
# (Open MPI's mpirun stops forwarding the ranks' output once it is told to end the job: rank 0's
# last lines are in its log.txt, whether or not the terminal shows them)
step=$(cat out runs/t/log.txt 2>/dev/null | grep -oE 'stopped by SIGTERM at step [0-9]+' | head -n 1 |
    grep -oE '[0-9]+$')
if [[ -z $step ]]; then
    fail sigterm_saves "no 'stopped by SIGTERM at step N' (exit $rc): $(tail_of out runs/t/log.txt)"
elif [[ $(head -n1 runs/t/checkpoints/latest 2>/dev/null) != "$(printf 'step-%08d' "$step")" ]]; then
    fail sigterm_saves "latest is '$(head -n1 runs/t/checkpoints/latest 2>/dev/null)', expected step $step"
else
    ok sigterm_saves
fi

echo "mpi: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
