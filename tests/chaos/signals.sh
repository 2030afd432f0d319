#!/usr/bin/env bash
# signals.sh - SIGTERM, SIGINT or SIGHUP at random moments of a fit: it must stop at the end of
# its step with a checkpoint and the signal's exit code (143, 130, 129; 0 when the run ended
# first), and `ctrain fit` again must end exactly as a run never stopped.
#     usage: signals.sh PATH/TO/ctrain     (CHAOS_SCALE, CHAOS_SEED: common.sh)
# Last line: the counts of signals sent, stops, and resumes.
# shellcheck source=tests/chaos/common.sh
source "$(dirname "$(realpath "$0")")/common.sh"

reference ref
sigs=(TERM INT HUP)
codes=(143 130 129)
sent=0
stopped=0
resumes=0
n=$((9 * SCALE))
for ((i = 0; i < n; i++)); do
    dir=run_$i
    k=$((i % 3))
    while :; do
        "$CTRAIN" fit exp.yaml ++output_dir="$dir" >>"$dir.log" 2>&1 &
        bg_pid=$!
        sleep "$(rand_ms 300 3000)"
        kill -s "${sigs[$k]}" "$bg_pid" 2>/dev/null && sent=$((sent + 1))
        wait "$bg_pid"
        rc=$?
        bg_pid=
        if [[ $rc -eq 0 ]]; then
            break
        elif [[ $rc -ne ${codes[$k]} ]]; then
            bad "SIG${sigs[$k]} $i" "exit $rc, expected ${codes[$k]}: $(tail_of "$dir.log")"
            break
        fi
        stopped=$((stopped + 1))
        grep -q "stopped by SIG${sigs[$k]} at step" "$dir.log" ||
            bad "SIG${sigs[$k]} $i" "no 'stopped by' line: $(tail_of "$dir.log")"
        finish "$dir"
        break
    done
    resumes=$((resumes + $(grep -c 'resumed from' "$dir.log")))
    same_as_reference "SIG${sigs[$k]} $i: the resumed run equals the uninterrupted one" "$dir" ref
done
summary signals "$sent signals sent, $stopped stops with a checkpoint, $resumes resumes"
