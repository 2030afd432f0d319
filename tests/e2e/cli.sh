#!/usr/bin/env bash
# End-to-end test of the ctrain command line: drives the built binary on tiny synthetic
# experiments (each trains in well under a second) and checks exit codes, messages, the run
# directory, eval, inspect, resuming and signals.
#     usage: cli.sh PATH/TO/ctrain PATH/TO/jsonq
# Prints "ok   NAME" or "FAIL NAME: WHY" per check and "cli: N passed, M failed" at the end;
# exits non-zero when any check failed. Everything happens in a temporary directory.
set -uo pipefail
# shellcheck source=tests/e2e/harness.sh
source "$(dirname "$(realpath "$0")")/harness.sh"

if [[ $# -ne 2 ]]; then
    echo "usage: $0 CTRAIN JSONQ" >&2
    exit 2
fi
ctrain=$(realpath "$1")
jsonq=$(realpath "$2")
enter_workdir cli
here=$(pwd -P) # relative paths resolve against the current directory, as getcwd(3) gives it

# Every file and folder under a directory with its size, mtime (ns) and content checksum.
snapshot() {
    (cd "$1" && find . -printf '%y %p %s %T@\n' | sort && find . -type f -print0 | sort -z |
        xargs -0 -r sha256sum)
}


# The step directory a run's checkpoints/latest points at.
latest_dir() { echo "$1/checkpoints/$(head -n1 "$1/checkpoints/latest" 2>/dev/null)"; }

# Waits (up to 30 s) until the file holds a match of PATTERN while process PID lives.
wait_for() {
    local file=$1 pattern=$2 pid=$3
    for _ in $(seq 600); do
        grep -qE -- "$pattern" "$file" 2>/dev/null && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.05
    done
    return 1
}

# ---- the experiments ----

cat >tiny.yaml <<'YAML'
seed: 1
data:
  train: {type: synthetic, kind: blobs, n: 2000, features: 8, classes: 4, seed: 3}
  valid: {split: 0.2}
  test: {type: synthetic, kind: blobs, n: 500, features: 8, classes: 4, seed: 3}
  batch_size: 32
model: {type: mlp, hidden: [32]}
optimizer: {type: sgd, lr: 0.1, momentum: 0.9}
scheduler: {type: cosine, t_max: auto}
trainer: {max_epochs: 3}
metrics:
  valid: [accuracy, {type: f1, average: macro}]
checkpoint: {monitor: valid/acc}
YAML
# tiny.yaml with line $1 (1-based) replaced by $2 (awk escapes: \n), into $3
edit_line() { awk -v n="$1" -v s="$2" 'NR == n { print s; next } { print }' tiny.yaml >"$3"; }
quiet=(++logging.progress=none)

# ---- usage ----

expect version 0 '^ctrain [0-9]+\.[0-9]+\.[0-9]+$' '^commit: [^ ]+$' '^compiler: (gcc|clang) [0-9]' \
    '^build type: [A-Za-z]+$' '^cpu: AVX-512 (yes|no), AVX512_BF16 (yes|no), AMX (yes|no)$' \
    '^oneDNN: [0-9]+\.[0-9]+\.[0-9]+ \(ISA [a-z0-9_]+\)' '^OpenBLAS: OpenBLAS [0-9]' \
    '^MPI: (none \(built without MPI\)|.+ \(loaded on demand from /.+/libctrain_mpi\.so\.[0-9]+\))$' \
    '^OpenMP: ' -- "$ctrain" --version
expect help 0 'usage: ctrain COMMAND' 'exit codes' -- "$ctrain" --help
expect fit_help 0 'usage: ctrain fit CONFIG' -- "$ctrain" fit --help
expect eval_help 0 'usage: ctrain eval CONFIG' -- "$ctrain" eval --help
expect no_command 2 'usage: ctrain' -- "$ctrain"
expect unknown_command 2 "unknown command 'frobnicate'" -- "$ctrain" frobnicate
expect unknown_option 2 "unknown option '--bogus'" -- "$ctrain" fit tiny.yaml --bogus
expect fit_without_config 2 'missing CONFIG' 'bundled examples' \
    'ctrain fit .*fashion_mnist_mlp\.yaml' -- "$ctrain" fit
expect missing_config_file 2 'nothere\.yaml: cannot open' -- "$ctrain" fit nothere.yaml
expect config_reference 0 '^# Experiment files' 'optimizer\.lr' -- "$ctrain" config --reference
expect text_metric_only_in_decode 2 "metrics.test.0: metric 'edit_distance' scores decoded text" \
    -- "$ctrain" config tiny.yaml '+metrics.test=[edit_distance]'
expect export_preprocessing_of_onnx_only 2 '--opset and --with-preprocessing: only for --format onnx' \
    -- "$ctrain" export tiny_run -o w.safetensors --with-preprocessing
expect export_opset_of_onnx_only 2 '--opset and --with-preprocessing: only for --format onnx' \
    -- "$ctrain" export tiny_run -o w.safetensors --opset 13
mkdir -p export_src/checkpoints/step-00000001 && : >export_src/checkpoints/step-00000001/model.safetensors
expect export_checkpoint_or_its_choice 2 'is a checkpoint; --checkpoint latest chooses one of a RUN' \
    -- "$ctrain" export export_src/checkpoints/step-00000001 -o w.safetensors --checkpoint latest

# ---- shell completion and the man page, made from the tool's own tables and help texts ----

# complete SCRIPT WORD...: what the completion function offers for the last word, one a line
complete_words() {
    local script=$1
    shift
    bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _ctrain_words;
             printf "%s\n" "${COMPREPLY[@]}"' sh "$script" "$@" 2>&1
}
"$ctrain" completion bash >completion.bash 2>completion.err
rc=$?
if [[ $rc -ne 0 ]]; then
    fail completion_bash "exit $rc: $(tail_of completion.err)"
elif ! bash -n completion.bash 2>completion.err; then
    fail completion_bash "bash -n: $(tail_of completion.err)"
else
    ok completion_bash
    out=$(complete_words completion.bash ctrain f)
    [[ $out == fit ]] && ok completion_command || fail completion_command "ctrain f: '$out'"
    out=$(complete_words completion.bash ctrain fit x.yaml optimizer.l)
    if grep -qx 'optimizer\.lr=' <<<"$out"; then ok completion_key; else
        fail completion_key "ctrain fit x.yaml optimizer.l: '$out'"
    fi
    out=$(complete_words completion.bash ctrain fit x.yaml ++optimizer.type=ad | sort | tr '\n' ' ')
    [[ $out == '++optimizer.type=adagrad ++optimizer.type=adam ++optimizer.type=adamw ' ]] &&
        ok completion_enum_values || fail completion_enum_values "optimizer.type=ad: '$out'"
    # '=' splits the word with bash's default COMP_WORDBREAKS: the value alone
    out=$(complete_words completion.bash ctrain fit x.yaml optimizer.type = sg)
    [[ $out == sgd ]] && ok completion_enum_split || fail completion_enum_split "= sg: '$out'"
    out=$(complete_words completion.bash ctrain eval x.yaml --n)
    [[ $out == --no-ema ]] && ok completion_option || fail completion_option "eval --n: '$out'"
    # the completion's options are those each command's usage names (two tables in the tool)
    why=
    for cmd in fit eval predict report config inspect diff verify-resume; do
        want=$({ echo --help; "$ctrain" "$cmd" --help 2>&1; } | grep -oE -- '--[a-z][a-z-]*' |
            sort -u | tr '\n' ' ')
        got=$(complete_words completion.bash ctrain "$cmd" x --  | grep -E '^--[a-z]' | sort -u |
            tr '\n' ' ')
        [[ $want == "$got" ]] || why+="$cmd: usage names '$want', completion offers '$got'; "
    done
    verdict completion_options_match_usage "$why"
fi
if command -v zsh >/dev/null; then
    if "$ctrain" completion zsh >_ctrain 2>completion.err && zsh -n _ctrain 2>>completion.err; then
        ok completion_zsh
    else
        fail completion_zsh "$(tail_of completion.err)"
    fi
else
    echo "skip completion_zsh: zsh is not installed"
fi
expect completion_bad_shell 2 'expected bash or zsh' -- "$ctrain" completion fish
"$ctrain" man >ctrain.1 2>man.err
rc=$?
if [[ $rc -ne 0 ]]; then
    fail man_page "exit $rc: $(tail_of man.err)"
elif ! command -v groff >/dev/null; then
    echo "skip man_page: groff is not installed"
elif ! groff -man -ww -z ctrain.1 >man.err 2>&1 || [[ -s man.err ]]; then
    fail man_page "groff -man -ww: $(tail_of man.err)"
else
    missing=
    for c in fit eval predict config inspect diff report completion man; do
        grep -qx "\.SS $c" ctrain.1 && grep -q "usage: ctrain $c" ctrain.1 || missing+=" $c"
    done
    [[ -z $missing ]] && ok man_page || fail man_page "commands missing:$missing"
fi

# ---- MPI only on demand (docs/distributed.md) ----

# a run by hand maps no MPI library (LD_DEBUG=files lists every library the loader opens)
rm -f ld.*
if expect fit_should_not_load_mpi 0 -- env LD_DEBUG=files LD_DEBUG_OUTPUT="$here/ld" \
    "$ctrain" fit tiny.yaml ++output_dir=nompi trainer.max_epochs=1 "${quiet[@]}"; then
    loaded=$(grep -hoE 'file=[^ ]*mpi[^ ]*' ld.* 2>/dev/null | sort -u | tr '\n' ' ')
    if ! ls ld.* >/dev/null 2>&1; then
        fail fit_should_not_load_mpi_libraries "LD_DEBUG wrote nothing"
    else
        verdict fit_should_not_load_mpi_libraries "${loaded:+it loaded $loaded}"
    fi
fi
rm -f ld.*
# a rank whose MPI communicator cannot be loaded says what is missing and how to get it
if grep -q '^MPI: none (built without MPI)' <("$ctrain" --version); then
    missing=('this ctrain was built without MPI')
else
    missing=("cannot load the MPI communicator: CTRAIN_MPI_LIBRARY=$here/gone/libctrain_mpi\.so\.0: "
        'No such file or directory' 'libopenmpi3' 'docs/distributed\.md')
fi
expect mpi_library_missing 1 "${missing[@]}" -- env CTRAIN_MPI=1 \
    CTRAIN_MPI_LIBRARY="$here/gone/libctrain_mpi.so.0" "$ctrain" fit tiny.yaml ++output_dir=gone \
    "${quiet[@]}"
# --version says so, and succeeds
if [[ ${missing[0]} == 'this ctrain was built without MPI' ]]; then
    missing=('^MPI: none \(built without MPI\)$')
else
    missing=("^MPI: not available \(CTRAIN_MPI_LIBRARY=$here/gone/libctrain_mpi\.so\.0: ")
fi
expect version_without_mpi_library 0 "${missing[@]}" '^OpenMP: ' -- env \
    CTRAIN_MPI_LIBRARY="$here/gone/libctrain_mpi.so.0" "$ctrain" --version

# ---- fit ----

expect fit_cut_mid_epoch 0 'done: 75 steps, 1 epoch and part of epoch 2;' -- "$ctrain" fit \
    tiny.yaml ++output_dir=cut trainer.max_steps=75 "${quiet[@]}"
if expect fit 0 'done: 150 steps, 3 epochs' -- "$ctrain" fit tiny.yaml ++output_dir=run "${quiet[@]}"; then
    why=
    for f in config.yaml metrics.jsonl log.txt checkpoints/latest; do
        [[ -s run/$f ]] || why+="run/$f missing or empty; "
    done
    [[ -f $(latest_dir run)/model.safetensors ]] || why+="checkpoints/latest names no checkpoint; "
    grep -q '^{"step":[0-9]' run/metrics.jsonl || why+="metrics.jsonl has no step records; "
    grep -q '"valid/acc":' run/metrics.jsonl || why+="metrics.jsonl has no valid/acc; "
    grep -q '"test/acc":' run/metrics.jsonl || why+="metrics.jsonl has no test/acc; "
    "$jsonq" step run/metrics.jsonl >/dev/null 2>jq.err || why+="metrics.jsonl: $(cat jq.err); "
    grep -q 'valid epoch 3 step 150: acc' run/log.txt || why+="log.txt lacks the evaluations; "
    verdict fit_run_directory "$why"
else
    fail fit_run_directory "fit failed"
fi

# ---- the step profile: a table at the end and profile.json, only when asked for ----

[[ ! -e run/profile.json ]] && ok profile_off_writes_nothing ||
    fail profile_off_writes_nothing "run/profile.json written without --profile"
if expect profile_table 0 'profile: 150 steps in' 'phase +total s +share +median ms/step' \
    'data +[0-9.]+ +[0-9.]+%' 'overhead +[0-9.]+' 'step +[0-9.]+ +100\.0%' -- \
    "$ctrain" fit tiny.yaml --profile ++output_dir=prof "${quiet[@]}"; then
    why=
    tr -d '\n' <prof/profile.json >profile.line
    for k in mode steps median_steps wall_seconds median_step_seconds phases; do
        "$jsonq" "$k" profile.line >/dev/null 2>jq.err || why+="$k: $(tail_of jq.err); "
    done
    [[ $("$jsonq" steps profile.line 2>/dev/null) == 150 ]] || why+="steps is not 150; "
    [[ $("$jsonq" mode profile.line 2>/dev/null) == steps ]] || why+="mode is not steps; "
    phases=$("$jsonq" phases profile.line 2>/dev/null)
    for k in data forward backward comm optimizer eval checkpoint logging overhead; do
        grep -qE "\"$k\":\{\"total_seconds\":[0-9.e+-]+,\"share\":[0-9.e+-]+,\"median_seconds\"" \
            <<<"$phases" || why+="phases lacks $k; "
    done
    grep -q 'profile: 150 steps' prof/log.txt || why+="log.txt lacks the table; "
    verdict profile_json "$why"
else
    fail profile_json "fit --profile failed"
fi
expect profile_layers 0 'layer +type +forward ms +backward ms' '  0 +linear +[0-9.]+ +[0-9.]+' \
    '  1 +relu ' '  2 +linear ' -- "$ctrain" fit tiny.yaml --profile=layers ++output_dir=prof_layers \
    "${quiet[@]}" &&
    verdict profile_layers_json "$(tr -d '\n' <prof_layers/profile.json |
        grep -qE '"layers": \[ *\{"name": "0", "type": "linear", "forward_seconds": [0-9.e+-]+, "backward_seconds": [0-9.e+-]+\}' ||
        echo "profile.json lacks the layers: $(tail_of prof_layers/profile.json)")"
expect profile_bad_value 2 "--profile: expected no value or =layers, got 'foo'" -- \
    "$ctrain" fit tiny.yaml --profile=foo ++output_dir=prof_bad
expect profile_of_fit_only 2 '--profile are options of fit' -- "$ctrain" config tiny.yaml --profile

# ---- progress: one epoch numbering, rates without evaluations, max_steps ----

# evaluations by steps (25 and 50 in epoch 1, 75 and 100 in epoch 2) and by epochs (test): the
# lines, log.txt, metrics.jsonl and inspect name the epoch each step was made in, counted from 1
if expect epoch_numbering 0 'valid epoch 1 step 25:' 'valid epoch 1 step 50:' \
    'test epoch 1 step 50:' 'valid epoch 2 step 75:' 'test epoch 2 step 100:' -- \
    "$ctrain" fit tiny.yaml ++output_dir=epochs trainer.max_epochs=2 \
    trainer.valid_every_steps=25 trainer.valid_every_epochs=0 trainer.test_every_epochs=1 \
    checkpoint.save_every_steps=25 "${quiet[@]}"; then
    why=$(grep -vE '^\{"step":([1-9]|[1-4][0-9]|50),"epoch":1,|^\{"step":(5[1-9]|[6-9][0-9]|100),"epoch":2,' \
        epochs/metrics.jsonl | head -n 2)
    grep -q '^test epoch 1 step 50:' epochs/log.txt || why+="log.txt: no test epoch 1 step 50; "
    "$ctrain" inspect epochs >inspect.out 2>&1
    grep -q 'step-00000075: ok, step 75, epoch 2,' inspect.out ||
        why+="inspect: $(grep -o 'step 75, epoch [0-9]*' inspect.out)"
    verdict epoch_numbering_records "$why"
fi
# a validation mid-epoch (step 25 of 50): training's rate counts on from the epoch's start
# without the validation's time, so the line after it (30/50) shows at most 30/25 of the rate
# before it (25/50), and no line shows a rate of 0
if expect progress_rate_plain 0 '^train epoch 1/1 50/50 ' -- \
    "$ctrain" fit tiny.yaml ++output_dir=rate trainer.max_epochs=1 trainer.valid_every_steps=25 \
    trainer.valid_every_epochs=0 ++logging.progress=plain; then
    verdict progress_rate_without_evaluations "$(awk '
        /^train epoch/ { split($4, f, "/"); r[f[1]] = $6 }
        / 0 samples\/s/ { print "a rate of 0: " $0 }
        END {
            if (!(25 in r) || !(30 in r)) print "no lines at 25/50 and 30/50"
            else if (r[30] > 1.25 * r[25])
                print "rate " r[25] " at 25/50, " r[30] " at 30/50 after the validation"
        }' err)"
fi
# on a (fake) terminal: the bar counts to max_steps, never shows a rate of 0 (the first batch,
# the first after an evaluation) and numbers the epoch as the evaluation lines do
if expect progress_bar_tty 0 'valid epoch 1 step 10:' -- \
    script -qc "'$ctrain' fit tiny.yaml ++output_dir=bar trainer.max_steps=20 \
        trainer.valid_every_steps=10" /dev/null; then
    frames=$(tr '\r' '\n' <out | sed 's/\x1b\[K//g')
    why=
    grep -qE '^train epoch 1/3 \[=+\] 20/20 [0-9]+ samples/s' <<<"$frames" ||
        why+="no bar ending at max_steps (20/20); "
    grep -qE '^train epoch 1/3 \[.*\] 11/20 ' <<<"$frames" ||
        why+="no bar after the validation; "
    grep -qE ' 0 samples/s' <<<"$frames" && why+="a rate of 0; "
    verdict progress_bar_counts "$why"
fi

# ---- config and overrides ----

fingerprint() { sed -nE '1s/.*fingerprint ([0-9a-f]{16}).*/\1/p' "$1"; }
if expect config_resolved 0 '^# tiny\.yaml resolved \(fingerprint [0-9a-f]{16}\)' \
    '^  lr: 0\.1$' '^  max_steps: 0$' '^output_dir: ' -- "$ctrain" config tiny.yaml; then
    cp out resolved.yaml
    fp=$(fingerprint resolved.yaml)
    "$ctrain" config resolved.yaml >reread.yaml 2>err
    rc=$?
    if [[ $rc -ne 0 ]]; then
        fail config_reread "exit $rc: $(tail_of err)"
    elif [[ $(fingerprint reread.yaml) != "$fp" ]]; then
        fail config_reread "fingerprint $(fingerprint reread.yaml), expected $fp"
    elif ! diff <(tail -n +2 resolved.yaml) <(tail -n +2 reread.yaml) >/dev/null; then
        fail config_reread "the re-resolved YAML differs: $(diff resolved.yaml reread.yaml | tr '\n' '|')"
    else
        ok config_reread
    fi
fi
if expect override_replace 0 '^  lr: 0\.05$' -- "$ctrain" config tiny.yaml optimizer.lr=0.05; then
    why=
    [[ $(fingerprint out) != "$fp" ]] || why="the same fingerprint with another lr"
    verdict override_changes_fingerprint "$why"
fi
expect override_add 0 '^early_stopping:$' '^  patience: 2$' -- \
    "$ctrain" config tiny.yaml +early_stopping.patience=2
expect override_delete 0 '!f1' '!average: macro' -- "$ctrain" config tiny.yaml '~metrics.valid'
expect override_set_new 0 "^output_dir: \"?$here/elsewhere\"?\$" -- \
    "$ctrain" config tiny.yaml ++output_dir=elsewhere
# a key the schema lacks is unknown, with the section's keys (not a hint to add it with +)
expect override_unknown_key 2 "unknown key 'trainer\.nonexistent'" '!\+trainer' -- \
    "$ctrain" config tiny.yaml trainer.nonexistent=1
expect override_missing_top_key 2 "command line: unknown key 'x'" -- \
    "$ctrain" config tiny.yaml x=1
# a component's key the file lacks needs +, and the message says so
expect override_component_key 2 "'model\.dropout' is not in tiny\.yaml" '\+model\.dropout=0\.1' -- \
    "$ctrain" config tiny.yaml model.dropout=0.1
# a schema key the file lacks is set without +
expect override_schema_default 0 '^  progress: plain$' -- \
    "$ctrain" config tiny.yaml logging.progress=plain
expect override_add_unknown_key 2 "unknown key 'x'" -- "$ctrain" config tiny.yaml +x=1
expect override_add_existing 2 "'optimizer\.lr' is already set" -- \
    "$ctrain" config tiny.yaml +optimizer.lr=0.3
expect override_delete_value 0 '!f1' -- \
    "$ctrain" config tiny.yaml '~metrics.valid=[accuracy, {type: f1, average: macro}]'
expect override_delete_other_value 2 \
    "key 'optimizer\.lr' is 0\.1 in tiny\.yaml, not 0\.2; nothing was deleted" -- \
    "$ctrain" config tiny.yaml '~optimizer.lr=0.2'
expect override_delete_missing 2 "'early_stopping\.patience' is not in tiny\.yaml" -- \
    "$ctrain" config tiny.yaml '~early_stopping.patience'
expect override_malformed 2 "expected key=value" -- "$ctrain" config tiny.yaml optimizer.lr
expect override_bad_value 2 "key 'optimizer\.lr': expected a number, got 'abc'" -- \
    "$ctrain" config tiny.yaml optimizer.lr=abc

# ---- configuration errors: exit 2 naming file:line:col and the key ----

edit_line 8 'optimzer: {type: sgd, lr: 0.1, momentum: 0.9}' e_typo.yaml
expect error_unknown_key 2 "e_typo\.yaml:8:1: unknown key 'optimzer' \(did you mean 'optimizer'\?\)" \
    -- "$ctrain" config e_typo.yaml
edit_line 8 'optimizer: {type: sgd, lrr: 0.1, momentum: 0.9}' e_nested.yaml
expect error_unknown_nested_key 2 \
    "e_nested\.yaml:8:[0-9]+: unknown key 'optimizer\.lrr' \(did you mean 'optimizer\.lr'\?\)" \
    -- "$ctrain" config e_nested.yaml
edit_line 8 'optimizer: {type: sgd, learning_rate: 0.1, momentum: 0.9}' e_lr.yaml
expect error_unknown_key_lists_section 2 \
    "e_lr\.yaml:8:[0-9]+: unknown key 'optimizer\.learning_rate'.*keys of 'optimizer' are: .*\blr\b" \
    -- "$ctrain" config e_lr.yaml
expect error_other_frameworks_name 2 \
    "unknown key 'trainer\.gradient_clip_val' \(did you mean 'trainer\.grad_clip_norm'\? 'gradient_clip_val' is Lightning's name for it\)" \
    -- "$ctrain" config tiny.yaml trainer.gradient_clip_val=1
expect metric_spellings 0 "new best valid/acc" -- "$ctrain" fit tiny.yaml \
    checkpoint.monitor=valid/accuracy 'metrics.valid=[acc]' ++trainer.dev_run=true "${quiet[@]}"
expect error_misspelt_monitor 2 \
    "the monitor watches 'valid/acuracy', which no evaluation engine computes \(did you mean 'valid/acc'\?\) \(computed: valid/acc, valid/f1_macro, valid/loss, test/acc, test/loss\)" \
    -- "$ctrain" fit tiny.yaml checkpoint.monitor=valid/acuracy ++output_dir=misspelt "${quiet[@]}"
edit_line 8 'optimizer: {type: sgd, lr: abc, momentum: 0.9}' e_type.yaml
expect error_wrong_type 2 "e_type\.yaml:8:[0-9]+: key 'optimizer\.lr': expected a number, got 'abc'" \
    -- "$ctrain" config e_type.yaml
edit_line 6 '  batch_size: 0' e_range.yaml
expect error_out_of_range 2 "e_range\.yaml:6:[0-9]+: key 'data\.batch_size': 0 is out of range" \
    -- "$ctrain" config e_range.yaml
edit_line 8 'optimizer: {type: adamx, lr: 0.1}' e_enum.yaml
expect error_unknown_enum 2 \
    "e_enum\.yaml:8:[0-9]+: key 'optimizer\.type': 'adamx' is not one of: .*sgd.*adam.*adamw" \
    -- "$ctrain" config e_enum.yaml
edit_line 3 '  shuffle: true' e_required.yaml
expect error_missing_required 2 "e_required\.yaml:[0-9]+:[0-9]+: missing required key 'data\.train'" \
    -- "$ctrain" config e_required.yaml
edit_line 7 'model: {type: mlp, hidden: [32}' e_syntax.yaml
expect error_yaml_syntax 2 "e_syntax\.yaml:7:[0-9]+: YAML syntax error" -- \
    "$ctrain" config e_syntax.yaml
edit_line 6 '  batch_size: 32\n  batch_size: 16' e_dup.yaml
expect error_duplicate_key 2 "e_dup\.yaml:7:[0-9]+: duplicate key 'batch_size'" -- \
    "$ctrain" config e_dup.yaml
# messages name the user's file, not ctrain's sources (CTRAIN_DEBUG=1 keeps those for a bug report)
expect error_no_source_location 2 "^ctrain: error: e_type\.yaml:8:[0-9]+: key 'optimizer\.lr'" \
    '![a-z_]+\.c:[0-9]+: ' -- "$ctrain" config e_type.yaml
expect error_debug_source_location 2 '^ctrain: error: [a-z_]+\.c:[0-9]+: e_type\.yaml:8:' -- \
    env CTRAIN_DEBUG=1 "$ctrain" config e_type.yaml
printf 'just a scalar\n' >e_scalar.yaml
expect error_not_a_mapping 2 'e_scalar\.yaml.*expected a mapping' -- "$ctrain" config e_scalar.yaml
expect error_stops_fit_early 2 "unknown key 'optimzer'" -- \
    "$ctrain" fit e_typo.yaml ++output_dir=e_run "${quiet[@]}"
why=
[[ -e e_run ]] && why="fit on an invalid file created e_run/"
verdict error_leaves_no_run_dir "$why"

# ---- component and data errors ----

edit_line 3 '  train: {type: synthetic, kind: blobs, n: 2000, features: 8, classes: 4, colour: red}' \
    e_option.yaml
expect error_dataset_option 2 "e_option\.yaml:3:[0-9]+: unknown key 'data\.train\.colour'" -- \
    "$ctrain" fit e_option.yaml ++output_dir=e_option "${quiet[@]}"
edit_line 3 "  train: {type: idx, images: $work/no-images.gz, labels: $work/no-labels.gz}" \
    e_nofile.yaml
expect error_missing_data_file 2 "e_nofile\.yaml:3:[0-9]+: data\.train: .*no-images\.gz: cannot open" -- \
    "$ctrain" fit e_nofile.yaml ++output_dir=e_nofile "${quiet[@]}"

# every component's keys and type names are checked before any data file is opened: a misspelt
# model key is reported, not the missing file, with the key's own position and a suggestion
cat >e_early.yaml <<EOF
data:
  train: {type: idx, images: $work/no-images.gz, labels: $work/no-labels.gz}
model:
  type: mlp
  actvation: relu
EOF
expect error_component_key_before_data 2 \
    "e_early\.yaml:5:3: unknown key 'model\.actvation' \(did you mean 'model\.activation'\?\)" \
    '!no-images' -- "$ctrain" fit e_early.yaml ++output_dir=e_early "${quiet[@]}"
verdict error_component_key_leaves_no_run_dir "$([[ -e e_early ]] && echo "e_early/ was created")"
# so are a layer's option values (ct_layer_check): not the missing file, the bad value
cat >e_early_value.yaml <<EOF
data:
  train: {type: idx, images: $work/no-images.gz, labels: $work/no-labels.gz}
model:
  type: sequential
  layers: [flatten, {type: linear, out: 4}, {type: dropout, p: 1.5}]
EOF
expect error_layer_value_before_data 2 "e_early_value\.yaml:5:[0-9]+: .*'p'.*1\.5" \
    '!no-images' -- "$ctrain" fit e_early_value.yaml ++output_dir=e_early_value "${quiet[@]}"
# and every split's dataset option values (ct_dataset_check): a bad value in data.valid or
# data.test is reported, not the missing training file, which is never opened
# early_data NAME FILE SPLIT PATTERN: FILE.yaml's line 3 is SPLIT; expect PATTERN at FILE.yaml:3
early_data() {
    cat >"$2.yaml" <<EOF
data:
  train: {type: idx, images: $work/no-images.gz, labels: $work/no-labels.gz}
  $3
model: {type: mlp}
EOF
    expect "$1" 2 "$2\.yaml:3:[0-9]+: $4" '!no-images' '!cannot open' -- \
        "$ctrain" fit "$2.yaml" ++output_dir="$2" "${quiet[@]}"
    verdict "$1_leaves_no_run_dir" "$([[ -e $2 ]] && echo "$2/ was created")"
}
early_data error_dataset_value_before_data e_data_value \
    "test: {type: idx, images: $work/no-t.gz, labels: $work/no-tl.gz, limit: abc}" \
    "data\.test: key 'limit': expected an integer, got 'abc'"
early_data error_dataset_range_before_data e_data_range \
    "valid: {type: synthetic, kind: blobs, n: 0}" "data\.valid: key 'n': 0 is out of range"
early_data error_dataset_enum_before_data e_data_enum \
    "test: {type: csv, path: $work/no.csv, target: y, delimiter: foo}" \
    "data\.test: key 'delimiter': expected one character .*, got 'foo'"
edit_line 7 'model: {type: sequential, layers: [flatten, {type: lnear, out: 4}]}' e_layer.yaml
expect error_layer_type 2 "e_layer\.yaml:7:[0-9]+: key 'model\.layers\.1\.type': unknown layer \
type 'lnear' \(did you mean 'linear'\?\)" -- "$ctrain" config e_layer.yaml
edit_line 12 '  valid: [acuracy]' e_metric.yaml
expect error_metric_type 2 "e_metric\.yaml:12:[0-9]+: key 'metrics\.valid\.0': unknown metric \
type 'acuracy' \(did you mean 'accuracy'\?\)" -- "$ctrain" config e_metric.yaml
expect error_metric_option 2 "^ctrain: error: command line: metrics\.valid\.1: unknown key \
'averag' \(did you mean 'average'\?\)" -- "$ctrain" config tiny.yaml \
    'metrics.valid.1={type: f1, averag: macro}'
# what the data decide (topk's k against 4 classes) is still reported where it was written
expect error_metric_needs_data 2 "^ctrain: error: command line: metrics\.valid\.0: .*k = 5 .*4 classes" \
    -- "$ctrain" config tiny.yaml 'metrics.valid.0=topk'
expect error_schedule_key 2 "command line: unknown key 'scheduler\.t_maxx' \(did you mean \
'scheduler\.t_max'\?\)" -- "$ctrain" config tiny.yaml +scheduler.t_maxx=3
expect error_ema_key 2 "command line: trainer\.ema: unknown key 'decy' \(did you mean 'decay'\?\)" \
    -- "$ctrain" config tiny.yaml ++trainer.ema.decy=0.9
# a value set on the command line in a mapping from the file says where it came from
expect error_component_value_from_command_line 2 \
    "tiny\.yaml:7:1: model \(dropout set on the command line\): key 'dropout': 2 is out of range" \
    -- "$ctrain" config tiny.yaml +model.dropout=2
# metrics for an engine without data would silently never be computed
expect error_metrics_without_data 2 \
    "tiny\.yaml:12:[0-9]+: key 'metrics\.valid': metrics for data\.valid, which is not set" -- \
    "$ctrain" config tiny.yaml '~data.valid'

# normalize: one value for every channel or one per channel, std > 0, each error at the value
edit_line 6 '  batch_size: 32\n  transforms: [{type: normalize, mean: [0, 1], std: [1, 1]}]' \
    e_norm.yaml
expect error_normalize_channels 2 \
    "e_norm\.yaml:7:[0-9]+: key 'data\.transforms\.0\.mean': 2 values, .* \[8\] have 8 channels" -- \
    "$ctrain" fit e_norm.yaml ++output_dir=e_norm "${quiet[@]}"
edit_line 6 '  batch_size: 32\n  transforms: [{type: normalize, mean: 0, std: 0}]' e_std.yaml
expect error_normalize_std 2 "e_std\.yaml:7:[0-9]+: key 'data\.transforms\.0\.std': 0; .*> 0" -- \
    "$ctrain" fit e_std.yaml ++output_dir=e_std "${quiet[@]}"

# a model that does not fit its data is a configuration error before any training, the same
# for fit, eval and predict: an mlp over images without a flatten (idx files of 4 3x3 images)
{ printf '\x00\x00\x08\x03\x00\x00\x00\x04\x00\x00\x00\x03\x00\x00\x00\x03'; head -c 36 /dev/zero; } >img.idx
printf '\x00\x00\x08\x01\x00\x00\x00\x04\x00\x01\x02\x03' >lbl.idx
cat >e_shape.yaml <<'YAML'
data:
  train: {type: idx, images: img.idx, labels: lbl.idx}
  valid: {split: 0.5}
model: {type: mlp, hidden: [4]}
trainer: {max_epochs: 1}
YAML
shape_error="e_shape\.yaml:4:1: key 'model' \(mlp\): a sample \[1,3,3\] of data\.train gives an \
output \[1,3,10\], but cross_entropy takes \[C\] with C >= 10"
expect error_model_shape_fit 2 "$shape_error" 'flatten' -- \
    "$ctrain" fit e_shape.yaml ++output_dir=e_shape "${quiet[@]}"
verdict error_model_shape_leaves_no_run_dir "$([[ -e e_shape ]] && echo "e_shape/ was created")"
expect error_model_shape_eval 2 "$shape_error" -- "$ctrain" eval e_shape.yaml ++output_dir=e_shape
expect error_model_out 2 "command line: key 'model\.layers\.1\.out' \(3\): .*output \[3\]" -- \
    "$ctrain" fit e_shape.yaml ++output_dir=e_shape \
    'model={type: sequential, layers: [flatten, {type: linear, out: 3}]}' "${quiet[@]}"

# out of memory: says so, and names the key that asked for the size (exit 1: the run failed);
# under AddressSanitizer a request this size returns NULL only when asked to
expect error_out_of_memory 1 "command line: key 'model\.layers\.0\.out' \(1000000000000000\) \
makes '0\.weight' \[1000000000000000,8\].*: out of memory allocating [0-9]+ parameters" -- \
    env ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1" \
    "$ctrain" fit tiny.yaml ++output_dir=e_oom "${quiet[@]}" \
    'model={type: sequential, layers: [{type: linear, out: 1000000000000000}, {type: linear, out: 4}]}'
# CONFIG may be a run directory (its config.yaml); another directory is an error that says so
mkdir -p not_a_run
expect error_config_directory 2 'not_a_run: a directory without config\.yaml' -- \
    "$ctrain" config not_a_run

# ---- eval: reads the run directory, writes nothing ----

snapshot run >before.txt
expect eval 0 '^valid \(step [0-9]+\): valid/acc [0-9.]+' '^test \(step [0-9]+\): test/acc' -- \
    "$ctrain" eval tiny.yaml ++output_dir=run
if expect eval_json 0 -- "$ctrain" eval tiny.yaml --json ++output_dir=run; then
    cp out eval.json
    why=
    [[ $(wc -l <eval.json) -eq 1 ]] || why+="not one line; "
    for k in valid/acc valid/loss test/acc step; do
        "$jsonq" "$k" eval.json >/dev/null 2>jq.err || why+="$k: $(cat jq.err); "
    done
    [[ $("$jsonq" checkpoint eval.json 2>/dev/null) == best ]] || why+="checkpoint is not best; "
    [[ -n $why ]] && why+="in: $(cat eval.json)"
    verdict eval_json_parses "$why"
fi
# the latest checkpoint is the end of training: its valid/acc is the last one recorded
if "$ctrain" eval tiny.yaml --json --checkpoint latest ++output_dir=run >eval_latest.json 2>err; then
    got=$("$jsonq" valid/acc eval_latest.json)
    want=$("$jsonq" valid/acc run/metrics.jsonl)
    why=
    [[ -n $got && $got == "$want" ]] || why="valid/acc $got, the run recorded $want"
    verdict eval_latest_matches_fit "$why"
else
    fail eval_latest_matches_fit "exit $?: $(tail_of err)"
fi
snapshot run >after.txt
verdict eval_writes_nothing "$(diff before.txt after.txt | head -n 6 | tr '\n' '|')"
expect eval_no_checkpoint 2 'no checkpoint' -- "$ctrain" eval tiny.yaml ++output_dir=empty_run
why=
[[ -e empty_run ]] && why="eval created empty_run/"
verdict eval_no_checkpoint_writes_nothing "$why"

# a safetensors file of the model's tensors (a checkpoint's model.safetensors here, PyTorch's
# save_file output alike) is scored as it is: the same metrics as its checkpoint
weights=$(latest_dir run)/model.safetensors
if expect eval_weights_file 0 "scoring the weights of .*model\.safetensors" -- \
    "$ctrain" eval tiny.yaml --json --checkpoint "$weights" ++output_dir=run; then
    why=
    [[ $("$jsonq" valid/acc out) == $("$jsonq" valid/acc eval_latest.json) ]] || why+="valid/acc; "
    [[ $("$jsonq" test/loss out) == $("$jsonq" test/loss eval_latest.json) ]] || why+="test/loss; "
    [[ $("$jsonq" weights out) == file ]] || why+="weights is not file; "
    [[ $("$jsonq" step out) == null ]] || why+="step is not null; "
    [[ -n $why ]] && why+="in: $(cat out)"
    verdict eval_weights_file_matches_checkpoint "$why"
fi
expect eval_weights_file_text 0 '^valid \(.*model\.safetensors\): valid/acc [0-9.]+' -- \
    "$ctrain" eval tiny.yaml --checkpoint "$weights" ++output_dir=run
expect eval_weights_file_missing 2 'nothere\.safetensors' -- \
    "$ctrain" eval tiny.yaml --checkpoint nothere.safetensors ++output_dir=run
# another model's tensors: refused, naming the file and what was expected
if "$ctrain" fit tiny.yaml ++output_dir=wide_run trainer.max_epochs=1 'model.hidden=[16]' \
    >wide.out 2>&1; then
    expect eval_weights_file_other_model 2 \
        "wide_run/.*model\.safetensors.*expected the model's tensors by name, each of its shape" -- \
        "$ctrain" eval tiny.yaml --checkpoint "$(latest_dir wide_run)/model.safetensors" \
        ++output_dir=run
else
    fail eval_weights_file_other_model "fit: $(tail_of wide.out)"
fi
# a run with trainer.ema is scored on its EMA weights, as training scored it, and says so;
# --no-ema scores the trained weights
if expect ema_fit 0 -- "$ctrain" fit tiny.yaml ++output_dir=ema_run trainer.max_epochs=1 \
    ++trainer.ema.decay=0.5; then
    expect eval_ema 0 'scoring the EMA weights of checkpoint latest \(step [0-9]+\)' -- \
        "$ctrain" eval tiny.yaml --json --checkpoint latest ++output_dir=ema_run \
        trainer.max_epochs=1 ++trainer.ema.decay=0.5
    why=
    [[ $("$jsonq" valid/loss out) == $("$jsonq" valid/loss ema_run/metrics.jsonl) ]] ||
        why+="valid/loss $("$jsonq" valid/loss out), the run recorded \
$("$jsonq" valid/loss ema_run/metrics.jsonl); "
    [[ $("$jsonq" weights out) == ema ]] || why+="weights is not ema"
    verdict eval_ema_matches_fit "$why"
    cp out eval_ema.json
    expect eval_no_ema 0 'scoring the trained weights of checkpoint latest' -- \
        "$ctrain" eval tiny.yaml --json --no-ema --checkpoint latest ++output_dir=ema_run \
        trainer.max_epochs=1 ++trainer.ema.decay=0.5
    why=
    [[ $("$jsonq" valid/loss out) != $("$jsonq" valid/loss eval_ema.json) ]] ||
        why+="the same valid/loss as the EMA weights; "
    [[ $("$jsonq" weights out) == trained ]] || why+="weights is not trained"
    verdict eval_no_ema_scores_trained_weights "$why"
fi
expect no_ema_not_for_fit 2 '--checkpoint and --no-ema are options of eval and predict' -- \
    "$ctrain" fit tiny.yaml --no-ema ++output_dir=run

# every relative path in an experiment file is taken from the file's folder, and the run's
# config.yaml holds them absolute: a run made from one directory is evaluated from any other,
# by its config.yaml or by the run directory itself
mkdir -p proj/data elsewhere
printf 'a,b,y\n0,1,0\n1,0,1\n1,1,0\n0,0,1\n' >proj/data/t.csv
cat >proj/paths.yaml <<'YAML'
data:
  train: {type: csv, path: ./data/t.csv, target: y}
  valid: {split: 0.5}
model: {type: mlp, hidden: [4]}
trainer: {max_epochs: 1}
logging: {progress: none}
YAML
if expect paths_from_file_folder 0 'done: 1 step,' -- "$ctrain" fit proj/paths.yaml \
    ++output_dir=paths_run; then
    expect paths_config_absolute 0 "path: \"?$here/proj/data/t\.csv\"?\$" \
        "^output_dir: \"?$here/paths_run\"?\$" -- cat paths_run/config.yaml
    expect eval_from_elsewhere 0 '^valid \(step 1\): valid/acc' -- \
        bash -c "cd elsewhere && \"$ctrain\" eval ../paths_run/config.yaml"
    expect eval_run_directory 0 '^valid \(step 1\): valid/acc' -- \
        bash -c "cd /tmp && \"$ctrain\" eval \"$here/paths_run\""
    # a run directory moved elsewhere is still its own output_dir, whatever its name
    mv paths_run "paths moved #1"
    expect eval_moved_run_directory 0 '^valid \(step 1\): valid/acc' -- \
        bash -c "cd /tmp && \"$ctrain\" eval \"$here/paths moved #1\""
    expect eval_moved_run_directory_relative 0 '^valid \(step 1\): valid/acc' -- \
        "$ctrain" eval "paths moved #1"
    mv "paths moved #1" paths_run
    # the same experiment from another directory names the same files: it resumes the run
    expect paths_resume_from_elsewhere 0 'is complete at step 1' -- \
        bash -c "cd elsewhere && \"$ctrain\" fit ../proj/paths.yaml ++output_dir=../paths_run"
fi

# ---- predict: CSV and .npy, classification and regression; reads the run directory only ----

# npy_f32 FILE ROWS COLS: a float32 .npy as np.save writes it, of values cycling through 1, -1,
# 0.5, 2 and 0 (exact in float32, so bytes can be written without a float formatter)
npy_f32() {
    local file=$1 rows=$2 cols=$3 i
    local header="{'descr': '<f4', 'fortran_order': False, 'shape': ($rows, $cols), }"
    while (((10 + ${#header} + 1) % 64)); do header+=' '; done
    header+=$'\n'
    local hl=${#header}
    local pats=('\x00\x00\x80\x3f' '\x00\x00\x80\xbf' '\x00\x00\x00\x3f' '\x00\x00\x00\x40'
        '\x00\x00\x00\x00')
    {
        printf '\x93NUMPY\x01\x00'
        # shellcheck disable=SC2059 # the format is the two escapes of the length
        printf "\\x$(printf %02x $((hl & 255)))\\x$(printf %02x $((hl >> 8)))"
        printf '%s' "$header"
        for ((i = 0; i < rows * cols; i++)); do
            # shellcheck disable=SC2059 # the format is one float's four escaped bytes
            printf "${pats[i % 5]}"
        done
    } >"$file"
}
# npy_values FILE: a .npy's float32 values, one a line (after its header)
npy_values() {
    local hl
    hl=$(od -An -tu2 -j 8 -N 2 "$1" | tr -d ' ')
    od -An -v -tf4 -j $((10 + hl)) "$1" | tr -s ' ' '\n' | sed '/^$/d'
}
# csv_values FILE FIRST: the values of a CSV without its header, from column FIRST on, one a line
csv_values() { tail -n +2 "$1" | cut -d, -f"$2"- | tr ',' '\n'; }
# same_values A B: two lists of numbers, one a line, equal to 1e-6
same_values() {
    paste -d' ' <(echo "$1") <(echo "$2") | awk 'NF != 2 || ($1 - $2 > 1e-6 || $2 - $1 > 1e-6) {
        bad = 1 } END { exit bad || NR == 0 }'
}

npy_f32 x.npy 7 8
snapshot run >before.txt
if expect predict_csv 0 -- "$ctrain" predict tiny.yaml --checkpoint latest --input x.npy \
    --output pred.csv ++output_dir=run; then
    # a row per sample: its index, the class of the largest probability, 4 probabilities
    why=$(awk -F, 'NR == 1 { if ($0 != "index,class,p_0,p_1,p_2,p_3") print "header " $0; next }
        NF != 6 || $1 != NR - 2 { print "row " NR ": " $0; next }
        { s = 0; m = 3; for (i = 3; i <= 6; i++) { s += $i; if ($i > $m) m = i }
          if (s < 0.99999 || s > 1.00001 || $2 != m - 3) print "row " NR ": " $0 }
        END { if (NR != 8) print NR - 1 " rows, expected 7" }' pred.csv | head -n 3)
    verdict predict_csv_rows "$why"
fi
if expect predict_npy 0 -- "$ctrain" predict tiny.yaml --checkpoint latest --input x.npy \
    --output pred.npy ++output_dir=run; then
    why=
    head -c 128 pred.npy | grep -q "'descr': '<f4', 'fortran_order': False, 'shape': (7, 4)" ||
        why="header: $(head -c 128 pred.npy | tr -d '\0' | tr '\n' ' '); "
    same_values "$(npy_values pred.npy)" "$(csv_values pred.csv 3)" ||
        why+="the .npy's probabilities differ from the CSV's"
    verdict predict_npy_matches_csv "$why"
fi
# --output -: the same CSV on stdout (the summary on stderr), no file named '-'
if expect predict_stdout 0 'x\.npy -> stdout with the trained weights of checkpoint latest \(step [0-9]+\)' -- "$ctrain" predict tiny.yaml \
    --checkpoint latest --input x.npy --output - ++output_dir=run; then
    why=$(diff out pred.csv | head -n 4 | tr '\n' '|')
    [[ -e - ]] && why+="a file named '-' was written"
    verdict predict_stdout_is_the_csv "$why"
fi
# --logits: the raw scores, whose softmax is the probabilities, with the same classes
if expect predict_logits 0 'x\.npy -> stdout \(logits\) with' -- "$ctrain" predict tiny.yaml \
    --checkpoint latest --input x.npy --output - --logits ++output_dir=run; then
    why=$(paste -d, pred.csv out | awk -F, 'NR == 1 { if ($7 $9 $12 != "indexlogit_0logit_3")
            print "header " $0; next }
        { s = 0; for (i = 9; i <= 12; i++) s += exp($i)
          if ($2 != $8) print "row " NR ": class " $2 " and " $8
          for (i = 9; i <= 12; i++) { d = exp($i) / s - $(i - 6); if (d > 1e-6 || d < -1e-6)
            print "row " NR ": softmax of the logits " exp($i) / s " != " $(i - 6) } }' | head -n 3)
    verdict predict_logits_softmax_is_probabilities "$why"
fi
expect predict_logits_not_for_prompt 2 '--logits is for predictions of --input, not --prompt' -- \
    "$ctrain" predict tiny.yaml --prompt x --logits ++output_dir=run
expect eval_no_logits 2 'ctrain eval: --input, --output and --logits are options of predict' -- \
    "$ctrain" eval tiny.yaml --logits ++output_dir=run
snapshot run >after.txt
verdict predict_writes_nothing "$(diff before.txt after.txt | head -n 6 | tr '\n' '|')"
expect predict_wrong_shape 2 'x3\.npy: samples of shape \[3\], but the model takes .*\[8\]' -- \
    bash -c "$(declare -f npy_f32); npy_f32 x3.npy 2 3; \"$ctrain\" predict tiny.yaml \
        --checkpoint latest --input x3.npy --output p3.csv ++output_dir=run"
# a NaN in the input: refused with its place (exit 2) and no output written, unless
# data.nonfinite=allow, when its row's probabilities are NaN
npy_f32 xnan.npy 7 8
nan_at=$((10 + $(od -An -tu2 -j 8 -N 2 xnan.npy | tr -d ' ') + (2 * 8 + 3) * 4))
printf '\x00\x00\xc0\x7f' | dd of=xnan.npy bs=1 seek="$nan_at" conv=notrunc status=none
expect predict_nonfinite_input 2 \
    "xnan\.npy: offset $nan_at: element 19 \(row 2, column 3\) is NaN: expected finite values" -- \
    "$ctrain" predict tiny.yaml --checkpoint latest --input xnan.npy --output pnan.csv \
    ++output_dir=run
verdict predict_nonfinite_writes_nothing "$(ls pnan.csv* 2>/dev/null)"
if expect predict_nonfinite_allowed 0 -- "$ctrain" predict tiny.yaml --checkpoint latest \
    --input xnan.npy --output pnan.csv ++output_dir=run ++data.nonfinite=allow; then
    verdict predict_nonfinite_allowed_rows "$(awk -F, '($1 == 2) != ($3 ~ /nan/) { print }' \
        pnan.csv | head -n 2)"
fi
# and in training data: fit stops at open, naming the file, the line and the column
{
    echo 'a,b,y'
    for i in 1 2 3 4 5 6 7; do echo "$i,0.5,$((i % 2))"; done
    echo '8,NaN,0'
} >nan.csv
cat >nan.yaml <<YAML
data:
  train: {type: csv, path: $work/nan.csv, target: y}
model: {type: mlp, hidden: [4]}
trainer: {max_epochs: 1}
YAML
expect fit_nonfinite_csv 2 "nan\.csv:9: column 2 \('b'\): 'NaN' is NaN: expected a finite number" \
    -- "$ctrain" fit nan.yaml ++output_dir=nan_run "${quiet[@]}"
# allowed, the NaN reaches the loss, and the trainer's own guard stops the run (exit 1)
expect fit_nonfinite_csv_allowed 1 'non-finite loss' -- "$ctrain" fit nan.yaml \
    ++output_dir=nan_run2 ++data.train.nonfinite=allow "${quiet[@]}"
# under on_nonfinite skip each skipped step is warned about and counted: in log.txt's epoch
# summaries, metrics.jsonl (train/skipped) and the last line; a valid/loss that is NaN from
# the start sets no best, and the evaluation lines say nothing of one
cat >nan_skip.yaml <<YAML
data:
  train: {type: csv, path: $work/nan.csv, target: y, nonfinite: allow}
  valid: {type: csv, path: $work/nan.csv, target: y, nonfinite: allow}
  batch_size: 2
model: {type: mlp, hidden: [4]}
trainer: {max_epochs: 2, on_nonfinite: skip, steps_per_loop: 1}
checkpoint: {monitor: valid/loss}
YAML
if expect fit_nonfinite_skip 0 'warning: non-finite loss at step [0-9]+, epoch 1: update skipped' \
    'done: 6 steps \(2 skipped\), 2 epochs' '!best' -- \
    "$ctrain" fit nan_skip.yaml ++output_dir=nan_skip "${quiet[@]}"; then
    why=$( (($(grep -c 'update skipped' err) == 2)) || echo "not 2 warnings; "
        grep -q '^epoch 2 done: .* train/skipped 2$' nan_skip/log.txt ||
            echo "no skip count in log.txt's epoch summary; "
        grep -q '"train/skipped":2' nan_skip/metrics.jsonl || echo "no train/skipped record")
    verdict fit_nonfinite_skip_counted "$why"
    # each skipped step leaves an incident bundle: what happened, the batch's samples (row 8 of
    # nan.csv is sample 7), the tensors' statistics and the first parameter with a bad gradient
    j=nan_skip/incidents/step-00000002/incident.json
    why=$([[ $(ls nan_skip/incidents | tr '\n' ' ') == 'step-00000002 step-00000004 ' ]] ||
        echo "bundles $(ls nan_skip/incidents | tr '\n' ' '); "
        for pat in '"kind": "nonfinite"' '"action": "skip"' '"step": 2,' '"epoch": 1,' \
            '"first_nonfinite_grad": "0.weight"' '"samples": \[([0-9]+, )*7[],]' \
            '"name": "0.weight", "shape": \[4, 2\], "nonfinite": [1-9]'; do
            grep -Eq "$pat" "$j" || echo "no $pat in $j; "
        done
        cmp -s nan_skip/config.yaml nan_skip/incidents/step-00000002/config.yaml ||
            echo "no copy of config.yaml; ")
    verdict fit_nonfinite_skip_incident_bundles "$why"
fi
npy_f32 x9.npy 2 9
expect error_model_shape_predict 2 "$shape_error" -- \
    "$ctrain" predict e_shape.yaml --input x9.npy --output p.csv ++output_dir=e_shape

cat >reg.yaml <<'YAML'
seed: 2
data:
  train: {type: synthetic, kind: linear, n: 512, features: 8, outputs: 2, noise: 0.01, seed: 4}
  valid: {split: 0.25}
  batch_size: 32
model: {type: mlp, hidden: [16]}
optimizer: {type: adam, lr: 0.01}
trainer: {max_epochs: 2}
logging: {progress: none}
YAML
if expect regression_fit 0 'valid epoch 2 step 24: .*mse [0-9.]+' -- \
    "$ctrain" fit reg.yaml ++output_dir=reg_run; then
    expect predict_regression_csv 0 -- "$ctrain" predict reg.yaml --input x.npy \
        --output reg.csv ++output_dir=reg_run
    why=$(awk -F, 'NR == 1 { if ($0 != "index,y_0,y_1") print "header " $0; next }
        NF != 3 || $1 != NR - 2 || $2 !~ /^-?[0-9.e+-]+$/ { print "row " NR ": " $0 }
        END { if (NR != 8) print NR - 1 " rows, expected 7" }' reg.csv | head -n 3)
    verdict predict_regression_rows "$why"
    expect predict_regression_npy 0 -- "$ctrain" predict reg.yaml --input x.npy \
        --output reg.npy ++output_dir=reg_run
    why=
    head -c 128 reg.npy | grep -q "'shape': (7, 2)" || why="not 7 x 2; "
    same_values "$(npy_values reg.npy)" "$(csv_values reg.csv 2)" || why+="the .npy differs from the CSV"
    verdict predict_regression_npy_matches_csv "$why"
fi

# ---- predict --prompt: text from a byte-level language model; --temperature 0 is greedy ----
for _ in 1 2 3 4 5 6 7 8; do echo 'the cat sat on the mat and the dog sat on the log'; done >lm.txt
cat >lm.yaml <<'YAML'
data:
  train: {type: text, files: lm.txt, context: 8}
  batch_size: 8
model: {type: gpt, n_layer: 1, n_head: 2, d_model: 16}
trainer: {max_steps: 3, max_epochs: 0}
logging: {progress: none}
YAML
if expect lm_fit 0 -- "$ctrain" fit lm.yaml ++output_dir=lm_run; then
    # the likeliest byte each time: the same text whatever the seed and top-k
    expect predict_greedy 0 '^the c' -- "$ctrain" predict lm.yaml --checkpoint latest \
        --prompt 'the c' --tokens 20 --temperature 0 --seed 1 ++output_dir=lm_run
    cp out greedy1.txt
    expect predict_greedy_other_seed 0 -- "$ctrain" predict lm.yaml --checkpoint latest \
        --prompt 'the c' --tokens 20 --temperature 0 --seed 2 --top-k 3 ++output_dir=lm_run
    why=$(diff greedy1.txt out | head -n 4 | tr '\n' '|')
    [[ $(head -c 25 greedy1.txt | wc -c) -eq 25 ]] || why+="not the prompt and 20 bytes"
    verdict predict_greedy_ignores_seed "$why"
    expect predict_negative_temperature 2 "--temperature: expected a decimal number >= 0, got '-1'" \
        -- "$ctrain" predict lm.yaml --checkpoint latest --prompt 'the c' --temperature -1 \
        ++output_dir=lm_run
    # --prompts-file: each line continued side by side, the first as --prompt continues it; the
    # key/value cache and --no-cache give the same text, greedy or sampled with --top-p
    printf 'the c\r\nsat on\nthe dog sat on the log and the cat\n' >lm_prompts.txt
    lm=(predict lm.yaml --checkpoint latest ++output_dir=lm_run --tokens 20)
    expect predict_prompts_file 0 'sampled with' -- "$ctrain" "${lm[@]}" --prompts-file \
        lm_prompts.txt --temperature 0
    cp out batch_greedy.txt
    why=$(cmp <(head -c 25 batch_greedy.txt) <(head -c 25 greedy1.txt) 2>&1)
    grep -q '^sat on' batch_greedy.txt || why+=" no line for the second prompt"
    verdict predict_prompts_file_first_line_is_the_prompts "$why"
    expect predict_prompts_file_no_cache 0 -- "$ctrain" "${lm[@]}" --prompts-file lm_prompts.txt \
        --temperature 0 --no-cache
    verdict predict_no_cache_same_greedy_text "$(cmp out batch_greedy.txt 2>&1)"
    expect predict_top_p 0 -- "$ctrain" "${lm[@]}" --prompts-file lm_prompts.txt --seed 3 \
        --temperature 1 --top-p 0.9
    cp out top_p.txt
    expect predict_top_p_no_cache 0 -- "$ctrain" "${lm[@]}" --prompts-file lm_prompts.txt \
        --seed 3 --temperature 1 --top-p 0.9 --no-cache
    verdict predict_no_cache_same_sampled_text "$(cmp out top_p.txt 2>&1)"
    # --stop: the continuation ends after the first stop string, which it keeps
    g=$(head -c 25 greedy1.txt)
    g=${g#the c}
    stop=${g:3:2}
    want="the c${g%%"$stop"*}$stop"
    expect predict_stop 0 -- "$ctrain" "${lm[@]}" --prompt 'the c' --temperature 0 --stop "$stop"
    why=""
    [[ $(head -c ${#want} out) == "$want" && $(wc -c <out) -eq $((${#want} + 1)) ]] ||
        why="'$(cat out)' with --stop '$stop', expected '$want'"
    verdict predict_stop_ends_after_the_stop_string "$why"
    expect predict_top_p_zero 2 "--top-p: expected a number in .0, 1., got '0'" -- \
        "$ctrain" "${lm[@]}" --prompt 'the c' --top-p 0
    printf 'the c\n\nsat\n' >lm_empty.txt
    expect predict_prompts_file_empty_line 2 'lm_empty.txt:2: an empty line; expected one prompt per line' \
        -- "$ctrain" "${lm[@]}" --prompts-file lm_empty.txt
    expect predict_prompts_file_missing 2 "--prompts-file 'nope.txt'" -- \
        "$ctrain" "${lm[@]}" --prompts-file nope.txt
    expect fit_no_cache 2 '--no-cache are options of predict' -- "$ctrain" fit lm.yaml --no-cache
fi

# ---- data.classes: names in predict's CSV and the report; names that do not fit are exit 2 ----
mkdir -p named
printf 'north\nsouth\neast, or not\nwest\r\n' >named/classes.txt
awk '{ print } /^data:$/ { print "  classes: classes.txt" }' tiny.yaml >named/exp.yaml
if expect classes_fit 0 -- "$ctrain" fit named/exp.yaml ++output_dir=named_run \
    trainer.max_epochs=1 'metrics.valid=[accuracy, confusion]' "${quiet[@]}"; then
    # the file's path is made absolute from the experiment file's folder
    why=
    grep -qE "^  classes: \"?$work/named/classes.txt\"?$" named_run/config.yaml ||
        why="config.yaml: $(grep classes named_run/config.yaml)"
    verdict classes_path_absolute "$why"
    if expect classes_predict 0 -- "$ctrain" predict named/exp.yaml --input x.npy --output - \
        ++output_dir=named_run; then
        # the name after the class; a name with a comma is quoted
        why=$(awk 'NR == 1 { if ($0 !~ /^index,class,class_name,p_0,p_1,p_2,p_3$/) print "header " $0; next }
            { c = substr($0, index($0, ",") + 1); k = substr(c, 1, 1); rest = substr(c, 3)
              want = k == 0 ? "north," : k == 1 ? "south," : k == 2 ? "\"east, or not\"," : "west,"
              if (index(rest, want) != 1) print "row " NR ": " $0 }
            END { if (NR != 8) print NR - 1 " rows, expected 7" }' out | head -n 3)
        verdict classes_predict_names "$why"
    fi
    if expect classes_report 0 -- "$ctrain" report named_run; then
        why=
        for name in north south 'east, or not' west; do
            grep -q "text-anchor=\"end\">$name</text>" named_run/report.html || why+="no $name; "
        done
        verdict classes_report_labels "$why"
    fi
fi
expect classes_count 2 "command line: key 'data\.classes': 3 class names, but data\.train has 4 classes" \
    -- "$ctrain" fit named/exp.yaml '++data.classes=[a, b, c]' ++output_dir=named_bad
expect classes_twice 2 "key 'data\.classes': classes 1 and 3 are both named 'b'" \
    -- "$ctrain" fit named/exp.yaml '++data.classes=[a, b, c, b]' ++output_dir=named_bad
expect classes_empty_line 2 "classes\.txt:2: an empty line; expected one class name per line" \
    -- bash -c "printf 'a\n\nb\nc\n' >named/classes.txt; \"$ctrain\" fit named/exp.yaml ++output_dir=named_bad"

# ---- logging.csv: metrics.csv holds metrics.jsonl's records in long form ----

# long_form FILE: step,epoch,time,metric,value rows of a metrics.jsonl (null as the CSV's nan)
long_form() {
    sed -e 's/^{//' -e 's/}$//' "$1" | awk -F, '{
        split($1, a, ":"); split($2, b, ":"); split($3, c, ":")
        for (i = 4; i <= NF; i++) {
            n = index($i, ":"); k = substr($i, 1, n - 1); gsub(/"/, "", k); v = substr($i, n + 1)
            if (v == "null") v = "nan"
            print a[2] "," b[2] "," c[2] "," k "," v
        } }'
}
if expect logging_csv_fit 0 -- "$ctrain" fit tiny.yaml ++output_dir=csv_run trainer.max_epochs=1 \
    ++logging.csv=true "${quiet[@]}"; then
    why=
    [[ $(head -n 1 csv_run/metrics.csv) == "step,epoch,time,metric,value" ]] ||
        why="header: $(head -n 1 csv_run/metrics.csv); "
    if [[ $(tail -n +2 csv_run/metrics.csv) != "$(long_form csv_run/metrics.jsonl)" ]]; then
        why+=$(diff <(tail -n +2 csv_run/metrics.csv) <(long_form csv_run/metrics.jsonl) |
            head -n 4 | tr '\n' '|')
    fi
    grep -q ',valid/acc,' csv_run/metrics.csv || why+="no valid/acc rows"
    verdict logging_csv_matches_jsonl "$why"
fi

# ---- inspect ----

expect inspect_run 0 '^run run$' 'latest -> step-0+150' 'best -> step-' \
    'step-0+150: ok, step 150, epoch 3' '^ok$' -- "$ctrain" inspect run
ck=$(latest_dir run)
expect inspect_checkpoint 0 "^checkpoint $ck\$" 'model\.safetensors \([0-9]+ bytes' \
    'ok, step 150, epoch 3, fingerprint [0-9a-f]{16}, best valid/acc 0\.[0-9]+ at step (50|100|150)$' \
    '^  recorded at step 150: train/loss [0-9.]+, lr [0-9.e-]+, .*valid/acc 0\.[0-9]+.*test/acc' \
    '0\.weight +F32 +\[32, 8\]' '2\.weight +F32 +\[4, 32\]' '^ok$' -- "$ctrain" inspect "$ck"
cp -r run damaged
f=$(latest_dir damaged)/model.safetensors
size=$(stat -c %s "$f")
byte=$(od -An -tu1 -j $((size - 5)) -N1 "$f" | tr -d ' ')
# shellcheck disable=SC2059 # the format is the one octal escape of the new byte
printf "\\$(printf '%03o' $(((byte + 1) % 256)))" |
    dd of="$f" bs=1 seek=$((size - 5)) conv=notrunc status=none
expect inspect_damaged_run 1 'DAMAGED' 'CRC-32C' -- "$ctrain" inspect damaged
expect inspect_damaged_checkpoint 1 'DAMAGED' -- "$ctrain" inspect "$(latest_dir damaged)"
expect inspect_not_a_run 2 'neither a run directory' -- "$ctrain" inspect "$work"
expect inspect_missing 2 'not a directory' -- "$ctrain" inspect "$work/nothere"

# ---- diff ----

# two fits of one configuration are identical, bit for bit, tensors and state.json
"$ctrain" fit tiny.yaml ++output_dir=run_twin "${quiet[@]}" >/dev/null 2>&1
expect diff_identical_fits 0 '^6 of 6 tensors identical$' '^state\.json: identical$' '^identical$' \
    '!FILE +TENSOR' -- "$ctrain" diff run run_twin
expect diff_all_lists_identical_tensors 0 'model\.safetensors +0\.weight +F32 +\[32, 8\] +0 of 256' \
    -- "$ctrain" diff run "$(latest_dir run_twin)" --all
"$ctrain" fit tiny.yaml ++output_dir=run_seed2 seed=2 "${quiet[@]}" >/dev/null 2>&1
expect diff_other_seed 1 'model\.safetensors +0\.weight +F32 +\[32, 8\] +[0-9]+ of 256' \
    'optimizer\.safetensors +momentum_buffer' 'state\.json: [0-9]+ keys differ' \
    'state\.loader\.seed +"1" +"2"' '^different$' -- "$ctrain" diff run run_seed2
# one bit of a weights file flipped (element 5 of 0.weight, the file's first tensor): found
cp "$(latest_dir run)/model.safetensors" flip.safetensors
at=$(($(od -An -tu8 -N8 flip.safetensors | tr -d ' ') + 8 + 4 * 5))
byte=$(od -An -tu1 -j "$at" -N1 flip.safetensors | tr -d ' ')
# shellcheck disable=SC2059 # the format is the one octal escape of the new byte
printf "\\$(printf '%03o' $((byte ^ 1)))" | dd of=flip.safetensors bs=1 seek="$at" conv=notrunc status=none
expect diff_flipped_bit 1 '0\.weight +F32 +\[32, 8\] +1 of 256 .* 5 \[0, 5\]: ' \
    '^3 of 4 tensors identical$' 'not compared' -- "$ctrain" diff run flip.safetensors
expect diff_flipped_bit_json 1 '"name":"0\.weight","status":"values"' '"differing":1' \
    '"first":\{"flat":5,"index":\[0,5\]' '"identical":false' \
    -- "$ctrain" diff --json "$(latest_dir run)/model.safetensors" flip.safetensors
"$jsonq" identical out >/dev/null 2>jq.err
verdict diff_json_parses "$([[ -s jq.err ]] && cat jq.err)"
expect diff_within_tolerance 0 'identical within 1e-06' '^identical$' \
    -- "$ctrain" diff run flip.safetensors --tolerance 1e-6
# the checkpoint inspect finds damaged: diff names the tensor and element the byte is in
expect diff_damaged 1 'model\.safetensors +2\.bias +F32 +\[4\] +1 of 4 .* 2 \[2\]: ' \
    -- "$ctrain" diff run damaged
expect diff_not_a_checkpoint 2 'tiny\.yaml: expected a run directory, a checkpoint directory or a safetensors file' \
    -- "$ctrain" diff tiny.yaml run
expect diff_directory_of_other_files 2 'expected a run directory \(with checkpoints/\)' \
    -- "$ctrain" diff run "$work"
expect diff_missing 2 'nothere: ' -- "$ctrain" diff run "$work/nothere"
expect diff_one_path 2 'expected two paths A and B' -- "$ctrain" diff run
expect diff_bad_tolerance 2 'tolerance: expected a number >= 0' -- "$ctrain" diff run run --tolerance -1

# valid means fit would start: `config` checks the components' keys and opens the data too
expect config_checks_components 2 "unknown key 'data\.train\.colour'" -- \
    "$ctrain" config e_option.yaml
expect split_whole 2 "key 'split'.*expected a fraction in \(0, 1\)" -- \
    "$ctrain" config tiny.yaml data.valid.split=1
expect split_leaves_no_training 2 "key 'split'.*leaves 2000 for validation and 0 for training" -- \
    "$ctrain" config tiny.yaml data.valid.split=0.9999

# a dev run (one batch of each engine) is a smoke test: it writes nothing
expect dev_run 0 'done: 1 step,' -- "$ctrain" fit tiny.yaml ++output_dir=dev trainer.dev_run=true \
    "${quiet[@]}"
verdict dev_run_writes_nothing "$([[ -e dev ]] && echo "dev/ was created: $(ls dev)")"

# ---- resuming: 2 epochs, then on to 3 == 3 straight; a changed setting is refused ----

# (t_max fixed: with t_max auto the schedule's length follows max_epochs)
fixed=(scheduler.t_max=150 "${quiet[@]}")
"$ctrain" fit tiny.yaml ++output_dir=resumed trainer.max_epochs=2 "${fixed[@]}" >/dev/null 2>&1
rc1=$?
"$ctrain" fit tiny.yaml ++output_dir=resumed trainer.max_epochs=3 "${fixed[@]}" >resume.out 2>&1
rc2=$?
"$ctrain" fit tiny.yaml ++output_dir=straight "${fixed[@]}" >/dev/null 2>&1
rc3=$?
if [[ $rc1 -ne 0 || $rc2 -ne 0 || $rc3 -ne 0 ]]; then
    fail resume "exits $rc1 $rc2 $rc3: $(tail_of resume.out)"
else
    why=
    grep -qE 'resum(ed|ing) ' resumed/log.txt ||
        why="log.txt does not say it resumed: $(tail_of resumed/log.txt)"
    verdict resume_logged "$why"
    a=$(records resumed/metrics.jsonl | grep '"valid/acc"' | tail -n 1)
    b=$(records straight/metrics.jsonl | grep '"valid/acc"' | tail -n 1)
    why=
    [[ -n $a && $a == "$b" ]] || why="resumed '$a', straight '$b'"
    verdict resume_final_metrics_equal "$why"
    # every record after the resumed checkpoint (step 100) equal, the test evaluation included
    a=$(records resumed/metrics.jsonl | awk -F'[:,]' '$2 + 0 > 100')
    b=$(records straight/metrics.jsonl | awk -F'[:,]' '$2 + 0 > 100')
    why=
    if [[ -z $a ]]; then
        why="no records after step 100"
    elif [[ $a != "$b" ]]; then
        why=$(diff <(echo "$a") <(echo "$b") | head -n 4 | tr '\n' '|')
    fi
    verdict resume_records_equal "$why"
    why=
    cmp -s "$(latest_dir resumed)/model.safetensors" "$(latest_dir straight)/model.safetensors" ||
        why="the final model.safetensors differ"
    verdict resume_weights_equal "$why"
    expect diff_resumed_twin 0 '^6 of 6 tensors identical$' '^state\.json: identical$' \
        '^identical$' -- "$ctrain" diff resumed straight
fi
# samples_per_sec counts training time only: with an evaluation of 200,000 samples every 10
# steps of 32, the rate of a record after an evaluation is several times the samples over the
# wall-clock time between the records (it equalled it when evaluations counted)
cat >sps.yaml <<'YAML'
seed: 1
data:
  train: {type: synthetic, kind: blobs, n: 400000, features: 8, classes: 4, seed: 3}
  valid: {split: 0.5}
  batch_size: 32
model: {type: mlp, hidden: [32]}
optimizer: {type: sgd, lr: 0.1}
trainer: {max_steps: 40, steps_per_loop: 10, valid_every_steps: 10}
checkpoint: {enabled: false}
YAML
why=
"$ctrain" fit sps.yaml ++output_dir=sps "${quiet[@]}" >sps.out 2>&1 || why="$(tail_of sps.out); "
why+=$(grep samples_per_sec sps/metrics.jsonl | awk -F'[,:}]' '
    { for (i = 1; i < NF; i++) { if ($i == "\"time\"") t = $(i + 1); if ($i == "\"samples_per_sec\"") r = $(i + 1) }
      if (NR > 2 && r * (t - last) < 3 * 320) printf "step %d: %g samples/s over %.3f s; ", NR * 10, r, t - last
      last = t }
    END { if (NR != 4) printf "%d records with samples_per_sec; ", NR }')
verdict samples_per_sec_excludes_evaluations "$why"
# the same with accumulation windows, augmentation (random crops and flips drawn per epoch),
# EMA and dropout, on 600 Fashion-MNIST images: all of their state comes back from the checkpoint
fm=/usr/share/datasets/fashion-mnist
cat >aug.yaml <<EOF
seed: 5
data:
  train: {type: idx, images: $fm/train-images-idx3-ubyte.gz, labels: $fm/train-labels-idx1-ubyte.gz, limit: 600}
  valid: {split: 0.2}
  batch_size: 32
  transforms: [{type: scale, a: 0.0039215686}]
  augment: [{type: random_crop, pad: 2}, {type: hflip, p: 0.5}]
model:
  type: sequential
  layers: [flatten, {type: linear, out: 32}, relu, {type: dropout, p: 0.2}, {type: linear, out: 10}]
optimizer: {type: adam, lr: 0.003}
scheduler: {type: cosine, t_max: 24}
trainer: {max_epochs: 3, accum_steps: 2, ema: {decay: 0.9}}
logging: {progress: none}
EOF
"$ctrain" fit aug.yaml ++output_dir=resumed2 trainer.max_epochs=1 >/dev/null 2>&1
rc1=$?
"$ctrain" fit aug.yaml ++output_dir=resumed2 >resume2.out 2>&1
rc2=$?
"$ctrain" fit aug.yaml ++output_dir=straight2 >/dev/null 2>&1
rc3=$?
why=
if [[ $rc1 -ne 0 || $rc2 -ne 0 || $rc3 -ne 0 ]]; then
    why="exits $rc1 $rc2 $rc3: $(tail_of resume2.out)"
elif ! cmp -s "$(latest_dir resumed2)/model.safetensors" "$(latest_dir straight2)/model.safetensors" ||
    ! cmp -s "$(latest_dir resumed2)/ema.safetensors" "$(latest_dir straight2)/ema.safetensors"; then
    why="the final weights or EMA weights differ"
elif [[ $(records resumed2/metrics.jsonl) != "$(records straight2/metrics.jsonl)" ]]; then
    why="metrics.jsonl differs: $(diff <(records resumed2/metrics.jsonl) \
        <(records straight2/metrics.jsonl) | head -n 4 | tr '\n' '|')"
fi
verdict resume_with_accumulation_augmentation_ema "$why"
(cd resumed && find . -type f -print0 | sort -z | xargs -0 sha256sum) >before.txt
expect resume_changed_config 2 'another configuration' 'optimizer\.lr: 0\.1 -> 0\.05' -- \
    "$ctrain" fit tiny.yaml ++output_dir=resumed optimizer.lr=0.05 "${fixed[@]}"
(cd resumed && find . -type f -print0 | sort -z | xargs -0 sha256sum) >after.txt
verdict resume_refused_writes_nothing "$(diff before.txt after.txt | head -n 4 | tr '\n' '|')"
# --restart keeps the refused run under another name and starts over
expect restart 0 "previous run is now $here/resumed\\.old-" -- \
    "$ctrain" fit tiny.yaml ++output_dir=resumed optimizer.lr=0.05 --restart "${fixed[@]}"
why=
old_run=$(ls -d resumed.old-* 2>/dev/null | head -n 1)
[[ -n $old_run && -f $old_run/metrics.jsonl && -d resumed/checkpoints ]] ||
    why="no renamed old run, or no new run: $(ls -d resumed*)"
[[ -z $why ]] && grep -q 'lr: 0.05' resumed/config.yaml || why="${why:-the new config.yaml lacks the new lr}"
verdict restart_keeps_the_old_run "$why"
mv "$old_run" resumed_restarted && rm -rf resumed && mv resumed_restarted resumed

# a finished run asked again trains nothing and records nothing twice
n_test=$(grep -c '"test/acc"' resumed/metrics.jsonl)
expect refit_finished_run 0 'is complete at step 150' -- \
    "$ctrain" fit tiny.yaml ++output_dir=resumed trainer.max_epochs=3 "${fixed[@]}"
verdict refit_records_nothing_twice \
    "$([[ $(grep -c '"test/acc"' resumed/metrics.jsonl) == "$n_test" ]] || echo "test records")"
# an early-stopped run asked again, with a higher max_epochs too, says so and trains nothing;
# a raised early_stopping.patience goes on
es=(+early_stopping.patience=1 +early_stopping.min_delta=10 "${fixed[@]}")
"$ctrain" fit tiny.yaml ++output_dir=stopped "${es[@]}" >/dev/null 2>&1
expect refit_early_stopped_run 0 \
    'stopped early-stopped at step 100: valid/loss did not improve for 1 evaluation \(early_stopping\.patience: 1\); to train on, raise early_stopping\.patience, or start over' \
    '!is complete' 'done: 100 steps, 2 epochs' -- \
    "$ctrain" fit tiny.yaml ++output_dir=stopped "${es[@]}" trainer.max_epochs=6
if expect early_stopped_run_goes_on_under_a_raised_patience 0 'done: 150 steps, 3 epochs' -- \
    "$ctrain" fit tiny.yaml ++output_dir=stopped "${es[@]}" early_stopping.patience=2; then
    "$ctrain" fit tiny.yaml ++output_dir=stopped_straight "${es[@]}" early_stopping.patience=2 \
        >/dev/null 2>&1
    cmp -s "$(latest_dir stopped)/model.safetensors" \
        "$(latest_dir stopped_straight)/model.safetensors"
    verdict early_stopped_run_goes_on_as_one_run "$([[ $? -eq 0 ]] || echo 'the weights differ')"
fi
expect refit_finished_run_after_early_stopping 0 \
    'stopped is complete at step 150 \(to go on, raise trainer\.max_epochs or max_steps\)' -- \
    "$ctrain" fit tiny.yaml ++output_dir=stopped "${es[@]}" early_stopping.patience=5
# t_max: auto is resolved into config.yaml: a longer run would stretch the schedule, so a
# resume with another max_epochs is a changed configuration, and a finished run says so
"$ctrain" fit tiny.yaml ++output_dir=auto_sched trainer.max_epochs=2 "${quiet[@]}" >/dev/null 2>&1
expect refit_finished_auto_schedule 0 \
    'is complete at step 100 \(to go on, raise trainer\.max_epochs or max_steps, giving the schedule the length it has: scheduler\.t_max=100\)' -- \
    "$ctrain" fit tiny.yaml ++output_dir=auto_sched trainer.max_epochs=2 "${quiet[@]}"
expect resume_auto_schedule_refused 2 'scheduler\.t_max: 100 -> 150' -- \
    "$ctrain" fit tiny.yaml ++output_dir=auto_sched trainer.max_epochs=3 "${quiet[@]}"
# a smoke run shorter than the schedule's warm-up runs with the warm-up cut to a tenth of the
# run, said once; an explicit total shorter than the warm-up is refused, saying where it came from
edit_line 9 'scheduler: {type: warmup_cosine, warmup: 100, total: auto}' warm.yaml
warn='warning: scheduler: the run is 20 steps \(trainer\.max_steps=20\), not longer than warmup 100: the warm-up is shortened to 2 steps'
if expect smoke_run_shorter_than_warmup 0 "$warn" 'done: 20 steps' -- \
    "$ctrain" fit warm.yaml ++output_dir=smoke trainer.max_steps=20 "${quiet[@]}"; then
    why=
    [[ $(grep -c 'warning: scheduler' err) == 1 ]] || why+="the warning said $(grep -c 'warning: scheduler' err) times; "
    grep -qE '^  warmup: 2$' smoke/config.yaml || why+="config.yaml lacks warmup: 2; "
    grep -qE '^  total: 20$' smoke/config.yaml || why+="config.yaml lacks total: 20; "
    verdict smoke_run_records_the_fitted_warmup "$why"
    expect smoke_run_refit_names_the_schedule 0 \
        'is complete at step 20 \(to go on, raise trainer\.max_epochs or max_steps, giving the schedule the length it has: scheduler\.total=20 scheduler\.warmup=2\)' -- \
        "$ctrain" fit warm.yaml ++output_dir=smoke trainer.max_steps=20 "${quiet[@]}"
fi
expect schedule_total_shorter_than_warmup 2 \
    "warm\.yaml:9:1: scheduler \(total set on the command line\): key 'total': 20 steps, expected more than warmup \(100\)" -- \
    "$ctrain" fit warm.yaml ++output_dir=smoke_explicit scheduler.total=20 "${quiet[@]}"
edit_line 9 'scheduler: {type: onecycle, total: auto}' onecycle.yaml
expect schedule_auto_length_says_where 2 \
    'scheduler\.total: auto is 2 steps \(trainer\.max_steps=2\): .*phase 1 would have no steps' -- \
    "$ctrain" fit onecycle.yaml ++output_dir=smoke_onecycle trainer.max_steps=2 "${quiet[@]}"

# ---- a non-finite loss stops the run: exit 1 ----

expect nonfinite_exit_1 1 'non-finite' -- \
    "$ctrain" fit tiny.yaml ++output_dir=nan optimizer.lr=1e10 "${quiet[@]}"

# ---- a rollback (on_nonfinite: rollback) leaves the records of the one run that goes on ----

# one NaN row in the training data (allowed): a non-finite loss once an epoch, each rolled back
{
    echo 'a,b,y'
    for i in $(seq 199); do echo "$((i % 7)),0.$((i % 10)),$((i % 2))"; done
    echo '8,NaN,0'
} >rb.csv
head -n 41 rb.csv >rb_valid.csv
cat >rb.yaml <<YAML
seed: 1
data:
  train: {type: csv, path: $work/rb.csv, target: y}
  valid: {type: csv, path: $work/rb_valid.csv, target: y}
  batch_size: 8
  nonfinite: allow
model: {type: mlp, hidden: [4]}
optimizer: {type: sgd, lr: 0.05}
trainer: {max_epochs: 3, steps_per_loop: 3, valid_every_steps: 4, on_nonfinite: rollback,
          max_rollbacks: 10}
logging: {progress: none, csv: true}
YAML
# the steps of a file's records that hold $2, on one line; the first step not above the one
# before it
steps_of() { grep -- "$2" "$1" | sed -E 's/^\{"step":([0-9]+),.*/\1/' | tr '\n' ' '; }
not_increasing() { awk '{ for (i = 2; i <= NF; i++) if ($i <= $(i - 1)) { print $i " after " $(i - 1); exit } }'; }
if expect rollback_fit 0 'rolled back to step [1-9]' -- "$ctrain" fit rb.yaml ++output_dir=rb; then
    why=
    for k in train/loss valid/loss; do
        bad=$(steps_of rb/metrics.jsonl "\"$k\"" | not_increasing)
        [[ -z $bad ]] || why+="metrics.jsonl: $k at step $bad; "
    done
    bad=$(awk -F, '$4 == "train/loss" { print $1 }' rb/metrics.csv | tr '\n' ' ' | not_increasing)
    [[ -z $bad ]] || why+="metrics.csv: train/loss at step $bad; "
    verdict rollback_records_read_as_one_run "$why"
    # stopped at an epoch's end and resumed, it records what it did uninterrupted
    "$ctrain" fit rb.yaml ++output_dir=rb_resumed trainer.max_epochs=1 >/dev/null 2>&1
    "$ctrain" fit rb.yaml ++output_dir=rb_resumed >rb_resumed.out 2>&1
    verdict rollback_resumed_records_equal "$(diff <(records rb_resumed/metrics.jsonl) \
        <(records rb/metrics.jsonl) | head -n 4 | tr '\n' '|')"
fi

# ---- loss spikes (trainer.on_spike): planted bad samples spike the loss at their steps ----

# samples 1023 and 2047 have their inputs scaled by 1000 (synthetic corrupt_every): batches 31
# and 63 of each epoch, steps 32, 64, 96, ... of an uninterrupted run
cat >spike.yaml <<YAML
seed: 1
data:
  train: {type: synthetic, kind: linear, n: 2048, features: 16, seed: 3, corrupt_every: 1024}
  valid: {type: synthetic, kind: linear, n: 512, features: 16, seed: 3}
  batch_size: 32
  shuffle: false
model: {type: mlp, hidden: [32]}
optimizer: {type: adam, lr: 0.003}
trainer: {max_epochs: 4, steps_per_loop: 16, on_spike: {action: warn, window: 20}}
logging: {progress: none}
YAML
# the steps of stderr's spike warnings, on one line
spike_steps() { sed -nE 's/.*loss spike at step ([0-9]+),.*/\1/p' "$1" | tr '\n' ' '; }
# the last valid/loss of a run
last_valid() { grep '"valid/loss"' "$1/metrics.jsonl" | tail -n 1 | sed -E 's/.*"valid\/loss":([0-9.e+-]+).*/\1/'; }
if expect spike_warn 0 'loss spike at step 32, epoch 1: loss [0-9.]+ > median' \
    'done: 256 steps \(8 loss spikes\), 4 epochs' -- "$ctrain" fit spike.yaml ++output_dir=sp_warn; then
    why=$([[ $(spike_steps err) == '32 64 96 128 160 192 224 256 ' ]] ||
        echo "spikes at $(spike_steps err); ")
    grep -q '^epoch 4 done: .* train/spikes 8$' sp_warn/log.txt || why+="no spikes in log.txt; "
    [[ $(grep -c '"train/spikes":8' sp_warn/metrics.jsonl) -ge 1 ]] || why+="no train/spikes 8; "
    verdict spike_warn_at_the_planted_steps_only "$why"
    # warned spikes leave incident bundles too, at the planted steps
    why=$([[ $(ls sp_warn/incidents | sed 's/^step-0*//' | sort -n | tr '\n' ' ') == \
        '32 64 96 128 160 192 224 256 ' ]] || echo "bundles $(ls sp_warn/incidents | tr '\n' ' ')"
        grep -Eq '"kind": "spike"' sp_warn/incidents/step-00000064/incident.json &&
            grep -Eq '"action": "warn"' sp_warn/incidents/step-00000064/incident.json &&
            grep -Eq '"median": [0-9.e+-]+, "deviation": [0-9.e+-]+, "threshold": 6' \
                sp_warn/incidents/step-00000064/incident.json || echo "no spike figures")
    verdict spike_warn_incident_bundles "$why"
fi
expect spike_incidents_capped 0 'incidents: .* holds trainer.max_incidents = 3 bundles' -- \
    "$ctrain" fit spike.yaml ++output_dir=sp_cap trainer.on_spike.action=skip trainer.max_incidents=3
verdict spike_incidents_capped_at_3 "$([[ $(ls sp_cap/incidents | grep -vc tmp) == 3 ]] ||
    echo "bundles: $(ls sp_cap/incidents | tr '\n' ' ')")"
# 512 steps of clean data: no spike
expect spike_none_on_clean_data 0 '!loss spike' 'done: 512 steps, 8 epochs' -- \
    "$ctrain" fit spike.yaml ++output_dir=sp_clean data.train.corrupt_every=0 trainer.max_epochs=8
verdict spike_clean_run_no_incidents "$([[ ! -e sp_clean/incidents ]] || echo "sp_clean/incidents exists")"
expect spike_skip 0 'loss spike at step 32, epoch 1: .*: update skipped' \
    'done: 248 steps \(8 loss spikes\)' -- \
    "$ctrain" fit spike.yaml ++output_dir=sp_skip trainer.on_spike.action=skip
# the epochs' last windows are skipped: their ends come after the checkpoint of the step
# before, and a resume from it must not write the epoch's end records twice
expect spike_skip_resumes_exactly 0 'SIGKILL right after an evaluation +- +identical' \
    'every checkpoint file and metrics record equals the straight run' -- \
    "$ctrain" verify-resume spike.yaml trainer.on_spike.action=skip --steps 128 --cuts 5
expect spike_rollback 0 'loss spike at step 32, epoch 1: .*: rolled back to step 20, skipping 2 data windows' -- \
    "$ctrain" fit spike.yaml ++output_dir=sp_rb trainer.on_spike.action=rollback \
    +trainer.on_spike.skip_batches=2 +trainer.on_spike.cooldown=10 +trainer.on_spike.lr_factor=0.5
"$ctrain" fit spike.yaml ++output_dir=sp_none trainer.on_spike.action=none trainer.max_epochs=8 \
    >/dev/null 2>&1
"$ctrain" fit spike.yaml ++output_dir=sp_rb8 trainer.on_spike.action=rollback trainer.max_epochs=8 \
    >/dev/null 2>&1
# over 8 epochs rollback ends within 5% of the clean run's validation loss (though it makes
# fewer steps); without it, 50% worse or more
verdict spike_rollback_recovers "$(awk -v c="$(last_valid sp_clean)" -v r="$(last_valid sp_rb8)" \
    -v n="$(last_valid sp_none)" 'BEGIN { if (!(r <= 1.05 * c && r >= 0.95 * c && n >= 1.5 * c))
        print "clean " c ", rollback " r ", none " n }')"
# stopped at an epoch's end after spikes and resumed: the records and checkpoint of one run
"$ctrain" fit spike.yaml ++output_dir=sp_rb_cut trainer.on_spike.action=rollback \
    +trainer.on_spike.skip_batches=2 +trainer.on_spike.cooldown=10 +trainer.on_spike.lr_factor=0.5 \
    trainer.max_epochs=2 >/dev/null 2>&1
"$ctrain" fit spike.yaml ++output_dir=sp_rb_cut trainer.on_spike.action=rollback \
    +trainer.on_spike.skip_batches=2 +trainer.on_spike.cooldown=10 +trainer.on_spike.lr_factor=0.5 \
    >/dev/null 2>&1
verdict spike_resumed_records_equal "$(diff <(records sp_rb_cut/metrics.jsonl) \
    <(records sp_rb/metrics.jsonl) | head -n 4 | tr '\n' '|')"
expect spike_resumed_checkpoint_equal 0 '^identical$' -- "$ctrain" diff sp_rb sp_rb_cut

# ---- report: any metrics.jsonl ends at once with a small page; a signal stops it ----

# a flat series at 1e17 leaves no double between its axis ends: the axis is widened around it
# (run under a 10 MB file size limit: a report that does not end dies of SIGXFSZ, not the disk)
mkdir -p flat17
printf '{"step":1,"epoch":0,"train/loss":1e17}\n{"step":2,"epoch":0,"train/loss":1e17}\n' \
    >flat17/metrics.jsonl
if expect report_flat_1e17 0 'report\.html' -- \
    bash -c 'ulimit -f 10240; exec timeout 10 "$@"' _ "$ctrain" report flat17; then
    size=$(stat -c %s flat17/report.html)
    labels=$(grep -oE 'class="ytick"[^<]*<text[^>]*>[^<]*' flat17/report.html | sed 's/.*>//' |
        tr '\n' ' ')
    why=
    [[ $size -lt 65536 ]] || why+="report.html has $size bytes; "
    [[ $labels == *1e+17* ]] || why+="y ticks '$labels', expected 1e+17 among them; "
    verdict report_flat_1e17_ticks "$why"
fi

# several runs: one page comparing them, report.html in the current directory by default
if expect report_compare 0 'wrote report\.html \(comparison of runs' -- "$ctrain" report run cut; then
    why=
    [[ -f run/report.html ]] || why+="run/report.html missing; "
    grep -q 'ctrain comparison of 2 runs' report.html || why+="no comparison heading; "
    # the key that differs, each run's value; the runs named by their directories
    grep -q '<td style="text-align:left">trainer.max_steps</td><td style="text-align:left">0</td><td style="text-align:left">75</td>' \
        report.html || why+="no trainer.max_steps row with 0 and 75; "
    grep -q 'class="legend" [^>]*>run</text>' report.html || why+="legend does not name run; "
    grep -q 'class="legend" [^>]*>cut</text>' report.html || why+="legend does not name cut; "
    grep -q '>best by valid/' report.html || why+="no best values; "
    verdict report_compare_page "$why"
fi
expect report_compare_output 0 'wrote cmp\.html' -- "$ctrain" report run cut --output cmp.html &&
    { [[ -s cmp.html ]] && ok report_compare_output_file || fail report_compare_output_file "no cmp.html"; }
expect report_compare_not_a_run 2 'nothere: not a run directory' -- "$ctrain" report run nothere
mkdir -p not_a_run
expect report_compare_no_metrics 2 'not_a_run: not a run directory: no not_a_run/metrics\.jsonl' -- \
    "$ctrain" report run not_a_run

# SIGINT / SIGTERM while the report reads (metrics.jsonl a pipe this shell keeps open, so the
# report waits for more): it stops, writes nothing and exits as fit does
report_signal() { # NAME SIGNAL RC
    local name=$1 sig=$2 want=$3 dir=report_$1
    mkdir -p "$dir" && mkfifo "$dir/metrics.jsonl"
    exec 3<>"$dir/metrics.jsonl"
    echo '{"step":1,"epoch":0,"train/loss":1}' >&3
    "$ctrain" report "$dir" >"$dir.out" 2>&1 &
    bg_pid=$!
    local caught=
    for _ in $(seq 200); do # until its handler is installed (SigCgt: SIGINT 0x2, SIGTERM 0x4000)
        caught=$(sed -n 's/^SigCgt:[[:space:]]*//p' /proc/"$bg_pid"/status 2>/dev/null)
        [[ -n $caught ]] && (((0x$caught & 0x4002) == 0x4002)) && break
        caught=
        sleep 0.05
    done
    sleep 0.2 # into its read
    kill -s "$sig" "$bg_pid"
    for _ in $(seq 200); do # (a background job ignores SIGINT unless it catches it)
        kill -0 "$bg_pid" 2>/dev/null || break
        sleep 0.05
    done
    kill -KILL "$bg_pid" 2>/dev/null
    wait "$bg_pid"
    local rc=$?
    bg_pid=
    exec 3>&-
    local why=
    [[ -n $caught ]] || why+="SIGINT and SIGTERM never caught; "
    [[ $rc -eq $want ]] || why+="exit $rc, expected $want; "
    grep -q "stopped by $sig; nothing written" "$dir.out" || why+="no 'stopped by $sig' line; "
    [[ -z $(ls "$dir" | grep report) ]] || why+="left $(ls "$dir" | tr '\n' ' '); "
    [[ -n $why ]] && why+=$(tail_of "$dir.out")
    verdict "$name" "$why"
}
report_signal report_sigint SIGINT 130
report_signal report_sigterm SIGTERM 143

# ---- signals: stop at the end of the step, save a checkpoint and the report, exit 130 / 143 ----

# A run long enough to be interrupted (50 epochs of 200000 samples); once stopped, finishing
# its epoch from the saved checkpoint must give exactly what an uninterrupted run gives.
long=(data.train.n=200000 trainer.max_epochs=50 scheduler.t_max=200000 ++logging.progress=plain
    ++logging.interval=0.05)
interrupt() { # NAME SIGNAL RC DIR
    local name=$1 sig=$2 want=$3 dir=$4
    # (OpenBLAS starts an idle thread pool when it loads, before main can block anything; with
    # one thread it starts none, so the count below is exact)
    OPENBLAS_NUM_THREADS=1 "$ctrain" fit tiny.yaml ++output_dir="$dir" "${long[@]}" >"$dir.out" 2>&1 &
    bg_pid=$!
    if ! wait_for "$dir.out" '^train epoch' "$bg_pid"; then
        fail "$name" "training did not start: $(tail_of "$dir.out")"
        kill -KILL "$bg_pid" 2>/dev/null
        wait "$bg_pid" 2>/dev/null
        bg_pid=
        return 1
    fi
    sleep 0.3
    # SIGINT and SIGTERM may be taken by one thread only, never a computing one (oneDNN's JIT
    # kernels point rsp into the heap: a signal frame there corrupts it; tools/ctrain/signals.c)
    local takers=0 threads=0 blk
    for st in /proc/"$bg_pid"/task/*/status; do
        blk=$(sed -n 's/^SigBlk:[[:space:]]*//p' "$st" 2>/dev/null)
        [[ -n $blk ]] || continue
        threads=$((threads + 1))
        (((0x$blk & 0x4002) == 0x4002)) || takers=$((takers + 1))
    done
    kill -s "$sig" "$bg_pid"
    wait "$bg_pid"
    local rc=$?
    bg_pid=
    local why=
    [[ $takers -eq 1 && $threads -ge 2 ]] ||
        why+="$takers of $threads threads can take SIGINT/SIGTERM, expected 1; "
    [[ $rc -eq $want ]] || why+="exit $rc, expected $want; "
    grep -q "stopped by $sig at step" "$dir.out" || why+="no 'stopped by $sig' line; "
    [[ -f $(latest_dir "$dir")/model.safetensors ]] || why+="no checkpoint saved; "
    [[ -f $dir/report.html ]] || why+="no report.html of what ran; "
    "$ctrain" inspect "$dir" >/dev/null 2>&1 || why+="inspect finds it damaged; "
    [[ -n $why ]] && why+=$(tail_of "$dir.out")
    verdict "$name" "$why"
}
if interrupt sigint SIGINT 130 sig_int; then
    # finish the interrupted epoch: epochs done at the checkpoint + 1
    ck=$(latest_dir sig_int)/state.json
    epochs=$(sed -nE 's/^  "epoch": ([0-9]+),?$/\1/p' "$ck" | head -n 1)
    if [[ -z $epochs ]]; then
        fail sigint_resume_exact "cannot read the epoch from $ck"
    else
        rest=(trainer.max_epochs=$((epochs + 1)) ++logging.progress=none)
        "$ctrain" fit tiny.yaml ++output_dir=sig_int "${long[@]}" "${rest[@]}" >sig_resume.out 2>&1
        rc1=$?
        "$ctrain" fit tiny.yaml ++output_dir=sig_straight "${long[@]}" "${rest[@]}" >/dev/null 2>&1
        rc2=$?
        a=$(records sig_int/metrics.jsonl | grep '"valid/acc"' | tail -n 1)
        b=$(records sig_straight/metrics.jsonl | grep '"valid/acc"' | tail -n 1)
        if [[ $rc1 -ne 0 || $rc2 -ne 0 ]]; then
            fail sigint_resume_exact "exits $rc1 $rc2: $(tail_of sig_resume.out)"
        elif ! grep -qE 'resum(ed|ing) ' sig_resume.out; then
            fail sigint_resume_exact "the second fit did not resume: $(tail_of sig_resume.out)"
        elif [[ -z $a || $a != "$b" ]]; then
            fail sigint_resume_exact "resumed '$a', uninterrupted '$b'"
        elif ! cmp -s "$(latest_dir sig_int)/model.safetensors" \
            "$(latest_dir sig_straight)/model.safetensors"; then
            fail sigint_resume_exact "the final model.safetensors differ"
        else
            ok sigint_resume_exact
        fi
    fi
fi
interrupt sigterm SIGTERM 143 sig_term

# ---- the decode engine: a misspelt key is exit 2 naming file:line:col, key and suggestion ----
{ cat tiny.yaml && echo 'decode: {every_step: 5, prompts: [a]}'; } >e_decode.yaml
expect error_decode_key 2 \
    "e_decode\.yaml:[0-9]+:[0-9]+: unknown key 'decode\.every_step' \(did you mean 'decode\.every_steps'\?\)" \
    -- "$ctrain" config e_decode.yaml

# ---- the benchmarks' straggler: a rank that is not one is exit 2 naming the variable ----
expect error_straggler 2 "CTRAIN_STRAGGLER='1x': expected a rank from 0 to 0" \
    -- env CTRAIN_STRAGGLER=1x "$ctrain" fit tiny.yaml ++output_dir=straggler

echo "cli: $passed passed, $failed failed"
[[ $failed -eq 0 && $passed -gt 0 ]]
