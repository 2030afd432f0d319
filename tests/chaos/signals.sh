#!/usr/bin/env bash
# signals.sh - SIGTERM, SIGINT or SIGHUP at random moments of a fit: it must stop at the end of
# its step with a checkpoint and the signal's exit code (143, 130, 129; 0 when the run ended
# first), and `ctrain fit` again must end exactly as a run never stopped.
#     usage: signals.sh PATH/TO/ctrain     (CHAOS_SCALE, CHAOS_SEED: common.sh)
# Last line: the counts of signals sent, stops, and resumes.
# shellcheck source=tests/chaos/common.sh
source "$(dirname "$(realpath "$0")")/common.sh"

# a longer run than the other chaos tests', and signals spread over the reference run's
# duration on this machine, so that most land before the end
longer=(trainer.max_epochs=10)
t0=$(date +%s%N)
reference ref "${longer[@]}"
run_ms=$((($(date +%s%N) - t0) / 1000000))
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
        "$CTRAIN" fit exp.yaml ++output_dir="$dir" "${longer[@]}" >>"$dir.log" 2>&1 &
        bg_pid=$!
        # once training has started (its first record): before, a stop signal still has its
        # default action (the run is only being set up)
        for _ in $(seq 400); do
            [[ -s $dir/metrics.jsonl ]] && break
            kill -0 "$bg_pid" 2>/dev/null || break
            sleep 0.025
        done
        sleep "$(rand_ms 0 $((run_ms * 3 / 4)))"
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
        finish "$dir" "${longer[@]}"
        break
    done
    resumes=$((resumes + $(grep -c 'resumed from' "$dir.log")))
    same_as_reference "SIG${sigs[$k]} $i: the resumed run equals the uninterrupted one" "$dir" ref
done
summary signals "$sent signals sent, $stopped stops with a checkpoint, $resumes resumes"
