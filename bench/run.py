#!/usr/bin/python3
"""Runs each micro-benchmark in ctrain (build/bench/bench_ops) and in PyTorch (Debian's
python3-torch) with the same shapes and thread count, in one run, and prints both medians and
the ratio PyTorch / ctrain (above 1: ctrain is faster).

    /usr/bin/python3 bench/run.py [--build build] [--threads N] [--cases linear,conv2d,...]

Cases (each iteration is forward + backward; mlp_step is a whole training step with Adam):
  linear     x [128, 784] -> Linear(784, 512), sum, backward
  conv2d     x [128, 32, 28, 28] -> Conv2d(32, 64, 3, padding=1), sum, backward
  attention  qkv [16, 128, 384] -> causal self-attention, 4 heads of 32, sum, backward
  mlp_step   batch 1: Linear(784,128) -> ReLU -> Linear(128,10) -> cross-entropy, backward,
             Adam step (framework overhead: the arithmetic is tiny); cycles over 256 samples
  mlp32_step the same with a width-32 MLP: Linear(32,32) -> ReLU -> Linear(32,10)
  loader_plain  one epoch of Fashion-MNIST train (60,000 x 28 x 28 u8), shuffled batches of
             128, converted to f32 in [0, 1]; PyTorch: a Dataset over the same tensors and a
             DataLoader with num_workers=0 (its single-process default)
  loader_aug plus normalize, random crop with padding 2 and random horizontal flip per sample
             (ms per epoch; ratio as for the others)
"""
import argparse
import math
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

CASES = ["linear", "conv2d", "attention", "mlp_step", "mlp32_step", "loader_plain",
         "loader_aug"]
FMNIST = "/usr/share/datasets/fashion-mnist/"


def torch_case(name):
    torch.manual_seed(0)
    if name == "linear":
        x = torch.randn(128, 784, requires_grad=True)
        lin = torch.nn.Linear(784, 512)

        def step():
            lin.zero_grad(set_to_none=True)
            x.grad = None
            lin(x).sum().backward()
        return step
    if name == "conv2d":
        x = torch.randn(128, 32, 28, 28, requires_grad=True)
        conv = torch.nn.Conv2d(32, 64, 3, padding=1)

        def step():
            conv.zero_grad(set_to_none=True)
            x.grad = None
            conv(x).sum().backward()
        return step
    if name == "attention":
        B, T, C, H = 16, 128, 128, 4
        qkv = torch.randn(B, T, 3 * C, requires_grad=True)
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))

        def step():
            qkv.grad = None
            q, k, v = qkv.split(C, dim=2)
            q = q.view(B, T, H, C // H).transpose(1, 2)
            k = k.view(B, T, H, C // H).transpose(1, 2)
            v = v.view(B, T, H, C // H).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
            y.sum().backward()
        return step
    if name in ("mlp_step", "mlp32_step"):
        width, hidden = (784, 128) if name == "mlp_step" else (32, 32)
        model = torch.nn.Sequential(torch.nn.Linear(width, hidden), torch.nn.ReLU(),
                                    torch.nn.Linear(hidden, 10))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        xs = torch.randn(256, 1, width)
        ys = torch.arange(256).remainder(10).view(256, 1)
        i = [0]

        def step():
            k = i[0] % 256
            i[0] += 1
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(xs[k]), ys[k]).backward()
            opt.step()
        return step
    raise ValueError(name)


def read_idx(path):
    import gzip
    import numpy as np
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return torch.from_numpy(np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims)
                            .reshape(shape).copy())


def loader_case(name):
    images = read_idx(FMNIST + "train-images-idx3-ubyte.gz").unsqueeze(1)  # [N, 1, 28, 28]
    labels = read_idx(FMNIST + "train-labels-idx1-ubyte.gz").long()
    aug = name == "loader_aug"

    class DS(torch.utils.data.Dataset):
        def __len__(self):
            return images.shape[0]

        def __getitem__(self, i):
            x = images[i].float() / 255.0
            if aug:
                x = (x - 0.2860) / 0.3530
                x = F.pad(x, (2, 2, 2, 2))
                dy, dx = torch.randint(0, 5, (2,)).tolist()
                x = x[:, dy:dy + 28, dx:dx + 28]
                if torch.rand(()) < 0.5:
                    x = torch.flip(x, (2,))
            return x, labels[i]

    dl = torch.utils.data.DataLoader(DS(), batch_size=128, shuffle=True, num_workers=0)

    def step():
        for x, y in dl:
            pass
    return step


def time_torch(name, budget_s=1.0):
    if name.startswith("loader"):
        step = loader_case(name)
        times = []
        for _ in range(2):
            s = time.perf_counter()
            step()
            times.append((time.perf_counter() - s) * 1e3)
        return statistics.median(times), min(times), 2
    step = torch_case(name)
    t0 = time.perf_counter()
    n = 0
    while n < 3 or (time.perf_counter() - t0 < 0.2 and n < 1000):
        step()
        n += 1
    per = (time.perf_counter() - t0) / n
    iters = max(5, min(20000, int(budget_s / per)))
    times = []
    for _ in range(iters):
        s = time.perf_counter()
        step()
        times.append((time.perf_counter() - s) * 1e3)
    return statistics.median(times), min(times), iters


def time_ctrain(binary, name, threads):
    if name.startswith("loader"):
        binary = os.path.join(os.path.dirname(binary), "bench_loader")
    out = subprocess.run([binary, name, "--threads", str(threads)], check=True,
                         capture_output=True, text=True).stdout.split()
    return float(out[1]), float(out[2]), int(out[3])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--cases", default=",".join(CASES))
    args = ap.parse_args()
    binary = os.path.join(args.build, "bench", "bench_ops")
    if not os.path.exists(binary):
        sys.exit(f"bench/run.py: {binary} not found: build first (make bench does)")
    torch.set_num_threads(args.threads)
    print(f"threads {args.threads}; torch {torch.__version__}; median of repeated runs (ms)")
    print(f"{'case':<10} {'ctrain':>10} {'pytorch':>10} {'pytorch/ctrain':>15}")
    for name in args.cases.split(","):
        c_med, _, _ = time_ctrain(binary, name, args.threads)
        t_med, _, _ = time_torch(name)
        print(f"{name:<10} {c_med:>10.4f} {t_med:>10.4f} {t_med / c_med:>14.2f}x", flush=True)


if __name__ == "__main__":
    main()
