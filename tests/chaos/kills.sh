#!/usr/bin/env bash
# kills.sh - SIGKILL at random moments (start-up, steps, evaluations, checkpoint writes,
# retention deletions, pointer updates), then `ctrain fit` again until the run completes:
# every restart must resume from an intact checkpoint, and the final checkpoint, metrics.jsonl
# and metrics.csv must equal those of a run never interrupted. In f32 and in bf16.
#     usage: kills.sh PATH/TO/ctrain     (CHAOS_SCALE, CHAOS_SEED: common.sh)
# Last line: the counts of kills, kills that landed inside a save, resumes and runs.
# shellcheck source=tests/chaos/common.sh
source "$(dirname "$(realpath "$0")")/common.sh"

kills=0
in_save=0
resumes=0
runs=0
# tortured TAG TARGET OVERRIDES...: runs killed until TARGET kills have landed, each finished
# and compared with the uninterrupted reference
tortured() {
    local tag=$1 target=$2
    shift 2
    local t0 run_ms
    t0=$(date +%s%N)
    reference "ref_$tag" "$@"
    run_ms=$((($(date +%s%N) - t0) / 1000000)) # kills spread over a whole run on this machine
    local landed=0
    while [[ $landed -lt $target ]]; do
        runs=$((runs + 1))
        local dir="run_${tag}_$runs" rc
        while :; do
            "$CTRAIN" fit exp.yaml ++output_dir="$dir" "$@" >>"$dir.log" 2>&1 &
            bg_pid=$!
            sleep "$(rand_ms 20 $((run_ms > 40 ? run_ms : 40)))"
            if kill -KILL "$bg_pid" 2>/dev/null; then
                wait "$bg_pid" 2>/dev/null
                bg_pid=
                landed=$((landed + 1))
                compgen -G "$dir/checkpoints/*.tmp" >/dev/null && in_save=$((in_save + 1))
                [[ $landed -lt $target ]] && continue
                finish "$dir" "$@"
            else
                wait "$bg_pid"
                rc=$?
                bg_pid=
                [[ $rc -eq 0 ]] || bad "$tag: fit after a kill" "exit $rc: $(tail_of "$dir.log")"
            fi
            break
        done
        resumes=$((resumes + $(grep -c 'resumed from' "$dir.log")))
        same_as_reference "$tag run $runs: equals the uninterrupted run" "$dir" "ref_$tag"
    done
    kills=$((kills + landed))
}

tortured f32 $((24 * SCALE))
tortured bf16 $((8 * SCALE)) trainer.precision=bf16
[[ "$(final_sums ref_f32)" != "$(final_sums ref_bf16)" ]] && ok "bf16 trained other weights than f32" ||
    bad "bf16" "the bf16 run's weights equal the f32 run's: the setting did nothing"
summary kills "$kills kills ($in_save inside a save), $resumes resumes, $runs runs"
