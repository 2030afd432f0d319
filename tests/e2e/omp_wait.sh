#!/usr/bin/env bash
# omp_wait.sh - how long OpenMP's idle threads spin (tools/ctrain/omp_wait.c): the tool executes
# itself again once with GOMP_SPINCOUNT set when the environment sets neither OMP_WAIT_POLICY
# nor GOMP_SPINCOUNT; the user's settings are kept; CTRAIN_OMP_REEXEC stops a second execution;
# the process keeps its pid and the run's environment has the setting; under qemu's user-mode
# emulation and valgrind it does not execute again (which would leave the emulator).
#     usage: omp_wait.sh PATH/TO/ctrain [--sanitized]
# Checks that need qemu-x86_64 or valgrind say "skip" without them, and with --sanitized (a
# sanitizer's shadow memory runs under neither).
set -uo pipefail
# shellcheck source=tests/e2e/harness.sh
source "$(dirname "$(realpath "$0")")/harness.sh"

if [[ $# -lt 1 || $# -gt 2 || ($# -eq 2 && $2 != --sanitized) ]]; then
    echo "usage: $0 CTRAIN [--sanitized]" >&2
    exit 2
fi
ctrain=$(realpath "$1")
sanitized=${2:-}
enter_workdir omp_wait
# what the user may have set is the tests' to choose
clean=(env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u CTRAIN_OMP_REEXEC)

if grep -q '^OpenMP: none' <("$ctrain" --version); then
    expect no_openmp_should_say_so 0 '^OpenMP wait: none \(built without OpenMP\)$' -- \
        "${clean[@]}" "$ctrain" --version
    echo "omp_wait: $passed passed, $failed failed (built without OpenMP)"
    [[ $failed -eq 0 ]]
    exit
fi

expect default_should_set_the_spin_count 0 '^OpenMP wait: GOMP_SPINCOUNT=[0-9]+ \(set by ctrain\)$' \
    -- "${clean[@]}" "$ctrain" --version
expect user_wait_policy_should_be_kept 0 \
    '^OpenMP wait: OMP_WAIT_POLICY=passive \(from the environment\)$' '!GOMP_SPINCOUNT' -- \
    "${clean[@]}" OMP_WAIT_POLICY=passive "$ctrain" --version
expect user_spin_count_should_be_kept 0 '^OpenMP wait: GOMP_SPINCOUNT=123 \(from the environment\)$' \
    -- "${clean[@]}" GOMP_SPINCOUNT=123 "$ctrain" --version
expect marker_should_stop_the_execution 0 \
    "^OpenMP wait: libgomp's default \(CTRAIN_OMP_REEXEC is set\)$" -- \
    "${clean[@]}" CTRAIN_OMP_REEXEC=1 "$ctrain" --version

cat >tiny.yaml <<'YAML'
seed: 1
data:
  train: {type: synthetic, kind: blobs, n: 4000, features: 8, classes: 4, seed: 3}
  batch_size: 16
model: {type: mlp, hidden: [32]}
optimizer: {type: adamw, lr: 0.01}
trainer: {max_epochs: 100000}
logging: {progress: none}
YAML

# environ_of PID: the environment PID was executed with, one variable a line
environ_of() { tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null; }

# A fit in the background: its pid ($!) gets GOMP_SPINCOUNT in the environment it was executed
# with (/proc/PID/environ is the one of the last execve, not of setenv), so the run is the same
# process, executed again with the setting.
"${clean[@]}" "$ctrain" fit tiny.yaml output_dir=run-default >fit-default.out 2>&1 &
bg_pid=$!
why="the run's environment never had GOMP_SPINCOUNT"
for _ in $(seq 200); do
    if environ_of "$bg_pid" | grep -qE '^GOMP_SPINCOUNT=[0-9]+$'; then
        why=
        environ_of "$bg_pid" | grep -qx 'CTRAIN_OMP_REEXEC=1' || why="no CTRAIN_OMP_REEXEC=1"
        # ps, top, pgrep and killall see the program's name, not /proc/self/exe's
        for _ in $(seq 100); do
            [[ $(cat "/proc/$bg_pid/comm" 2>/dev/null) == ctrain ]] && break
            sleep 0.05
        done
        comm=$(cat "/proc/$bg_pid/comm" 2>/dev/null)
        [[ $comm == ctrain ]] || why="${why:+$why; }named '$comm', not ctrain"
        break
    fi
    kill -0 "$bg_pid" 2>/dev/null || {
        why="fit ended: $(tail_of fit-default.out)"
        break
    }
    sleep 0.05
done
verdict fit_should_run_in_its_own_pid_with_the_spin_count "$why"
kill -TERM "$bg_pid" 2>/dev/null
wait_gone "$bg_pid" 30 # two of these and two starts fit in the test's 120 s
[[ -z $ended ]] && end_job "$bg_pid" run-default
bg_pid=

# The user's OMP_WAIT_POLICY: once the run has started (its log.txt), its environment is the
# user's, untouched.
"${clean[@]}" OMP_WAIT_POLICY=passive "$ctrain" fit tiny.yaml output_dir=run-user \
    >fit-user.out 2>&1 &
bg_pid=$!
why="the run did not start"
for _ in $(seq 200); do
    if [[ -s run-user/log.txt ]]; then
        why=
        environ_of "$bg_pid" | grep -q '^GOMP_SPINCOUNT=\|^CTRAIN_OMP_REEXEC=' &&
            why="the environment was changed: $(environ_of "$bg_pid" | grep OMP | tr '\n' ' ')"
        environ_of "$bg_pid" | grep -qx 'OMP_WAIT_POLICY=passive' || why="OMP_WAIT_POLICY lost"
        break
    fi
    kill -0 "$bg_pid" 2>/dev/null || {
        why="fit ended: $(tail_of fit-user.out)"
        break
    }
    sleep 0.05
done
verdict fit_should_keep_the_users_wait_policy "$why"
kill -TERM "$bg_pid" 2>/dev/null
wait_gone "$bg_pid" 30 # two of these and two starts fit in the test's 120 s
[[ -z $ended ]] && end_job "$bg_pid" run-user
bg_pid=

# Under an emulator /proc/self/exe names the program but runs the emulator: executing it again
# would run natively, out of the emulated CPU (here: one without AVX-512).
if [[ -n $sanitized ]]; then
    echo "skip qemu_should_not_execute_again: a sanitized build"
elif qemu=$(command -v qemu-x86_64) && [[ $(uname -m) == x86_64 ]]; then
    expect qemu_should_not_execute_again 0 '^cpu: AVX-512 no' \
        "^OpenMP wait: libgomp's default \(not executed again" -- \
        "${clean[@]}" "$qemu" -cpu Nehalem "$ctrain" --version
else
    echo "skip qemu_should_not_execute_again: no qemu-x86_64 (Debian package qemu-user)"
fi
if [[ -n $sanitized ]]; then
    echo "skip valgrind_should_not_execute_again: a sanitized build"
elif valgrind=$(command -v valgrind); then
    expect valgrind_should_not_execute_again 0 "^OpenMP wait: libgomp's default \(not executed again" \
        -- "${clean[@]}" "$valgrind" -q "$ctrain" --version
else
    echo "skip valgrind_should_not_execute_again: no valgrind"
fi

# started as `ld.so ctrain ...`, /proc/self/exe is the loader: executing it again with the
# command's arguments would make the loader try to load the command as a program
loader=$(ls /lib64/ld-linux-x86-64.so.2 /lib/ld-linux-aarch64.so.1 2>/dev/null | head -1)
if [[ -n $sanitized ]]; then
    echo "skip loader_should_not_execute_again: a sanitized build"
elif [[ -n $loader ]]; then
    expect loader_should_not_execute_again 0 "^OpenMP wait: libgomp's default \(not executed again" \
        -- "${clean[@]}" "$loader" "$ctrain" --version
else
    echo "skip loader_should_not_execute_again: no dynamic loader at a known path"
fi

echo "omp_wait: $passed passed, $failed failed"
[[ $failed -eq 0 && $passed -gt 0 ]]
