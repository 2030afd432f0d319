# shellcheck shell=bash
# harness.sh - what the end-to-end shell tests share, sourced by cli.sh, hardening.sh and
# mpi.sh: a temporary working directory, a counted "ok NAME" / "FAIL NAME: WHY" report, a
# command's exit code and output checked against patterns (expect), the end of a command's
# output on one line for failure messages, and metrics.jsonl records without the fields that
# vary from run to run; for the MPI tests, the launcher, the pids of a job's ranks (this test's
# only), a wait for a job to end and the end of one that hangs.
passed=0
failed=0
ok() {
    echo "ok   $1"
    passed=$((passed + 1))
}
fail() {
    echo "FAIL $1: $2"
    failed=$((failed + 1))
}
tail_of() { cat "$@" 2>/dev/null | tail -c 600 | tr '\n' '|'; }
records() { sed -E 's/"time":[0-9.e+-]+,?//; s/,?"samples_per_sec":[0-9.e+-]+//' "$1"; }

# enter_workdir NAME: a new temporary directory becomes the current one; at exit it is removed,
# and the background job whose pid is in bg_pid (if any) is killed.
bg_pid=
enter_workdir() {
    work=$(mktemp -d "${TMPDIR:-/tmp}/ctrain-$1.XXXXXX")
    trap 'leave_workdir' EXIT
    cd "$work" || exit 1
    work=$(pwd -P) # as /proc/PID/cwd names it (job_pids)
}
leave_workdir() {
    [[ -n "$bg_pid" ]] && kill -KILL "$bg_pid" 2>/dev/null
    rm -rf "$work"
}

# verdict NAME WHY: ok when WHY is empty, else FAIL with WHY; returns whether it was ok.
verdict() {
    if [[ -z $2 ]]; then
        ok "$1"
    else
        fail "$1" "$2"
        return 1
    fi
}

# expect NAME RC [PATTERN ...] -- COMMAND ...
# Runs COMMAND (stdout into out, stderr into err) and checks its exit code and that its output
# (both streams) matches every extended regular expression PATTERN; a PATTERN that starts with
# '!' must not match.
expect() {
    local name=$1 want=$2
    shift 2
    local pats=()
    while [[ $# -gt 0 && $1 != "--" ]]; do
        pats+=("$1")
        shift
    done
    shift
    "$@" >out 2>err
    local rc=$?
    if [[ $rc -ne $want ]]; then
        fail "$name" "exit $rc, expected $want; output: $(tail_of out err)"
        return 1
    fi
    local p
    for p in "${pats[@]}"; do
        if [[ $p == '!'* ]]; then
            if grep -qE -- "${p:1}" out err; then
                fail "$name" "output matches /${p:1}/: $(tail_of out err)"
                return 1
            fi
        elif ! grep -qE -- "$p" out err; then
            fail "$name" "output lacks /$p/: $(tail_of out err)"
            return 1
        fi
    done
    ok "$name"
}

# job_pids DIR: the pids of the `$ctrain fit` processes training into DIR, counting only those
# run from this test's working directory: ctest runs several MPI tests at once, each with a
# job training into the same relative DIR (runs/k), and one test must never signal another's.
job_pids() {
    local p
    for p in $(pgrep -f "$ctrain fit .*output_dir=$1( |\$)"); do
        [[ $(readlink "/proc/$p/cwd" 2>/dev/null) == "$work" ]] && echo "$p"
    done
    return 0
}

# rank_pid R DIR: the pid of rank R of the `$ctrain fit` job training into DIR (Open MPI and
# MPICH put the rank in its environment), or nothing
rank_pid() {
    local p
    for p in $(job_pids "$2"); do
        if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null |
            grep -qx "OMPI_COMM_WORLD_RANK=$1\|PMI_RANK=$1"; then
            echo "$p"
        fi
    done
}

# wait_gone PID [SECONDS]: waits up to SECONDS (default 60) for the background process PID to
# end; its exit code in $rc, and $ended set to 1 when it ended in time (else rc is empty and
# the job still runs: end_job ends it)
wait_gone() {
    ended=
    rc=
    for _ in $(seq $((${2:-60} * 10))); do
        if ! kill -0 "$1" 2>/dev/null; then
            ended=1
            break
        fi
        sleep 0.1
    done
    if [[ -n $ended ]]; then
        wait "$1" 2>/dev/null
        rc=$?
    fi
}

# end_job PID DIR: ends a job that outlived its test (the launcher PID and every rank training
# into DIR), so that a failed check leaves nothing running past the test
end_job() {
    local p
    kill -KILL "$1" 2>/dev/null
    for p in $(job_pids "$2"); do kill -KILL "$p" 2>/dev/null; done
    wait "$1" 2>/dev/null
}

# mpi_launch MPIRUN: the launcher command for the MPI tests into the array `launch`. Open MPI
# refuses root without --allow-run-as-root and more ranks than cores without --oversubscribe
# (docs/distributed.md); MPICH's mpiexec needs neither.
mpi_launch() {
    launch=("$1")
    if "$1" --version 2>&1 | grep -qE "Open MPI|OpenRTE"; then
        launch+=(--allow-run-as-root --oversubscribe --mca btl self,vader)
    fi
}
