#!/usr/bin/env bash
# verify_mpi.sh - `ctrain verify-resume --ranks 2` end to end: each fit an MPI job of 2 ranks,
# each cut made by one rank (the ranks in turn) or by every rank, a rank's SIGKILL ending the
# job through the launcher. The real build's resume is found exact through the default launcher
# (an `mpirun` on PATH: the launcher under test); ctrain_broken_resume, whose resume drops the
# training loader's position (CT_TEST_BREAK_RESUME), is found out through --launcher; run under
# a launcher itself, verify-resume says to use --ranks (exit 2); usage errors exit 2.
#     usage: verify_mpi.sh PATH/TO/ctrain PATH/TO/ctrain_broken_resume PATH/TO/mpirun
# shellcheck source=tests/e2e/harness.sh
source "$(dirname "$(realpath "$0")")/harness.sh"
if [[ $# -ne 3 ]]; then
    echo "usage: $0 CTRAIN CTRAIN_BROKEN_RESUME MPIRUN" >&2
    exit 2
fi
ctrain=$(realpath "$1")
broken=$(realpath "$2")
mpirun=$(command -v "$3")
launch="$mpirun -np {R}"
# Open MPI refuses root without these and more ranks than cores without --oversubscribe
# (docs/distributed.md); MPICH's mpiexec needs neither.
if "$mpirun" --version 2>&1 | grep -qE "Open MPI|OpenRTE"; then
    launch+=" --allow-run-as-root --oversubscribe --mca btl self,vader"
fi
enter_workdir verify-mpi
export TMPDIR=$work/tmp
mkdir -p "$TMPDIR" bin
# an `mpirun` on PATH that is the launcher under test (a script: MPICH's finds its helpers beside
# the path it was started by)
printf '#!/bin/sh\nexec %q "$@"\n' "$mpirun" >bin/mpirun
chmod +x bin/mpirun

cat >exp.yaml <<'YAML'
seed: 7
threads: 1
data:
  train: {type: synthetic, kind: blobs, n: 640, features: 16, classes: 4, seed: 2}
  valid: {split: 0.125}
  batch_size: 16
model: {type: mlp, hidden: [32], dropout: 0.1}
optimizer: {type: adam, lr: 0.01}
trainer: {max_epochs: 10, accum_steps: 2, valid_every_steps: 7, ema: {decay: 0.99}}
metrics:
  valid: [accuracy]
YAML

# the real build, through the default launcher: rank 1 killed mid window, rank 0 stopped by
# SIGTERM at an epoch's end, every rank killed after an evaluation, rank 0 killed inside a
# checkpoint write; every row identical, the scratch directory removed
expect verify_resume_ranks_should_pass_on_the_real_build 0 \
    'each fit an MPI job of 2 ranks: .*/mpirun -np 2' \
    'SIGKILL mid accumulation window on rank 1 +[0-9]+-[0-9]+ +identical' \
    'SIGTERM at the last step of epoch [0-9]+ on rank 0 +[0-9]+-[0-9]+ +identical' \
    'SIGKILL right after an evaluation on every rank +[0-9]+-[0-9]+ +identical' \
    'SIGKILL during a checkpoint write on rank 0 +[0-9]+-[0-9]+ +identical' \
    'every checkpoint file and metrics record equals' '!differs|failed' -- \
    env PATH="$work/bin:$PATH" "$ctrain" verify-resume exp.yaml --steps 24 --cuts 4 --ranks 2
leftover=$(ls -A "$TMPDIR")
verdict verify_resume_ranks_should_remove_its_scratch_directory "${leftover:+left: $leftover}"

# the broken resume, through --launcher: found, with the first differing file and record
# (the test-only binary is not beside libctrain_mpi: it is named)
mpi_module=$(dirname "$ctrain")/libctrain_mpi.so.0
[[ -f $mpi_module ]] && export CTRAIN_MPI_LIBRARY=$mpi_module
expect verify_resume_ranks_should_report_a_broken_resume 1 \
    "each fit an MPI job of 2 ranks: $mpirun -np 2" \
    "SIGKILL mid accumulation window on rank 1 +[0-9]+-[0-9]+ +differs: checkpoints/step-[0-9]{8}/[a-z]+\\.safetensors: byte [0-9]+" \
    'resuming does NOT reproduce' -- \
    "$broken" verify-resume exp.yaml --steps 12 --cuts 1 --ranks 2 --launcher "$launch"

# under a launcher itself: refused, naming --ranks (every rank says so and exits 2)
read -ra words <<<"${launch//\{R\}/2}"
"${words[@]}" "$ctrain" verify-resume exp.yaml >out 2>&1
rc=$?
if [[ $rc -eq 2 ]] && grep -q "give the ranks with --ranks R" out; then
    ok verify_resume_should_refuse_a_launcher_and_name_ranks
else
    fail verify_resume_should_refuse_a_launcher_and_name_ranks "exit $rc: $(tail_of out)"
fi

expect verify_resume_should_want_ranks_with_a_launcher 2 '--launcher needs --ranks' -- \
    "$ctrain" verify-resume exp.yaml --launcher "$launch"
expect verify_resume_should_say_when_mpirun_is_missing 2 '--ranks 2: no mpirun on PATH' -- \
    env PATH=/nonexistent "$ctrain" verify-resume exp.yaml --ranks 2
expect verify_resume_should_refuse_a_bad_rank_count 2 '--ranks: expected a whole number' -- \
    "$ctrain" verify-resume exp.yaml --ranks 0
leftover=$(ls -A "$TMPDIR")
verdict verify_resume_ranks_should_leave_nothing_after_errors "${leftover:+left: $leftover}"

echo "verify_mpi.sh: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
