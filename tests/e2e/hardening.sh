#!/usr/bin/env bash
# hardening.sh - what a careless or hostile user does to a run, one case at a time, on the built
# ctrain: a second fit or a --restart against a live run (with its .lock deleted too), a run
# directory deleted under a run, a folder of the user's own files as output_dir, full disks
# and file size limits on the record files, SIGHUP and a closed pipe, damaged checkpoint
# pointers in inspect, fit and eval.
#     usage: hardening.sh PATH/TO/ctrain
# Prints "ok NAME" or "FAIL NAME: WHY" per check and a count on its last line; exits non-zero
# when any check failed. Everything happens in a temporary directory.
set -uo pipefail
# shellcheck source=tests/e2e/harness.sh
source "$(dirname "$(realpath "$0")")/harness.sh"
[[ $# -eq 1 ]] || { echo "usage: $0 CTRAIN" >&2; exit 2; }
ctrain=$(realpath "$1")
enter_workdir hardening

cat >tiny.yaml <<'YAML'
seed: 1
data:
  train: {type: synthetic, kind: blobs, n: 2000, features: 8, classes: 4, seed: 3}
  valid: {split: 0.2}
  batch_size: 32
model: {type: mlp, hidden: [32]}
optimizer: {type: sgd, lr: 0.1, momentum: 0.9}
trainer: {max_epochs: 3}
metrics:
  valid: [accuracy]
checkpoint: {monitor: valid/acc}
logging: {progress: none}
YAML
# a run that lasts until stopped: 50 epochs of 200000 samples, progress lines to wait for
long=(data.train.n=200000 trainer.max_epochs=50 ++logging.progress=plain ++logging.interval=0.05)


# start_long DIR [--nohup] [ARGS]: a long fit in the background (pid in bg_pid), once it trains
# (--nohup: started with SIGHUP ignored, as nohup(1) starts it)
start_long() {
    local dir=$1 hup=
    shift
    [[ ${1:-} == --nohup ]] && hup="trap '' HUP;" && shift
    bash -c "$hup exec \"\$0\" \"\$@\"" "$ctrain" fit tiny.yaml ++output_dir="$dir" "${long[@]}" "$@" \
        >"$dir.out" 2>&1 &
    bg_pid=$!
    for _ in $(seq 600); do
        grep -q '^train epoch' "$dir.out" 2>/dev/null && return 0
        kill -0 "$bg_pid" 2>/dev/null || break
        sleep 0.05
    done
    echo "the long run did not start: $(tail_of "$dir.out")"
    return 1
}
# stop_long: SIGTERM to it and its exit code in stopped_rc
stop_long() {
    kill -TERM "$bg_pid" 2>/dev/null
    wait "$bg_pid"
    stopped_rc=$?
    bg_pid=
}

# ---- one fit per run directory: the lock is the folder's, --restart takes it first ----

if start_long live; then
    host=$(hostname)
    expect second_fit_refused 2 "live is in use by another ctrain fit \(pid $bg_pid on $host" -- \
        "$ctrain" fit tiny.yaml ++output_dir=live "${long[@]}"
    expect restart_of_a_live_run_refused 2 "in use by another ctrain fit \(pid $bg_pid" -- \
        "$ctrain" fit tiny.yaml ++output_dir=live "${long[@]}" --restart
    verdict restart_refused_moves_nothing "$(ls -d live.old-* 2>/dev/null)"
    rm -f live/.lock
    expect lock_survives_deleting_lock_file 2 "live is in use by another ctrain fit" \
        "its \.lock does not name it yet, or was deleted" -- \
        "$ctrain" fit tiny.yaml ++output_dir=live "${long[@]}" --restart
    stop_long
    why=
    [[ $stopped_rc -eq 143 ]] || why="the live run ended with $stopped_rc, expected 143; "
    grep -q 'stopped by SIGTERM' live.out || why+="no 'stopped by SIGTERM'; "
    "$ctrain" inspect live >/dev/null 2>&1 || why+="inspect finds the live run damaged; "
    verdict live_run_unharmed_by_the_refused_ones "$why"
    # once it has ended, the lock is free (released by the kernel with the process)
    expect lock_released_at_exit 0 'previous run is now [^ ]*live\.old-' -- \
        "$ctrain" fit tiny.yaml ++output_dir=live --restart
else
    fail second_fit_refused "the long run did not start"
fi

# SIGKILL releases the lock too
if start_long killed; then
    kill -KILL "$bg_pid"
    wait "$bg_pid" 2>/dev/null
    bg_pid=
    expect lock_released_by_sigkill 0 'done: 1 step,' -- "$ctrain" fit tiny.yaml \
        ++output_dir=killed "${long[@]}" trainer.max_steps=1
fi

# ---- output_dir: never a folder of the user's own files, never the current directory ----

mkdir -p mine/src && echo 'int main(void){}' >mine/src/main.c && echo notes >mine/notes.txt
expect foreign_folder_refused 2 "output_dir '[^']*mine' holds files that are not a ctrain run \('(src|notes\.txt)'" -- \
    "$ctrain" fit tiny.yaml ++output_dir=mine
expect foreign_folder_restart_refused 2 "holds files that are not a ctrain run" -- \
    "$ctrain" fit tiny.yaml ++output_dir=mine --restart
verdict foreign_folder_untouched "$( [[ -f mine/notes.txt && -f mine/src/main.c && \
    $(ls -A mine | wc -l) -eq 2 ]] || echo "mine/ holds: $(ls -A mine)")"
mkdir -p sub && cp tiny.yaml sub/
expect restart_current_dir_refused 2 "output_dir '[^']*' is the current directory or a folder above" -- \
    bash -c "cd sub && '$ctrain' fit tiny.yaml ++output_dir=.. --restart"
expect restart_of_the_experiment_folder_refused 2 "holds the experiment file sub/tiny\.yaml" -- \
    "$ctrain" fit sub/tiny.yaml ++output_dir=sub --restart
verdict restart_refusals_move_nothing "$(ls -d mine.old-* sub.old-* "../$(basename "$work").old-"* 2>/dev/null)"
# an experiment file named config.yaml is the user's, not a run's: never written over
mkdir -p own && cp tiny.yaml own/config.yaml
expect own_config_yaml_refused 2 "holds files that are not a ctrain run \('config\.yaml'\)" -- \
    "$ctrain" fit own/config.yaml ++output_dir=own
verdict own_config_yaml_untouched "$(cmp -s tiny.yaml own/config.yaml || echo "it was rewritten")"
# a run directory with the user's notes beside it is still a run
"$ctrain" fit tiny.yaml ++output_dir=noted >/dev/null 2>&1
echo "lr 0.1 looked fine" >noted/NOTES
expect run_with_notes_resumes 0 'is complete at step 150' -- "$ctrain" fit tiny.yaml ++output_dir=noted
echo x >a_file
expect output_dir_is_a_file 2 "output_dir '[^']*a_file': [^ ]*a_file exists and is not a directory" -- \
    "$ctrain" fit tiny.yaml ++output_dir=a_file
expect output_dir_under_a_file 2 "output_dir '[^']*a_file/run'" -- \
    "$ctrain" fit tiny.yaml ++output_dir=a_file/run

# ---- the run directory deleted or replaced under a run ----

if start_long gone; then
    # rm -rf races the run's own writes (a file made meanwhile leaves the folder not empty):
    # again until the folder is gone
    for _ in $(seq 100); do
        rm -rf gone 2>/dev/null
        [[ -e gone ]] || break
    done
    mkdir gone # a stranger's folder of the same name: never written into
    wait "$bg_pid"
    rc=$?
    bg_pid=
    why=
    [[ $rc -eq 1 ]] || why="exit $rc, expected 1; "
    grep -q 'gone: the run directory was deleted, moved or replaced' gone.out || why+="no message; "
    [[ -z $(ls -A gone) ]] || why+="it wrote into the new folder: $(ls -A gone); "
    verdict deleted_run_dir_stops_the_run "$why$([[ -n $why ]] && tail_of gone.out)"
fi

# ---- record files on a full disk or past a file size limit: exit 1 naming the file ----

# /dev/full fails every write with ENOSPC: log.txt of a run that goes on (the record files
# are read back by a resume, so they must be regular files: a device is refused)
"$ctrain" fit tiny.yaml ++output_dir=full_log trainer.max_epochs=1 >/dev/null 2>&1
ln -sf /dev/full full_log/log.txt
expect full_disk_log.txt 1 "full_log/log.txt: write failed: No space left on device" -- \
    "$ctrain" fit tiny.yaml ++output_dir=full_log
"$ctrain" fit tiny.yaml ++output_dir=dev_records trainer.max_epochs=1 >/dev/null 2>&1
ln -sf /dev/full dev_records/metrics.jsonl
expect records_must_be_files 2 "dev_records/metrics\.jsonl is not a regular file" -- \
    timeout 20 "$ctrain" fit tiny.yaml ++output_dir=dev_records
# a file size limit: metrics.jsonl outgrows 16 KiB while checkpoints stay smaller; the run ends
# naming the file (no SIGXFSZ death), its last record whole; then it resumes to the end and its
# records equal an uninterrupted run's
expect fsize_limit 1 'fsize/metrics\.jsonl: write failed: File too large' -- \
    bash -c "ulimit -f 16 && exec '$ctrain' fit tiny.yaml ++output_dir=fsize trainer.max_epochs=20 trainer.steps_per_loop=1"
why=
[[ -z $(tail -c 1 fsize/metrics.jsonl | tr -d '\n') ]] || why="metrics.jsonl ends in a half record; "
"$ctrain" fit tiny.yaml ++output_dir=fsize trainer.max_epochs=20 trainer.steps_per_loop=1 >fsize.out 2>&1 ||
    why+="the resume failed: $(tail_of fsize.out); "
"$ctrain" fit tiny.yaml ++output_dir=fsize_ref trainer.max_epochs=20 trainer.steps_per_loop=1 >/dev/null 2>&1
diff <(records fsize/metrics.jsonl) <(records fsize_ref/metrics.jsonl) >/dev/null ||
    why+="records differ from the uninterrupted run's: $(diff <(records fsize/metrics.jsonl) <(records fsize_ref/metrics.jsonl) | head -n 3 | tr '\n' '|')"
verdict fsize_limit_resumes_as_one_run "$why"

# ---- SIGHUP is SIGTERM; a closed pipe does not end the run ----

# hangup NAME DIR N: N SIGHUPs to a long run: it stops at the end of its step, saves and exits
# 129. A hang-up often comes twice (the shell passes it on, the kernel sends it as the session
# ends): the second is not the "stop at once" of a second SIGINT or SIGTERM.
hangup() {
    local name=$1 dir=$2 n=$3
    start_long "$dir" || return
    for _ in $(seq "$n"); do kill -HUP "$bg_pid"; done
    wait "$bg_pid"
    local rc=$? why=
    bg_pid=
    [[ $rc -eq 129 ]] || why="exit $rc, expected 129; "
    grep -q 'stopped by SIGHUP at step' "$dir.out" || why+="no 'stopped by SIGHUP'; "
    "$ctrain" inspect "$dir" >/dev/null 2>&1 || why+="no intact checkpoint; "
    verdict "$name" "$why$([[ -n $why ]] && tail_of "$dir.out")"
}
hangup sighup_saves_and_exits_129 hup 1
hangup sighup_twice_still_saves hup2 2
# under nohup (SIGHUP ignored when fit starts) a hang-up does not stop the run
if start_long nohup_run --nohup; then
    kill -HUP "$bg_pid"
    sleep 0.5
    why=
    kill -0 "$bg_pid" 2>/dev/null || why="SIGHUP ended the run; "
    stop_long
    [[ $stopped_rc -eq 143 ]] || why+="exit $stopped_rc after SIGTERM, expected 143; "
    verdict nohup_ignores_sighup "$why$([[ -n $why ]] && tail_of nohup_run.out)"
fi
"$ctrain" fit tiny.yaml ++output_dir=piped ++logging.progress=plain 2>&1 | head -n 1 >/dev/null
rc=${PIPESTATUS[0]}
why=
[[ $rc -eq 0 ]] || why="exit $rc, expected 0; "
grep -q '^done: 150 steps' piped/log.txt || why+="log.txt lacks the final line; "
verdict closed_pipe_does_not_end_the_run "$why"

# ---- checkpoint pointers: inspect checks them, fit repairs latest, eval never swaps best ----

"$ctrain" fit tiny.yaml ++output_dir=ptr >/dev/null 2>&1
cp -r ptr ptr_clean
printf 'ste\001p-00000150\n' >ptr/checkpoints/latest
expect inspect_garbage_latest 1 'latest: DAMAGED: .*holds "ste\\x01p-00000150\\n"' '^DAMAGED$' -- \
    "$ctrain" inspect ptr
printf 'step-00000999\ncrc32c %08x\n' 0 >ptr/checkpoints/best
expect inspect_damaged_best 1 'best: DAMAGED' -- "$ctrain" inspect ptr
cp ptr_clean/checkpoints/best ptr/checkpoints/best
rm -r ptr/checkpoints/"$(head -n1 ptr/checkpoints/best)"
expect inspect_dangling_best 1 'best -> step-[0-9]+: DAMAGED: no such checkpoint' -- \
    "$ctrain" inspect ptr
expect eval_dangling_best 1 'the best checkpoint cannot be used' -- "$ctrain" eval tiny.yaml ++output_dir=ptr
cp ptr_clean/checkpoints/best ptr/checkpoints/best
cp -r ptr_clean/checkpoints/"$(head -n1 ptr/checkpoints/best)" ptr/checkpoints/
printf 'garbage' >ptr/checkpoints/best
expect eval_damaged_best 1 'best: damaged: holds "garbage"' -- "$ctrain" eval tiny.yaml ++output_dir=ptr
expect eval_damaged_best_latest_asked 0 '^valid \(step 150\)' -- \
    "$ctrain" eval tiny.yaml ++output_dir=ptr --checkpoint latest
rm ptr/checkpoints/best
expect eval_without_best_uses_latest 0 'has no best checkpoint: using latest' '^valid \(step 150\)' -- \
    "$ctrain" eval tiny.yaml ++output_dir=ptr
# damage is exit 1, a checkpoint that does not fit the model exit 2
printf 'X' | dd of=ptr/checkpoints/step-00000100/model.safetensors bs=1 seek=200 conv=notrunc \
    status=none
expect eval_damaged_checkpoint 1 'step-00000100/model\.safetensors: CRC-32C' -- \
    "$ctrain" eval tiny.yaml ++output_dir=ptr --checkpoint step-00000100
expect eval_checkpoint_of_another_model 2 "shape \[32,8\], the model expects \[16,8\]" -- \
    "$ctrain" eval tiny.yaml ++output_dir=ptr --checkpoint step-00000150 "model.hidden=[16]"
rm -r ptr/checkpoints/step-00000100
# fit on the finished run repairs latest (it falls back to the newest intact checkpoint)
expect fit_repairs_latest 0 'checkpoints/latest now names step-00000150' -- \
    "$ctrain" fit tiny.yaml ++output_dir=ptr
expect inspect_after_repair 0 'latest -> step-00000150' '^ok$' -- "$ctrain" inspect ptr

echo "hardening: $passed passed, $failed failed"
[[ $failed -eq 0 && $passed -gt 0 ]]
