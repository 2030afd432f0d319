#!/usr/bin/python3
"""Data-parallel scaling on one machine: the reference Fashion-MNIST models trained by
`ctrain fit` as 1 process x T threads and as T processes x 1 thread under mpirun (the same
global batch: batch_size / T per rank), alternately, several times in one run. Prints the
median training samples/s of each, the ratio (processes / threads; above 1: MPI is faster) and
the time rank 0 spends in the gradient all-reduce per step.

    /usr/bin/python3 bench/dist.py [--build build] [--np 2] [--steps 400] [--repeats 3]
                                   [--models mlp,cnn] [--mpirun PATH]

The processes run three ways (VARIANTS): the default (on one machine: the optimizer update
sharded between the ranks over shared memory, trainer.shard_optimizer=auto), one blocking
all-reduce after the backward pass with every rank updating every weight, and 1 MiB gradient
buckets all-reduced during the backward pass (what bucket_mb=auto picks across machines).
The "comm ms/step" column is rank 0's time in the exchange: the all-reduce, or the sharded
update's copies, sums and waits.

Samples/s is read from each run's metrics.jsonl (the records after the first, so start-up and
the first window's warm-up are left out); evaluation is switched off (no valid/test engines,
max_steps instead of epochs) so only training steps are timed.
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
MODELS = {
    "mlp": os.path.join(ROOT, "examples", "fashion_mnist_mlp.yaml"),
    "cnn": os.path.join(ROOT, "examples", "fashion_mnist_cnn.yaml"),
}

# The processes' ways of combining gradients: the default (on one machine: the optimizer
# update sharded over shared memory), one blocking all-reduce with every rank updating every
# weight, and 1 MiB buckets all-reduced during the backward pass (auto across machines).
VARIANTS = {
    "sharded": [],
    "all-reduce": ["trainer.shard_optimizer=never", "trainer.bucket_mb=0"],
    "buckets": ["trainer.bucket_mb=1"],
}


def mpirun(path):
    exe = path or shutil.which("mpirun") or shutil.which("mpiexec")
    if not exe:
        sys.exit("dist.py: no mpirun (install openmpi-bin and libopenmpi-dev, then rebuild)")
    out = subprocess.run([exe, "--version"], capture_output=True, text=True)
    flags = []
    if "Open MPI" in out.stdout + out.stderr or "OpenRTE" in out.stdout + out.stderr:
        flags = ["--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,vader"]
    return [exe] + flags


def run(cmd, outdir):
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit("dist.py: %s failed (exit %d):\n%s" % (" ".join(cmd), res.returncode,
                                                       res.stderr[-2000:]))
    recs = []
    with open(os.path.join(outdir, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if "samples_per_sec" in r:
                recs.append(r)
    recs = recs[1:] if len(recs) > 1 else recs
    sps = statistics.median(r["samples_per_sec"] for r in recs)
    comm = [r["comm_ms_per_step"] for r in recs if "comm_ms_per_step" in r]
    return sps, (statistics.median(comm) if comm else 0.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--mpirun", default=None,
                    help="the launcher (default: mpirun on PATH); for MPICH: --build "
                         "build-mpich --mpirun /usr/bin/mpiexec.mpich")
    a = ap.parse_args()
    ctrain = os.path.join(a.build, "ctrain")
    launch = mpirun(a.mpirun)
    tmp = tempfile.mkdtemp(prefix="ctrain-dist-")
    print("%-4s %6s %14s %22s %7s %13s" % ("", "batch", "1x%d samples/s" % a.np,
                                           "%dx1 samples/s" % a.np, "ratio", "comm ms/step"))
    try:
        for name in a.models.split(","):
            cfg = MODELS[name]
            batch = 128
            common = ["~data.valid", "~data.test", "~metrics", "~checkpoint.monitor",
                      "checkpoint.enabled=false", "logging.progress=none",
                      "logging.report=none", "trainer.max_epochs=0",
                      "trainer.max_steps=%d" % a.steps, "trainer.steps_per_loop=25",
                      "scheduler.total=%d" % a.steps]
            threads = []
            procs = {label: ([], []) for label in VARIANTS}
            for k in range(a.repeats):
                out1 = os.path.join(tmp, "%s-t%d" % (name, k))
                threads.append(run([ctrain, "fit", cfg, "output_dir=" + out1,
                                    "threads=%d" % a.np, "data.batch_size=%d" % batch] + common,
                                   out1)[0])
                for label, (sps_list, comm_list) in procs.items():
                    outn = os.path.join(tmp, "%s-p%d-%s" % (name, k, label))
                    sps, comm = run(launch + ["-np", str(a.np), ctrain, "fit", cfg,
                                              "output_dir=" + outn, "threads=1",
                                              "data.batch_size=%d" % (batch // a.np)] +
                                    VARIANTS[label] + common, outn)
                    sps_list.append(sps)
                    comm_list.append(comm)
            t = statistics.median(threads)
            for label, (sps_list, comm_list) in procs.items():
                p = statistics.median(sps_list)
                print("%-4s %6d %14.0f %22s %7.2f %13.3f" % (
                    name, batch, t, "%.0f (%s)" % (p, label), p / t,
                    statistics.median(comm_list)))
            sys.stdout.flush()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
