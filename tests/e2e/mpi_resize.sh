#!/usr/bin/env bash
# End-to-end test of a resume on another number of processes: a run stopped mid-epoch by N
# processes and finished by M (N, M in 1, 2, 3, both orders) reads every sample of every epoch
# exactly once, as the uninterrupted run does, and ends with its weights.
#
# The sample ledger is in the weights: sample i of the data is the one-hot row e_i with target
# y_i, the model one linear layer without bias, the loss the mean squared error and the optimizer
# plain SGD. A batch then moves weight i, and only weight i, for each time sample i is in it:
# w_i - y_i is multiplied by f = 1 - 2 lr / G (G the global batch, kept by
# data.global_batch_size). After the run, (w_i - y_i) / (w_i' - y_i) against the uninterrupted
# run is f^(its reads - the other's reads): 1 for every i exactly when every sample was read as
# often, and f^2 between 3 epochs and 1 shows each read once per epoch.
#     usage: mpi_resize.sh PATH/TO/ctrain PATH/TO/mpirun
# Prints "ok   NAME" or "FAIL NAME: WHY" per check and "mpi_resize: N passed, M failed".
set -uo pipefail
# shellcheck source=tests/e2e/harness.sh
source "$(dirname "$(realpath "$0")")/harness.sh"

if [[ $# -ne 2 ]]; then
    echo "usage: $0 CTRAIN MPIRUN" >&2
    exit 2
fi
ctrain=$(realpath "$1")
mpirun=$2
mpi_launch "$mpirun"
enter_workdir mpi_resize

# run NP ARGS...: ctrain fit with NP processes (under mpirun when NP > 1); exit code in $rc
run() {
    local np=$1
    shift
    if [[ $np -eq 1 ]]; then
        "$ctrain" fit "$@" >out 2>&1
    else
        "${launch[@]}" -np "$np" "$ctrain" fit "$@" >out 2>&1
    fi
    rc=$?
}

# 24 one-hot rows and their targets y_i = i / 8 - 1
n=24
for ((i = 0; i < n; i++)); do
    row=""
    for ((j = 0; j < n; j++)); do row+="$((i == j)),"; done
    echo "${row}$(awk -v i="$i" 'BEGIN { printf "%.4f", i / 8 - 1 }')"
done >onehot.csv

# lr 1.5 over a global batch of 6: f = 1 - 2 x 1.5 / 6 = 0.5
cat >ledger.yaml <<YAML
seed: 5
threads: 1
data:
  train: {type: csv, path: $PWD/onehot.csv, header: false, target: "$n", task: regression}
  global_batch_size: 6
model:
  type: sequential
  layers: [{type: linear, out: 1, bias: false}]
loss: {type: mse}
optimizer: {type: sgd, lr: 1.5}
trainer: {max_epochs: 3, steps_per_loop: 1}
logging: {progress: none}
YAML

# the weights of a run's final checkpoint, one per line
weights() {
    local dir=$1/checkpoints
    python3 - "$dir/$(head -n1 "$dir/latest")/model.safetensors" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
size = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + size])
t = head["0.weight"]
a, b = t["data_offsets"]
body = raw[8 + size + a:8 + size + b]
for v in struct.unpack("<%df" % (len(body) // 4), body):
    print("%.9g" % v)
PY
}

# ratios A B WANT: every (a_i - y_i) / (b_i - y_i) within 1e-5 of WANT; prints the first that
# is not, nothing when all are
ratios() {
    paste <(weights "$1") <(weights "$2") | awk -v want="$3" '
        { y = (NR - 1) / 8 - 1; r = ($1 - y) / ($2 - y)
          if (r - want > 1e-5 || want - r > 1e-5) { printf "sample %d: ratio %.8f, expected %g", NR - 1, r, want; exit } }'
}

# ---- the uninterrupted run: each sample once per epoch ----
run 1 ledger.yaml output_dir=runs/one trainer.max_epochs=1
run1=$rc
run 1 ledger.yaml output_dir=runs/ref
if [[ $run1 -ne 0 || $rc -ne 0 ]]; then
    fail ledger_reference "exit $run1 / $rc: $(tail_of out)"
else
    verdict ledger_reference "$(ratios runs/ref runs/one 0.25)"
fi

# ---- stopped by N processes mid-epoch (step 6 of 12: batch 2 of epoch 2), finished by M ----
for pair in "1 2" "2 1" "1 3" "3 1" "2 3" "3 2"; do
    read -r np mp <<<"$pair"
    d=runs/n${np}m${mp}
    run "$np" ledger.yaml output_dir="$d" trainer.max_steps=6
    first=$rc
    run "$mp" ledger.yaml output_dir="$d" trainer.allow_world_size_change=true
    name=resize_${np}_to_${mp}
    if [[ $first -ne 0 || $rc -ne 0 ]]; then
        fail "$name" "exit $first / $rc: $(tail_of out)"
        continue
    fi
    why=$(ratios "$d" runs/ref 1)
    if [[ -z $why ]] &&
        ! grep -q "resumed by $mp: epoch 2 continues at sample 12 of its order (batch 2" out; then
        why="no 'epoch 2 continues at sample 12' line: $(tail_of out)"
    fi
    verdict "$name" "$why"
done

# ---- a position inside the new global batch: refused, nothing trained ----
run 2 ledger.yaml output_dir=runs/bad data.global_batch_size=4 trainer.max_steps=1
run 3 ledger.yaml output_dir=runs/bad data.global_batch_size=4 trainer.allow_world_size_change=true
if [[ $rc -ne 2 ]]; then
    # global_batch_size 4 cannot be shared by 3: refused before any resume
    fail resize_not_divisible "exit $rc: $(tail_of out)"
elif ! grep -q "key 'data.global_batch_size': 4 samples cannot be shared equally by 3 processes" out; then
    fail resize_not_divisible "no 'cannot be shared equally' message: $(tail_of out)"
else
    ok resize_not_divisible
fi
run 2 ledger.yaml output_dir=runs/mid data.global_batch_size=null data.batch_size=2 trainer.max_steps=1
run 3 ledger.yaml output_dir=runs/mid data.global_batch_size=null data.batch_size=2 \
    trainer.allow_world_size_change=true
if [[ $rc -eq 2 ]] && grep -q "resumed by 3 in epoch 1: sample 4 of the epoch.s order is inside a global batch of 6" out &&
    [[ $(head -n1 runs/mid/checkpoints/latest) == "$(cd runs/mid/checkpoints && ls -d step-* | tail -n1)" ]]; then
    ok resize_inside_batch_refused
else
    fail resize_inside_batch_refused "exit $rc: $(tail_of out)"
fi

# ---- both batch sizes given: a configuration error naming the key ----
run 1 ledger.yaml output_dir=runs/both data.batch_size=3
if [[ $rc -eq 2 ]] && grep -q "key 'data.batch_size': set either data.batch_size (per process) or data.global_batch_size" out; then
    ok both_batch_sizes_refused
else
    fail both_batch_sizes_refused "exit $rc: $(tail_of out)"
fi

echo "mpi_resize: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
