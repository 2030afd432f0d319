#!/usr/bin/env bash
# Installs the build into a temporary prefix, builds the example plugin (examples/plugin) with
# its Makefile against the installed headers (found through pkg-config), and trains its
# experiment with the installed `ctrain fit`, as a user writing a plugin would.
# Usage: test-plugin.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
pc=$(find "$prefix" -name ctrain.pc | head -n 1)
[[ -n "$pc" ]] || { echo "ctrain.pc was not installed"; exit 1; }
PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH
ctrain=$prefix/bin/ctrain

# From a checkout, without pkg-config knowing ctrain: the Makefile takes the checkout's headers.
mkdir -p "$prefix/checkout/examples"
cp -r "$src/examples/plugin" "$prefix/checkout/examples/plugin"
ln -s "$(realpath "$src/include")" "$prefix/checkout/include"
rm -f "$prefix/checkout/examples/plugin/libmytask.so"
PKG_CONFIG_PATH= PKG_CONFIG_LIBDIR=/nonexistent make -s -C "$prefix/checkout/examples/plugin" \
    CFLAGS="-O2 -Wall -Wextra -Werror" >/dev/null
[[ -f "$prefix/checkout/examples/plugin/libmytask.so" ]] ||
    { echo "make in a checkout's examples/plugin built no libmytask.so"; exit 1; }

# A copy of the example without anything built in the source tree.
cp -r "$src/examples/plugin" "$prefix/plugin"
cd "$prefix/plugin"
rm -f libmytask.so
make CFLAGS="-O2 -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wstrict-prototypes \
    -Wmissing-prototypes -Werror"
[[ -f libmytask.so ]] || { echo "the Makefile built no libmytask.so"; exit 1; }
if readelf -d libmytask.so | grep -q 'NEEDED.*libctrain'; then
    echo "libmytask.so is linked with libctrain; a plugin takes the library from ctrain"
    exit 1
fi

# Train it: exit 0, and the plugin's data and loss really were used.
set +e
"$ctrain" fit experiment.yaml ++output_dir="$prefix/run" ++logging.progress=none >fit.out 2>&1
rc=$?
set -e
cat fit.out
if [[ $rc -ne 0 ]]; then
    echo "ctrain fit experiment.yaml: exit $rc, expected 0"
    if grep -q 'undefined symbol' fit.out; then
        echo "HINT: the ctrain executable does not export the library's functions to plugins" \
            "(it needs ENABLE_EXPORTS / -rdynamic, with every library object linked in)"
    fi
    exit 1
fi
grep -q '(800 training samples' fit.out || { echo "not the plugin's 1000 samples less 20%"; exit 1; }
acc=$(grep '"test/acc"' "$prefix/run/metrics.jsonl" | tail -n 1 |
    sed -E 's/.*"test\/acc":([0-9.e+-]+).*/\1/')
awk -v a="$acc" 'BEGIN { exit !(a >= 0.9) }' ||
    { echo "test/acc '$acc' on XOR: expected at least 0.9"; exit 1; }

# The plugin's metric ran on the validation data: valid/error is the complement of valid/acc.
last_valid=$(grep '"valid/error"' "$prefix/run/metrics.jsonl" | tail -n 1)
verr=$(sed -E 's/.*"valid\/error":([0-9.e+-]+).*/\1/' <<<"$last_valid")
vacc=$(sed -E 's/.*"valid\/acc":([0-9.e+-]+).*/\1/' <<<"$last_valid")
awk -v e="$verr" -v a="$vacc" 'BEGIN { d = e + a - 1; exit !(e != "" && d < 1e-9 && d > -1e-9) }' ||
    { echo "valid/error '$verr' and valid/acc '$vacc' do not add up to 1: $last_valid"; exit 1; }

# The plugin's model made the weights: its tensor names are in the checkpoint.
"$ctrain" inspect "$prefix/run/checkpoints/$(head -n1 "$prefix/run/checkpoints/latest")" >inspect.out
grep -q 'in\.weight' inspect.out || { echo "the checkpoint lacks my_model's in.weight"; exit 1; }

# The plugin's dataset checks its options through the library (ct_options_check): exit 2.
set +e
"$ctrain" fit experiment.yaml ++output_dir="$prefix/bad" ++data.train.colour=red >bad.out 2>&1
rc=$?
set -e
cat bad.out
[[ $rc -eq 2 ]] || { echo "an unknown plugin dataset option: exit $rc, expected 2"; exit 1; }
grep -q "unknown key 'colour'" bad.out || { echo "the error does not name 'colour'"; exit 1; }
# early CMD OVERRIDE PATTERN: `ctrain CMD` with OVERRIDE and a training file that does not
# exist exits 2 with an error matching PATTERN, and never opened that file: the option was
# checked before any data.
early() {
    set +e
    "$ctrain" "$1" experiment.yaml ++output_dir="$prefix/bad" "$2" \
        'data.train={type: idx, images: /nonexistent/i.gz, labels: /nonexistent/l.gz}' \
        >bad.out 2>&1
    local rc=$?
    set -e
    cat bad.out
    [[ $rc -eq 2 ]] || { echo "$1 $2: exit $rc, expected 2"; exit 1; }
    grep -q "$3" bad.out || { echo "$1 $2: the error does not match '$3'"; exit 1; }
    if grep -q 'nonexistent' bad.out; then
        echo "$1 $2: data.train was opened before the option was checked"
        exit 1
    fi
}
# ... and, through the plugins' checks, before any split's data are opened: a dataset's (in
# data.test), a model's, a metric's.
early fit '++data.test.n=abc' "data\.test.*key 'n': expected an integer, got 'abc'"
early fit 'model.hidden=abc' "key 'hidden': expected an integer"
for cmd in config fit; do
    early "$cmd" 'metrics.valid.1={plugin: ./libmytask.so, symbol: my_metric, colour: red}' \
        "metrics\.valid\.1: unknown key 'colour'"
done
# A plugin model's output is checked as a built-in's, before any training: one sample through
# its forward against what the loss takes (the built-in cross-entropy here: the plugin task set
# aside), a configuration error naming the key and both shapes.
set +e
"$ctrain" fit experiment.yaml ++output_dir="$prefix/bad" ++task=classification ++model.out=1 \
    >bad.out 2>&1
rc=$?
set -e
cat bad.out
[[ $rc -eq 2 ]] || { echo "a plugin model with too few outputs: exit $rc, expected 2"; exit 1; }
grep -q "key 'model\.out' (1): a sample \[2\] of data\.train gives an output \[1\]" bad.out ||
    { echo "the error does not name model.out and both shapes"; exit 1; }
# A symbol of the wrong kind is refused by its tag (exit 2, saying what it is), never called:
# a dataset named as the model, a function named as the task, a struct of another plugin ABI.
cat > abi.c <<'C'
#include <ctrain/ctrain.h>
int not_a_task(void);
int not_a_task(void) { return 1; }
const ct_metric_vtable old_metric = {.tag = CT_PLUGIN_TAG(3) - CT_PLUGIN_ABI, .name = "old"};
C
# shellcheck disable=SC2046
cc -std=c11 -fPIC -shared $(pkg-config --cflags ctrain) -o libabi.so abi.c
early fit '++model.symbol=my_data' \
    "symbol 'my_data' of plugin '.*libmytask.so' is a ctrain dataset .ct_dataset_vtable., not a model"
early fit 'metrics.valid.1={plugin: ./libabi.so, symbol: old_metric}' \
    "built for plugin ABI 0, this ctrain takes 1: rebuild the plugin"
set +e
"$ctrain" fit experiment.yaml ++output_dir="$prefix/bad" '++task={plugin: ./libabi.so, symbol: not_a_task}' \
    >bad.out 2>&1
rc=$?
set -e
cat bad.out
[[ $rc -eq 2 ]] || { echo "a function named as the task: exit $rc, expected 2"; exit 1; }
grep -q "symbol 'not_a_task' of plugin .* is not a ctrain task: expected a ct_task whose first member is .tag = CT_PLUGIN_TASK" bad.out ||
    { echo "the error does not say the symbol is no task"; exit 1; }
echo "plugin: ok (test/acc $acc, valid/error $verr)"
