#!/usr/bin/env bash
# portable.sh - the portable build (CT_NATIVE off) runs on older x86-64 CPUs: the ctrain tool
# and the numerical unit tests, under qemu's user-mode emulation of a CPU without AVX (Nehalem:
# the baseline copies of the CT_HOT functions) and of one with AVX2 and FMA but no AVX-512
# (Haswell: the x86-64-v3 copies). A build with -march=native for a newer CPU fails here with
# an illegal instruction. The unit tests compare the fast kernels with their references and
# the golden values of PyTorch, so each copy is checked for its numbers, not only for running.
#
#   portable.sh CTRAIN TEST_DIR        (TEST_DIR: the build's tests/ folder)
#
# OpenBLAS picks its kernels from the CPU's family and model, which it misreads under qemu;
# OPENBLAS_CORETYPE names the kernels of the emulated CPU. Exit 77 (skipped) without qemu.
set -u
ctrain=$1
tests=$2
. "$(dirname "$0")/harness.sh"
qemu=$(command -v qemu-x86_64) || {
    echo "skipped: qemu-x86_64 not found (Debian package qemu-user)"
    exit 77
}
enter_workdir portable

cat >tiny.yaml <<'YAML'
seed: 1
data:
  train: {type: synthetic, kind: blobs, n: 2000, features: 8, classes: 4, seed: 3}
  valid: {split: 0.2}
  batch_size: 32
model: {type: mlp, hidden: [32]}
optimizer: {type: adamw, lr: 0.01}
trainer: {max_epochs: 2, precision: bf16}
YAML

for cpu in Nehalem:Nehalem Haswell:Haswell; do
    model=${cpu%%:*}
    run=("$qemu" -cpu "$model" -E "OPENBLAS_CORETYPE=${cpu##*:}")
    "${run[@]}" "$ctrain" fit tiny.yaml output_dir="run-$model" >"fit-$model.out" 2>&1
    rc=$?
    why=
    [[ $rc -eq 0 ]] || why="exit $rc: $(tail_of "fit-$model.out")"
    [[ -z $why ]] && ! grep -q '^done: 100 steps, 2 epochs' "fit-$model.out" &&
        why="no last line: $(tail_of "fit-$model.out")"
    verdict "fit_should_run_on_$model" "$why"
    for t in test_kernels test_golden_ops test_golden_optim test_golden_losses \
        test_golden_models test_grad_basic test_ops_transformer test_autocast; do
        "${run[@]}" "$tests/$t" >"$t-$model.out" 2>&1
        rc=$?
        why=
        [[ $rc -eq 0 ]] || why="exit $rc: $(tail_of "$t-$model.out")"
        verdict "${t}_should_pass_on_$model" "$why"
    done
done

echo "portable: $passed passed, $failed failed"
[[ $failed -eq 0 && $passed -gt 0 ]]
