#!/usr/bin/python3
"""The strategies of combining the ranks' work (trainer.strategy, docs/distributed.md) side by
side on one machine, in two parts:

(a) convergence: the reference Fashion-MNIST MLP (examples/fashion_mnist_mlp.yaml) trained the
    same number of epochs by sync on 2 ranks, parameter_server with 1 server and 2 workers
    (-np 3 trainer.ps.servers=1) and local_sgd on 2 ranks (trainer.local_sgd.steps=16); prints
    each run's final test accuracy and its difference to sync's;
(b) stragglers: 3 worker ranks (parameter_server: -np 4 with 1 server) for --steps steps, each
    strategy twice, as it is and with CTRAIN_STRAGGLER=1 (rank 1, a worker, sleeps after each
    step as long as the step took: a worker at half speed); prints the training samples/s of
    each and the share kept with the straggler.

    /usr/bin/python3 bench/async.py [--build build] [--epochs 5] [--steps 300]
                                    [--parts convergence,stragglers] [--mpirun PATH]

Every rank runs one thread (threads=1); the per-rank batch is 64 in both parts. Samples/s is
read from each run's metrics.jsonl as bench/dist.py reads it (the median of the records after
the first; evaluation and checkpoints off in part b). A strategy that fails to run (exit code
and its last error line) is reported in its row and the others go on. --limit-batches N
(trainer.limit_train_batches) shortens the epochs, to check the script end to end.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "examples", "fashion_mnist_mlp.yaml")
BATCH = 64  # per rank (per worker under parameter_server)

# name -> (processes for 2 workers, processes for 3 workers, overrides)
STRATEGIES = {
    "sync": (2, 3, []),
    "parameter_server": (3, 4, ["trainer.strategy=parameter_server", "trainer.ps.servers=1"]),
    "local_sgd": (2, 3, ["trainer.strategy=local_sgd", "trainer.local_sgd.steps=16"]),
}


def mpirun(path):
    exe = path or shutil.which("mpirun") or shutil.which("mpiexec")
    if not exe:
        sys.exit("async.py: no mpirun (install openmpi-bin and libopenmpi-dev, then rebuild)")
    out = subprocess.run([exe, "--version"], capture_output=True, text=True)
    flags = []
    if "Open MPI" in out.stdout + out.stderr or "OpenRTE" in out.stdout + out.stderr:
        flags = ["--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,vader"]
    return [exe] + flags


def cpu():
    """The CPU's model name and flags, from /proc/cpuinfo."""
    model, flags = "unknown", ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model == "unknown":
                    model = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = value.strip()
    except OSError:
        pass
    return model, flags


def run(cmd, outdir, env=None):
    """Runs one fit; its metrics.jsonl records, or None and the reason when it failed."""
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        lines = [l for l in (res.stderr + res.stdout).splitlines() if l.strip()]
        errors = [l for l in lines if "error:" in l]
        return None, "exit %d: %s" % (res.returncode, (errors or lines or [""])[-1])
    with open(os.path.join(outdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f], None


def throughput(recs):
    recs = [r for r in recs if "samples_per_sec" in r]
    recs = recs[1:] if len(recs) > 1 else recs
    return statistics.median(r["samples_per_sec"] for r in recs) if recs else float("nan")


def test_accuracy(recs):
    accs = [r["test/acc"] for r in recs if r.get("test/acc") is not None]
    return accs[-1] if accs else float("nan")


def convergence(a, launch, ctrain, tmp):
    print("(a) convergence: %s, %d epoch%s, batch %d per worker, threads=1" %
          (os.path.relpath(CONFIG, ROOT), a.epochs, "" if a.epochs == 1 else "s", BATCH))
    print("%-18s %5s %13s %15s" % ("strategy", "ranks", "test accuracy", "vs sync (points)"))
    common = ["threads=1", "data.batch_size=%d" % BATCH, "trainer.max_epochs=%d" % a.epochs,
              "checkpoint.enabled=false", "~checkpoint.monitor", "logging.progress=none",
              "logging.report=none"]
    if a.limit_batches:
        common.append("trainer.limit_train_batches=%d" % a.limit_batches)
    base = None
    for name, (np2, _, extra) in STRATEGIES.items():
        out = os.path.join(tmp, "conv-" + name)
        recs, why = run(launch + ["-np", str(np2), ctrain, "fit", CONFIG, "output_dir=" + out] +
                        extra + common, out)
        if recs is None:
            print("%-18s %5d %s" % (name, np2, why))
            continue
        acc = test_accuracy(recs)
        if name == "sync":
            base = acc
        diff = "%+.2f" % ((acc - base) * 100) if base is not None else "-"
        print("%-18s %5d %12.2f%% %15s" % (name, np2, acc * 100, diff))
        sys.stdout.flush()


def stragglers(a, launch, ctrain, tmp):
    cores = os.cpu_count() or 1
    print("(b) stragglers: 3 workers, %d steps, batch %d per worker, threads=1; "
          "CTRAIN_STRAGGLER=1: worker rank 1 at half speed" % (a.steps, BATCH))
    procs = max(p for _, p, _ in STRATEGIES.values())
    if procs > cores:
        print("    note: up to %d processes on %d cores: the ranks oversubscribe the cores, so "
              "the figures include time-slicing between them" % (procs, cores))
    print("%-18s %5s %16s %18s %6s" % ("strategy", "ranks", "samples/s", "with straggler",
                                        "kept"))
    common = ["threads=1", "data.batch_size=%d" % BATCH, "~data.valid", "~data.test",
              "~metrics", "~checkpoint.monitor", "checkpoint.enabled=false",
              "logging.progress=none", "logging.report=none", "trainer.max_epochs=0",
              "trainer.max_steps=%d" % a.steps, "trainer.steps_per_loop=%d" % a.loop,
              "scheduler.total=%d" % a.steps, "scheduler.warmup=%d" % min(100, a.steps // 4)]
    for name, (_, np3, extra) in STRATEGIES.items():
        sps = []
        why = None
        for slow in (False, True):
            out = os.path.join(tmp, "strag-%s-%d" % (name, slow))
            env = dict(os.environ)
            env.pop("CTRAIN_STRAGGLER", None)
            if slow:
                env["CTRAIN_STRAGGLER"] = "1"
            recs, why = run(launch + ["-np", str(np3), ctrain, "fit", CONFIG,
                                      "output_dir=" + out] + extra + common, out, env)
            if recs is None:
                break
            sps.append(throughput(recs))
        if why:
            print("%-18s %5d %s" % (name, np3, why))
            continue
        print("%-18s %5d %16.0f %18.0f %5.0f%%" % (name, np3, sps[0], sps[1],
                                                   100.0 * sps[1] / sps[0]))
        sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--loop", type=int, default=25,
                    help="trainer.steps_per_loop of part b (records to take the median of)")
    ap.add_argument("--limit-batches", type=int, default=0)
    ap.add_argument("--parts", default="convergence,stragglers")
    ap.add_argument("--mpirun", default=None,
                    help="the launcher (default: mpirun on PATH); for MPICH: --build "
                         "build-mpich --mpirun /usr/bin/mpiexec.mpich")
    a = ap.parse_args()
    ctrain = os.path.join(a.build, "ctrain")
    launch = mpirun(a.mpirun)
    model, flags = cpu()
    print("CPU: %s, %d cores" % (model, os.cpu_count() or 1))
    print("flags: %s" % flags)
    print("launcher: %s" % " ".join(launch))
    tmp = tempfile.mkdtemp(prefix="ctrain-async-")
    try:
        parts = a.parts.split(",")
        if "convergence" in parts:
            convergence(a, launch, ctrain, tmp)
        if "stragglers" in parts:
            stragglers(a, launch, ctrain, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
