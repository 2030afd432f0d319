#!/usr/bin/env bash
# End-to-end test of the parameter-server strategy (trainer.strategy: parameter_server) from the
# command line under mpirun: one server and one worker in synchronous rounds equal the
# single-process run bit for bit; two workers train and resume with the global step going on;
# two servers train; a killed worker ends the job naming the rank, and the run resumes from its
# last checkpoint; configuration errors exit 2 with their message.
#     usage: mpi_ps.sh PATH/TO/ctrain PATH/TO/mpirun
# Prints "ok   NAME" or "FAIL NAME: WHY" per check and "mpi_ps: N passed, M failed".
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
enter_workdir mpi_ps

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
trainer: {max_epochs: 2, strategy: parameter_server}
checkpoint: {monitor: valid/acc}
logging: {progress: plain, interval_seconds: 0.2}
YAML

# ---- 1 server, 1 worker, synchronous rounds: the single-process sync run, bit for bit ----
# 120 steps: across an epoch's end (100 steps), its evaluation and checkpoint
short=(trainer.max_steps=120 trainer.max_epochs=0)
"$ctrain" fit tiny.yaml "${short[@]}" trainer.strategy=sync output_dir=runs/one >out 2>&1
one=$?
run 2 tiny.yaml "${short[@]}" trainer.ps.max_staleness=0 output_dir=runs/ps1
"$ctrain" diff runs/one runs/ps1 >diff.txt 2>&1
if [[ $one -ne 0 || $rc -ne 0 ]]; then
    fail equals_sync "exit $one (one process) and $rc (parameter server): $(tail_of out)"
elif ! grep -q "7 of 7 tensors identical" diff.txt; then
    fail equals_sync "the checkpoints' tensors differ: $(cat diff.txt)"
elif [[ $(grep -c '^  state\.' diff.txt) -ne 2 ]] || ! grep -q '^  state.trainer.world_size' diff.txt ||
    ! grep -q '^  state.ranks' diff.txt; then
    # the world size and the table of each rank's position are the only differences
    fail equals_sync "state.json differs beyond world_size and ranks: $(cat diff.txt)"
elif ! grep -q "1 parameter server, 1 worker)" out; then
    fail equals_sync "no '1 parameter server, 1 worker' in the first line: $(tail_of out)"
else
    ok equals_sync
fi

# ---- 2 workers: the loss falls, the strategy's metrics are recorded, the report shows them ----
run 3 tiny.yaml trainer.max_steps=150 trainer.max_epochs=0 output_dir=runs/two
# the validation loss: the last training window can be one noisy batch of rank 0's
loss=$(grep '"valid/loss"' runs/two/metrics.jsonl 2>/dev/null | tail -1 |
    grep -oE '"valid/loss":[0-9.e+-]+' | cut -d: -f2)
if [[ $rc -ne 0 ]]; then
    fail two_workers "exit $rc: $(tail_of out)"
elif [[ -z $loss ]] || ! awk -v l="$loss" 'BEGIN { exit !(l < 0.6) }'; then
    fail two_workers "the last valid/loss is '$loss', expected below 0.6"
elif ! grep -q '"train/staleness_mean"' runs/two/metrics.jsonl ||
    ! grep -q '"train/staleness_max"' runs/two/metrics.jsonl ||
    ! grep -q '"train/pull_wait_ms"' runs/two/metrics.jsonl ||
    ! grep -q '"train/push_wait_ms"' runs/two/metrics.jsonl ||
    ! grep -q '"train/worker_share/1"' runs/two/metrics.jsonl; then
    fail two_workers "metrics.jsonl lacks the strategy's metrics: $(tail -1 runs/two/metrics.jsonl)"
elif ! grep -q "done: 150 steps" out; then
    fail two_workers "expected 'done: 150 steps' (max_steps counts global updates): $(tail_of out)"
elif ! "$ctrain" report runs/two >/dev/null 2>&1 || ! grep -q "staleness_mean" runs/two/report.html; then
    fail two_workers "ctrain report does not show train/staleness_mean"
else
    ok two_workers
fi

# ---- its checkpoint resumes: the global step goes on to the new limit ----
run 3 tiny.yaml trainer.max_steps=300 trainer.max_epochs=0 output_dir=runs/two
if [[ $rc -ne 0 ]]; then
    fail resume_two_workers "exit $rc: $(tail_of out)"
elif ! grep -q "resumed from .*step-00000150 (step 150" out || ! grep -q "done: 300 steps" out; then
    fail resume_two_workers "expected a resume at step 150 and 'done: 300 steps': $(tail_of out)"
elif ! "$ctrain" eval runs/two >eval.txt 2>&1; then
    fail resume_two_workers "ctrain eval on its checkpoint: $(tail_of eval.txt)"
else
    ok resume_two_workers
fi

# ---- 2 servers, bounded staleness, pulls every 2 steps ----
run 4 tiny.yaml trainer.ps.servers=2 trainer.ps.max_staleness=1 trainer.ps.pull_every=2 \
    trainer.max_steps=150 trainer.max_epochs=0 output_dir=runs/servers
if [[ $rc -ne 0 ]]; then
    fail two_servers "exit $rc: $(tail_of out)"
elif ! grep -q "2 parameter servers, 2 workers" out ||
    ! grep -qE '"test/acc":0\.[89]' runs/servers/metrics.jsonl; then
    fail two_servers "expected 2 servers, 2 workers and a test accuracy of 0.8 or more: \
$(tail_of out)"
else
    ok two_servers
fi

# ---- a killed worker ends the job, naming the rank; the run resumes from its checkpoint ----
long=(tiny.yaml trainer.max_epochs=100000 "data.train={type: synthetic, kind: blobs, n: 20000,
features: 8, classes: 4, seed: 3}" scheduler.t_max=1000000 checkpoint.save_every_steps=50)
# kill_worker DIR: a job of 3 training in DIR, worker 1 killed once it has a checkpoint
kill_worker() {
    "${launch[@]}" -np 3 "$ctrain" fit "${long[@]}" output_dir="$1" >out 2>&1 &
    bg_pid=$!
    for _ in $(seq 200); do [[ -e $1/checkpoints/latest ]] && break; sleep 0.1; done
    victim=$(rank_pid 1 "$1")
    start=$SECONDS
    [[ -n $victim ]] && kill -KILL "$victim"
    wait_gone "$bg_pid"
    [[ -z $ended ]] && end_job "$bg_pid" "$1"
    bg_pid=
}
dir=runs/k
kill_worker $dir
# MPICH's launcher names the first process it finds ended, and when it has already ended
# another rank by then (it kills them all at once), that one's pid: up to twice more (on a
# loaded machine it named another rank twice in a row)
for again in 2 3; do
    if [[ -n $victim ]] && grep -q "PID [0-9]* RUNNING AT" out && ! grep -q "PID $victim" out; then
        echo "     (the launcher named another process: once more)"
        dir=runs/k$again
        kill_worker $dir
    fi
done
if [[ -z $victim ]]; then
    fail killed_worker_ends_job "found no rank 1 process to kill: $(tail_of out)"
elif [[ -z $ended ]]; then
    fail killed_worker_ends_job "the job still ran 60 s after rank 1 was killed"
elif [[ $rc -eq 0 ]]; then
    fail killed_worker_ends_job "exit 0 after rank 1 was killed: $(tail_of out)"
elif ! grep -qi "rank 1" out && ! { grep -q "PID $victim" out && grep -q "ranks: .*1 pid $victim on" out; }; then
    fail killed_worker_ends_job "no message naming rank 1 (pid $victim): $(tail_of out)"
else
    ok killed_worker_ends_job
    echo "     (the job ended $((SECONDS - start)) s after the kill)"
fi
saved=$(head -n1 $dir/checkpoints/latest 2>/dev/null)
saved=$((10#${saved#step-}))
run 3 "${long[@]}" trainer.max_steps=$((saved + 20)) output_dir=$dir
if [[ $rc -ne 0 ]]; then
    fail resume_after_kill "exit $rc: $(tail_of out)"
elif ! grep -q "resumed from .*(step $saved," out || ! grep -q "done: $((saved + 20)) steps" out; then
    fail resume_after_kill "expected a resume at step $saved and 'done: $((saved + 20)) steps': \
$(tail_of out)"
else
    ok resume_after_kill
fi

# ---- configuration errors: exit 2 with the message ----
config_error() { # NAME NP EXPECTED ARGS...
    local name=$1 np=$2 expected=$3
    shift 3
    if [[ $np -eq 1 ]]; then
        "$ctrain" fit tiny.yaml "$@" output_dir=runs/err >out 2>&1
        rc=$?
    else
        run "$np" tiny.yaml "$@" output_dir=runs/err
    fi
    if [[ $rc -ne 2 ]]; then
        fail "$name" "exit $rc, expected 2: $(tail_of out)"
    elif ! grep -q "$expected" out; then
        fail "$name" "no '$expected': $(tail_of out)"
    else
        ok "$name"
    fi
}
config_error ps_one_process 1 "needs 2 processes or more"
config_error ps_all_servers 2 "trainer.ps.servers is 2; expected from 1 to 1" trainer.ps.servers=2
config_error ps_shard_always 2 "shard_optimizer 'always'" trainer.shard_optimizer=always
config_error ps_accum 2 "accum_steps above 1" trainer.accum_steps=2
config_error ps_rollback 2 "on_nonfinite rollback" trainer.on_nonfinite=rollback
config_error ps_empty_shard 3 "has no batch in its shard" data.batch_size=1000 data.drop_last=true

echo "mpi_ps: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
