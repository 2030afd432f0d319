#!/usr/bin/env bash
# race.sh - two `ctrain fit`s started together on one run directory, with and without
# --restart, and a --restart thrown at a run in progress: exactly one fit may run at a time
# (the other is refused with exit 2, naming the holder), nothing is moved from under a live run,
# and the run that went on ends exactly as a run that had the directory to itself.
#     usage: race.sh PATH/TO/ctrain     (CHAOS_SCALE, CHAOS_SEED: common.sh)
# Last line: the counts of races, refusals and runs moved aside.
# shellcheck source=tests/chaos/common.sh
source "$(dirname "$(realpath "$0")")/common.sh"

short=(trainer.max_epochs=1)
reference ref "${short[@]}"
races=0
refused=0
moved=0
# race I FLAG_A FLAG_B: both fits at once on run_I (which holds a finished run when the flags
# ask for --restart); exactly one exits 0, the other 2
race() {
    local i=$1 fa=$2 fb=$3 dir=run_$1 ra rb pa pb
    if [[ -n $fa$fb ]]; then "$CTRAIN" fit exp.yaml ++output_dir="$dir" "${short[@]}" >/dev/null 2>&1; fi
    # shellcheck disable=SC2086 # an empty flag is no argument
    "$CTRAIN" fit exp.yaml ++output_dir="$dir" "${short[@]}" $fa >a.out 2>&1 &
    pa=$!
    sleep "$(rand_ms 0 30)"
    # shellcheck disable=SC2086
    "$CTRAIN" fit exp.yaml ++output_dir="$dir" "${short[@]}" $fb >b.out 2>&1 &
    pb=$!
    wait "$pa"
    ra=$?
    wait "$pb"
    rb=$?
    races=$((races + 1))
    local why=
    if [[ "$ra$rb" == 02 || "$ra$rb" == 20 ]]; then
        refused=$((refused + 1))
        grep -q 'is in use by another ctrain fit (' a.out b.out || why="no 'in use' message; "
    elif [[ "$ra$rb" == 00 ]]; then
        # one took the lock after the other had ended: it found the finished run complete, or
        # (--restart) moved it aside whole
        grep -qE 'is complete|previous run is now' a.out b.out ||
            why="both ran: $(tail_of a.out) // $(tail_of b.out); "
    else
        why="exits $ra and $rb: $(tail_of a.out) // $(tail_of b.out); "
    fi
    local old aside
    old=$(compgen -G "$dir.old-*" | wc -l)
    moved=$((moved + old))
    for aside in $(compgen -G "$dir.old-*"); do # each moved whole, never from under a writer
        "$CTRAIN" inspect "$aside" >/dev/null 2>&1 || why+="$aside does not verify; "
    done
    if [[ -n $why ]]; then bad "race $i ($fa/$fb)" "$why"; else ok "race $i ($fa/$fb): one fit ran"; fi
    same_as_reference "race $i: the run equals one that had the directory to itself" "$dir" ref
}
n=$((2 * SCALE))
for ((i = 0; i < n; i++)); do
    race "$i" "" ""
    race "r$i" --restart --restart
    race "m$i" "" --restart
done

# --restart at random moments of a run in progress: refused, the live run unharmed
for ((i = 0; i < n; i++)); do
    dir=live_$i
    "$CTRAIN" fit exp.yaml ++output_dir="$dir" "${short[@]}" >live.out 2>&1 &
    bg_pid=$!
    sleep "$(rand_ms 200 1500)"
    "$CTRAIN" fit exp.yaml ++output_dir="$dir" "${short[@]}" --restart >restart.out 2>&1
    rr=$?
    wait "$bg_pid"
    rl=$?
    bg_pid=
    races=$((races + 1))
    if [[ $rl -ne 0 ]]; then
        bad "restart against a live run $i" "the live run ended with $rl: $(tail_of live.out)"
    elif [[ $rr -eq 2 ]] && grep -q 'in use by another ctrain fit' restart.out; then
        refused=$((refused + 1))
        same_as_reference "restart against a live run $i: refused, the live run unharmed" "$dir" ref
    elif [[ $rr -eq 0 ]] && grep -q 'previous run is now' restart.out; then
        moved=$((moved + 1)) # the live run had already ended: a restart is then allowed
        ok "restart against a live run $i: the run had ended, restarted"
    else
        bad "restart against a live run $i" "exit $rr: $(tail_of restart.out)"
    fi
done
summary race "$races races, $refused refused, $moved runs moved aside"
