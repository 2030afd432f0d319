# harness.sh - what the end-to-end shell tests share, sourced by cli.sh and mpi.sh: a counted
# "ok NAME" / "FAIL NAME: WHY" report, the end of a command's output on one line for failure
# messages, and metrics.jsonl records without the fields that vary from run to run.
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
