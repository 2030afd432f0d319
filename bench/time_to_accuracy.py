#!/usr/bin/python3
"""Time to the target accuracy: examples/fashion_mnist_mlp.yaml trained by `ctrain fit` and by
a PyTorch twin with the same hyper-parameters (MLP 784-512-256-10, AdamW 2e-3 with weight decay
1e-4, 100 warm-up steps then cosine, batch 128, 10 epochs, 5,000 training images held out),
both evaluating the 10,000 test images after every epoch. Prints, for each, the wall time from
the start of training to the first epoch whose test accuracy reaches the target (89.0%), and
the ratio.

    /usr/bin/python3 bench/time_to_accuracy.py [--build build] [--target 0.89] [--threads 2]
                                               [--torch-threads 1]

ctrain's time is read from metrics.jsonl (each record's wall-clock time, from the first
training record's time less its steps' share); PyTorch's from its own clock around the same
loop. Data loading before the first step is left out of both.
"""
import argparse
import gzip
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

from models import TORCH_MALLOC  # bench/models.py, beside this script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FMNIST = "/usr/share/datasets/fashion-mnist/"


def ctrain_time(build, target, threads, tmp):
    out = os.path.join(tmp, "ctrain")
    cmd = [os.path.join(build, "ctrain"), "fit", os.path.join(ROOT, "examples",
                                                              "fashion_mnist_mlp.yaml"),
           "output_dir=" + out, "threads=%d" % threads, "trainer.test_every_epochs=1",
           "checkpoint.enabled=false", "logging.progress=none", "logging.report=none"]
    t0 = time.time()
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit("time_to_accuracy.py: ctrain failed:\n" + res.stderr[-2000:])
    recs = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    # training started when the first record's window did: its steps at its samples/s
    first = next(r for r in recs if "train/loss" in r)
    start = first["time"] - first["step"] * 128.0 / first["samples_per_sec"]
    for r in recs:
        if r.get("test/acc", 0) >= target:
            return r["time"] - start, r["epoch"], r["test/acc"], time.time() - t0
    return math.inf, None, max(r.get("test/acc", 0) for r in recs), time.time() - t0


def torch_time(target, threads):
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    torch.manual_seed(0)

    def load(images, labels):
        with gzip.open(FMNIST + images) as f:
            x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)
        with gzip.open(FMNIST + labels) as f:
            y = np.frombuffer(f.read(), np.uint8, offset=8)
        x = (torch.from_numpy(x.copy()).float() / 255.0 - 0.2860) / 0.3530
        return x, torch.from_numpy(y.astype(np.int64))
    x, y = load("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz")
    xt, yt = load("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
    perm = torch.randperm(x.shape[0])
    train_idx = perm[5000:]  # 5,000 held out, as the example's valid split
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                          nn.Linear(256, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-4)
    batch, epochs, warmup = 128, 10, 100
    steps_per_epoch = (train_idx.shape[0] + batch - 1) // batch
    total = steps_per_epoch * epochs

    def lr_at(step):  # linear warm-up, then cosine to 0 over the rest
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    t0 = time.perf_counter()
    best = 0.0
    for epoch in range(1, epochs + 1):
        order = train_idx[torch.randperm(train_idx.shape[0])]
        for i in range(0, order.shape[0], batch):
            idx = order[i:i + batch]
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
            sched.step()
        with torch.no_grad():
            acc = (model(xt).argmax(1) == yt).float().mean().item()
        best = max(best, acc)
        if acc >= target:
            return time.perf_counter() - t0, epoch, acc
    return math.inf, None, best


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--torch":
        print(json.dumps(torch_time(float(sys.argv[2]), int(sys.argv[3]))))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--target", type=float, default=0.89)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--torch-threads", type=int, default=1,
                    help="PyTorch's threads (1 was its faster setting here: docs/benchmarks.md)")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ctrain-tta-")
    try:
        c_time, c_epoch, c_acc, c_wall = ctrain_time(a.build, a.target, a.threads, tmp)
        # glibc's malloc as bench/models.py runs its twins
        env = dict(os.environ)
        env.setdefault("GLIBC_TUNABLES", TORCH_MALLOC)
        res = subprocess.run([sys.executable, os.path.abspath(__file__), "--torch", str(a.target),
                              str(a.torch_threads)], capture_output=True, text=True, env=env)
        if res.returncode != 0:
            sys.exit("time_to_accuracy.py: the PyTorch twin failed:\n" + res.stderr[-2000:])
        t_time, t_epoch, t_acc = json.loads(res.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("target test accuracy %.3f; ctrain %d threads, PyTorch %d" % (a.target, a.threads,
                                                                       a.torch_threads))
    print("ctrain : %.1f s (epoch %s, test acc %.4f)" % (c_time, c_epoch, c_acc))
    print("PyTorch: %.1f s (epoch %s, test acc %.4f)" % (t_time, t_epoch, t_acc))
    if math.isfinite(c_time) and math.isfinite(t_time):
        print("ctrain / PyTorch time: %.2f" % (c_time / t_time))


if __name__ == "__main__":
    main()
