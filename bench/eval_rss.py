#!/usr/bin/python3
"""Peak RSS of a fit whose evaluations run at batch 1,000: ctrain against PyTorch.

`ctrain fit examples/fashion_mnist_cnn.yaml` for a few training steps (batch 128), then its
validation (5,000 images) and test (10,000 images) evaluations at its eval_batch_size of 1,000,
under `/usr/bin/time -f %M`; and a PyTorch twin of the same run (Debian's python3-torch: the
same CNN, AdamW and batch, the training images as one f32 tensor as bench/models.py loads them,
then the same two evaluations under torch.no_grad() at batch 1,000). Prints each side's peak
RSS in MiB and the ratio. Memory does not depend on the machine's load; the whole run takes
under a minute.

    /usr/bin/python3 bench/eval_rss.py [--build build] [--steps 5]
"""
import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
FMNIST = "/usr/share/datasets/fashion-mnist/"


def peak_rss(args, tmp, cwd):
    rss_file = os.path.join(tmp, "rss")
    res = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss_file] + args, cwd=cwd,
                         capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit("eval_rss.py: %s failed:\n%s" % (args[0], res.stderr[-3000:]))
    return int(open(rss_file).read().split()[-1]) / 1024.0


def torch_twin(steps):
    import gzip
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from models import load_fmnist
    torch.manual_seed(0)
    x, y = load_fmnist(torch)
    valid_x, valid_y = x[-5000:], y[-5000:]  # held out as the config's valid split is
    x, y = x[:-5000], y[:-5000]
    with gzip.open(FMNIST + "t10k-images-idx3-ubyte.gz") as f:
        tx = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(FMNIST + "t10k-labels-idx1-ubyte.gz") as f:
        ty = torch.from_numpy(np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64))
    tx = (torch.from_numpy(tx.copy()).float() / 255.0 - 0.2860) / 0.3530
    model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-4)
    perm = torch.randperm(x.shape[0])
    for s in range(steps):
        idx = perm[s * 128:(s + 1) * 128]
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        for ex, ey in ((valid_x, valid_y), (tx, ty)):
            correct = 0
            for i in range(0, ex.shape[0], 1000):
                out = model(ex[i:i + 1000])
                F.cross_entropy(out, ey[i:i + 1000])
                correct += int((out.argmax(1) == ey[i:i + 1000]).sum())
            print("accuracy %.4f" % (correct / ex.shape[0]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--torch", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch:
        torch_twin(a.steps)
        return
    with tempfile.TemporaryDirectory() as tmp:
        cfg = os.path.join(ROOT, "examples", "fashion_mnist_cnn.yaml")
        mine = peak_rss([os.path.join(a.build, "ctrain"), "fit", cfg,
                         "trainer.max_steps=%d" % a.steps, "output_dir=" + tmp + "/run"],
                        tmp, tmp)
        theirs = peak_rss([sys.executable, os.path.abspath(__file__), "--torch",
                           "--steps", str(a.steps)], tmp, tmp)
    print("peak RSS, CNN fit (%d steps) with evaluations at batch 1000: ctrain %.0f MiB, "
          "PyTorch %s %.0f MiB, ratio %.2f" % (a.steps, mine, "1.13", theirs, mine / theirs))


if __name__ == "__main__":
    main()
