# harness.sh - what the end-to-end shell tests share, sourced by cli.sh and mpi.sh: a temporary
# working directory, a counted "ok NAME" / "FAIL NAME: WHY" report, the end of a command's
# output on one line for failure messages, and metrics.jsonl records without the fields that
# vary from run to run.
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
}
leave_workdir() {
    [[ -n "$bg_pid" ]] && kill -KILL "$bg_pid" 2>/dev/null
    rm -rf "$work"
}
