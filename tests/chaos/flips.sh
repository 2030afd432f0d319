#!/usr/bin/env bash
# flips.sh - one random bit flipped in a random file of a finished run's checkpoints (weights,
# EMA, optimizer state, state.json, the latest and best pointers), many times: `ctrain inspect`
# must find every one. Then, for flips in what `latest` reaches, `ctrain fit` must fall back to
# an intact checkpoint with a warning, repair `latest` and end exactly as the run without the
# flip; for flips in what `best` reaches, `ctrain eval` must refuse (exit 1).
#     usage: flips.sh PATH/TO/ctrain     (CHAOS_SCALE, CHAOS_SEED: common.sh)
# Last line: the counts of flips, detections, recoveries and refusals.
# shellcheck source=tests/chaos/common.sh
source "$(dirname "$(realpath "$0")")/common.sh"

reference ref
mapfile -t files < <(cd ref && find checkpoints -type f | sort)
[[ ${#files[@]} -ge 10 ]] || bad "checkpoint files" "only ${#files[@]}: ${files[*]}"
latest=$(head -n1 ref/checkpoints/latest)
best=$(head -n1 ref/checkpoints/best)

# flip_bit FILE: one random bit of FILE; prints "offset.bit"
flip_bit() {
    local f=$1 size off bit byte
    size=$(stat -c %s "$f")
    off=$(rand 0 $((size - 1)))
    bit=$(rand 0 7)
    byte=$(od -An -tu1 -j "$off" -N1 "$f" | tr -d ' ')
    # shellcheck disable=SC2059 # the format is the one octal escape of the new byte
    printf "\\$(printf '%03o' $((byte ^ (1 << bit))))" |
        dd of="$f" bs=1 seek="$off" conv=notrunc status=none
    echo "$off.$bit"
}

flips=0
detected=0
recovered=0
refused=0
n=$((40 * SCALE))
for ((i = 0; i < n; i++)); do
    rm -rf t && cp -a ref t
    f=${files[$(rand 0 $((${#files[@]} - 1)))]}
    at=$(flip_bit "t/$f")
    flips=$((flips + 1))
    if "$CTRAIN" inspect t >inspect.out 2>&1; then
        bad "flip $i" "inspect missed bit $at of $f"
        continue
    fi
    detected=$((detected + 1))
    # every fourth flip, and each in what latest or best reaches, is also recovered or refused
    case $f in
    checkpoints/latest | checkpoints/"$latest"/*)
        [[ $((i % 4)) -eq 0 || $SCALE -gt 1 ]] || continue
        if "$CTRAIN" fit exp.yaml ++output_dir=t >fit.out 2>&1 &&
            grep -qE 'instead|now names' fit.out; then
            rm -rf r && mv t r
            before=$failed
            same_as_reference "flip $i in $f ($at): fit falls back and ends as the run without it" r ref
            [[ $failed -eq $before ]] && recovered=$((recovered + 1))
        else
            bad "flip $i in $f ($at)" "fit: $(tail_of fit.out)"
        fi
        ;;
    checkpoints/best | checkpoints/"$best"/*)
        if "$CTRAIN" eval exp.yaml ++output_dir=t >eval.out 2>&1; then
            bad "flip $i in $f ($at)" "eval scored other weights: $(tail_of eval.out)"
        elif [[ $(grep -c 'best' eval.out) -eq 0 ]]; then
            bad "flip $i in $f ($at)" "eval's refusal does not name best: $(tail_of eval.out)"
        else
            refused=$((refused + 1))
        fi
        ;;
    esac
done
[[ $detected -eq $flips ]] && ok "inspect detected $detected of $flips flipped bits"
summary flips "$flips flips, $detected detected, $recovered recovered by fit, $refused refused by eval"
