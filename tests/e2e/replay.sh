#!/usr/bin/env bash
# replay.sh - `ctrain replay` end to end: the incident bundles of a run with a planted NaN
# sample (on_nonfinite skip) and of a run with planted spikes (synthetic corrupt_every, dropout)
# are reproduced bit for bit, from the seed and from a checkpoint, without a byte of the run
# directory changing; a changed batch (the bundle's samples, a data file's row, the data order
# in the bundle's config) is found and named (exit 1); a path that is not a bundle and a
# checkpoint that is gone are refused (exit 2). Also: the bundle names the layer where the NaN
# first appeared and carries each layer's output statistics.
#     usage: replay.sh PATH/TO/ctrain
# shellcheck source=tests/e2e/harness.sh
source "$(dirname "$(realpath "$0")")/harness.sh"
ctrain=$(realpath "$1")
enter_workdir replay
export TMPDIR=$work/tmp
mkdir -p "$TMPDIR"

# Every file under a directory with its size, mtime (ns) and checksum.
snapshot() {
    (cd "$1" && find . -printf '%y %p %s %T@\n' | sort && find . -type f -print0 | sort -z |
        xargs -0 -r sha256sum)
}

# ---- a planted NaN: row 9 of nan.csv is sample 7; 4 batches of 2 an epoch ----
{
    echo 'a,b,y'
    for i in 1 2 3 4 5 6 7; do echo "$i,0.5,$((i % 2))"; done
    echo '8,NaN,0'
} >nan.csv
cat >nan.yaml <<YAML
data:
  train: {type: csv, path: $work/nan.csv, target: y, nonfinite: allow}
  batch_size: 2
model: {type: mlp, hidden: [4]}
trainer: {max_epochs: 2, on_nonfinite: skip}
logging: {progress: none}
YAML
"$ctrain" fit nan.yaml ++output_dir=nan >fit.out 2>&1 || fail nan_fit "$(tail_of fit.out)"
b2=nan/incidents/step-00000002 b4=nan/incidents/step-00000004
why=
for pat in '"first_nonfinite_layer": \{"pass": "forward", "index": 0, "name": "0", "type": "linear"' \
    '"replay_from": null' '"loss_bits": "0x[0-9a-f]{16}"' '"world_size": 1,' \
    '"activations": \[' '\{"name": "1", "type": "relu", "shape": \[2, 4\], "nonfinite": [1-9]'; do
    grep -Eq "$pat" $b2/incident.json || why+="no $pat in $b2; "
done
grep -Eq '"replay_from": \{"step": 3, "checkpoint": "step-00000003"\}' $b4/incident.json ||
    why+="$b4 does not replay from step 3; "
verdict bundle_should_name_the_first_nonfinite_layer_and_the_checkpoint "$why"

before=$(snapshot nan)
expect replay_should_reproduce_a_nonfinite_step_from_the_seed 0 \
    '^reproduced: step 2 \(nonfinite, skip\) replayed from the seed' -- "$ctrain" replay $b2
expect replay_should_reproduce_a_nonfinite_step_from_a_checkpoint 0 \
    '^\{"bundle":"[^"]*/nan/incidents/step-00000004","reproduced":true,"step":4,"kind":"nonfinite","action":"skip","replayed_from":3,"difference":null\}$' \
    -- "$ctrain" replay $b4 --json
verdict replay_should_not_touch_the_run "$(diff <(echo "$before") <(snapshot nan) | head -n 4 | tr '\n' '|')"
verdict replay_should_remove_its_scratch_directory "$(ls -A "$TMPDIR")"

# the failure direction: a changed batch is named
cp -r nan nan_edit
sed -i -E 's/"samples": \[([0-9]+), ([0-9]+)\]/"samples": [\2, \1]/' nan_edit/incidents/step-00000002/incident.json
want=$(sed -nE 's/.*"samples": \[([0-9]+), ([0-9]+)\].*/\1/p' nan_edit/incidents/step-00000002/incident.json)
expect replay_should_name_changed_sample_indices 1 \
    "^differs: step 2 \(batch of samples \[$want, [0-9]+\]\): samples: position 0: expected $want, got [0-9]+" \
    -- "$ctrain" replay nan_edit/incidents/step-00000002
# another value in a sample of that batch (not the NaN one): the layer outputs differ
other=$(sed -nE 's/.*"samples": \[([0-9]+), ([0-9]+)\].*/\1 \2/p' $b2/incident.json | tr ' ' '\n' | grep -vx 7)
cp nan.csv nan.orig
awk -F, -v row=$((other + 2)) 'BEGIN { OFS = "," } NR == row { $2 = 0.9 } { print }' nan.orig >nan.csv
expect replay_should_name_a_changed_data_row 1 \
    '^differs: step 2 \(batch of samples \[[0-9, ]+\]\): activations: tensor .0.: (min|max|l2): expected' \
    -- "$ctrain" replay $b2
cp nan.orig nan.csv

# bad input: exit 2, naming what is wrong
expect replay_should_refuse_a_run_directory 2 'nan: not an incident bundle \(no incident.json\)' \
    -- "$ctrain" replay nan
expect replay_should_refuse_a_missing_path 2 'nothere: not an incident bundle' \
    -- "$ctrain" replay nothere
expect replay_should_want_a_bundle 2 'missing BUNDLE' -- "$ctrain" replay
cp -r nan nan_gone
rm -r nan_gone/checkpoints/step-00000003
expect replay_should_refuse_when_the_checkpoint_is_gone 2 \
    'nan_gone/checkpoints/step-00000003: the checkpoint this incident replays from is gone' \
    -- "$ctrain" replay nan_gone/incidents/step-00000004
sed -i 's/"world_size": 1/"world_size": 2/' nan_gone/incidents/step-00000002/incident.json
expect replay_should_refuse_a_distributed_run 2 'an incident of a run of 2 processes' \
    -- "$ctrain" replay nan_gone/incidents/step-00000002
expect replay_help 0 'usage: ctrain replay RUN/incidents/step-N' -- "$ctrain" replay --help

# ---- planted spikes: samples 1023 and 2047 scaled by 1000, steps 32, 64, 96, 128 ----
cat >spike.yaml <<YAML
seed: 1
data:
  train: {type: synthetic, kind: linear, n: 2048, features: 16, seed: 3, corrupt_every: 1024}
  batch_size: 32
  shuffle: false
model: {type: mlp, hidden: [32], dropout: 0.1}
optimizer: {type: adam, lr: 0.003}
trainer: {max_epochs: 2, on_spike: {action: warn, window: 20}}
logging: {progress: none}
YAML
"$ctrain" fit spike.yaml ++output_dir=sp >fit.out 2>&1 || fail spike_fit "$(tail_of fit.out)"
before=$(snapshot sp)
expect replay_should_reproduce_a_spike_from_a_checkpoint 0 \
    '^reproduced: step 96 \(spike, warn\) replayed from checkpoint step-00000064' -- \
    "$ctrain" replay sp/incidents/step-00000096
expect replay_should_reproduce_a_spike_from_the_seed 0 \
    '^reproduced: step 32 \(spike, warn\) replayed from the seed' -- \
    "$ctrain" replay sp/incidents/step-00000032
verdict replay_should_not_touch_the_spike_run "$(diff <(echo "$before") <(snapshot sp) | head -n 4 | tr '\n' '|')"
# the data order changed in the bundle's configuration: the step trains on another batch
cp -r sp sp_order
sed -i 's/shuffle: false/shuffle: true/' sp_order/incidents/step-00000032/config.yaml
expect replay_should_name_a_batch_of_another_data_order 1 \
    '^differs: step 32 \(batch of samples \[992, 993, .*\]\): samples: position 0: expected 992, got [0-9]+' \
    -- "$ctrain" replay sp_order/incidents/step-00000032
verdict replay_should_leave_no_scratch_directory "$(ls -A "$TMPDIR")"

echo "replay: $passed passed, $failed failed"
((failed == 0))
