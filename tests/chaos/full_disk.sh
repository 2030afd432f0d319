#!/usr/bin/env bash
# full_disk.sh - writes that fail mid-run: a file size limit (RLIMIT_FSIZE, `ulimit -f`) at
# random sizes, which a checkpoint file or a record file (metrics.jsonl, metrics.csv, log.txt)
# outgrows, and a full disk (a small tmpfs, where mounting one is allowed). The run must end
# with exit 1 and a message naming the file and the reason, never killed by SIGXFSZ, with its
# last checkpoint intact; resumed where the space is, it must end exactly as a run that never
# ran short.
#     usage: full_disk.sh PATH/TO/ctrain     (CHAOS_SCALE, CHAOS_SEED: common.sh)
# Last line: the counts of runs cut short by a limit and by a full disk, by the file they hit.
# shellcheck source=tests/chaos/common.sh
source "$(dirname "$(realpath "$0")")/common.sh"

reference ref
cut=0
full=0
declare -A hit=()
# judge NAME RC OUT RUN REASON REF [OVERRIDES]: a run that ran short (or not) is reported, then
# finished and compared with REF
judge() {
    local name=$1 rc=$2 out=$3 run=$4 reason=$5 ref=$6
    shift 6
    if [[ $rc -eq 1 ]]; then
        local file
        file=$(grep -oE "[^ ]*(model|ema|optimizer)\.safetensors(\.tmp)?|[^ ]*(state\.json|latest|best)(\.tmp)?|[^ /]*metrics\.(jsonl|csv)|[^ /]*log\.txt|[^ /]*finished\.json(\.tmp)?" "$out" | head -n 1)
        if ! grep -q "$reason" "$out" || [[ -z $file ]]; then
            bad "$name" "exit 1 without naming a file and '$reason': $(tail_of "$out")"
            return
        fi
        file=${file##*/}
        file=${file%.tmp}
        hit[$file]=$((${hit[$file]:-0} + 1))
        [[ $reason == "File too large" ]] && cut=$((cut + 1)) || full=$((full + 1))
        # what a failed save leaves is debris the next fit clears: every checkpoint verifies
        "$CTRAIN" inspect "$run" >inspect.out 2>&1
        if grep -q 'step-[0-9]*: DAMAGED' inspect.out; then
            bad "$name" "a checkpoint is damaged: $(grep DAMAGED inspect.out | head -n 2)"
            return
        fi
    elif [[ $rc -ne 0 ]]; then
        bad "$name" "exit $rc (153 is SIGXFSZ): $(tail_of "$out")"
        return
    fi
    finish "$run" "$@" && same_as_reference "$name: resumed, equals the run that never ran short" "$run" "$ref"
}

# file size limits up to 700 KiB (the Adam moments of one checkpoint, ~660 KiB, are the
# largest file), which a checkpoint file reaches first
n=$((4 * SCALE))
for ((i = 0; i < n; i++)); do
    kb=$(rand 2 700)
    bash -c "ulimit -f $kb && exec '$CTRAIN' fit exp.yaml ++output_dir=fsize_$i" >"fsize_$i.out" 2>&1
    judge "limit ${kb} KiB" $? "fsize_$i.out" "fsize_$i" "File too large" ref
done
# and limits of 2 to 5 KiB with a record every step and checkpoints at the epochs' ends only:
# a record file (metrics.csv, metrics.jsonl, log.txt) reaches them first
records=(trainer.steps_per_loop=1 checkpoint.save_every_steps=0)
reference ref_records "${records[@]}"
for ((i = 0; i < n; i++)); do
    kb=$(rand 2 5)
    bash -c "ulimit -f $kb && exec '$CTRAIN' fit exp.yaml ++output_dir=rsize_$i ${records[*]}" \
        >"rsize_$i.out" 2>&1
    judge "limit ${kb} KiB, records" $? "rsize_$i.out" "rsize_$i" "File too large" ref_records \
        "${records[@]}"
done

# a full disk: a tmpfs of 1 to 5 MB (a checkpoint is ~1.3 MB) in a mount namespace of its own
if unshare -rm true 2>/dev/null; then
    n=$((3 * SCALE))
    for ((i = 0; i < n; i++)); do
        size=$(rand 1000 5000)
        mkdir -p "disk_$i" "full_$i"
        unshare -rm bash -c "mount -t tmpfs -o size=${size}k tmpfs disk_$i || exit 99
            '$CTRAIN' fit exp.yaml ++output_dir=disk_$i/run >full_$i.out 2>&1
            rc=\$?
            cp -a disk_$i/run/. full_$i/
            exit \$rc"
        rc=$?
        [[ $rc -eq 99 ]] && { echo "     (tmpfs: cannot mount one here)"; break; }
        # (the copy's config.yaml names the tmpfs as output_dir, which a resume may change)
        judge "disk of ${size} KB" "$rc" "full_$i.out" "full_$i" "No space left on device" ref
    done
else
    echo "     (tmpfs: skipped, no mount namespace here: $(unshare -rm true 2>&1 | head -n 1))"
fi
counts=""
for f in "${!hit[@]}"; do counts+=" $f ${hit[$f]},"; done
summary full_disk "$cut cut by a size limit, $full by a full disk; files hit:${counts%,}"
