#!/usr/bin/python3
"""The reference models trained end to end, ctrain against PyTorch, side by side in one run.

For each model of examples/ (the Fashion-MNIST MLP and CNN, the byte-level GPT), `ctrain fit`
runs the experiment file for a fixed number of steps with evaluation and checkpoints off, and a
PyTorch twin (Debian's python3-torch; same architecture, PyTorch's default initialisation, same
optimizer and batch) trains the same number of steps. They alternate, in rounds: a model's
round runs ctrain and then PyTorch in each precision, back to back, after measuring the peak
again. The table shows each side's median training throughput (samples/s; tokens/s for the
GPT), the ratio ctrain / PyTorch (above 1: ctrain is faster), the GFLOP/s ctrain achieves and
its share of the machine's peak (the median over the rounds of each run's share of its own
round's peak), and each process's peak RSS. Under each model, ctrain's bf16 throughput over its
fp32 throughput round by round: pairs of runs made seconds apart, where the machine's speed
drifts within minutes.

The run opens with the machine: the CPU model and flags, what `ctrain --version` says of the
instruction sets and OpenMP's waiting threads, and the arithmetic peak measured by
build/bench/bench_peak on ctrain's threads (f32 FMAs; bf16 dot products where the CPU has
them: AMX tile products where it has AMX, else AVX512_BF16's vector dot products). A bf16
row's share is of the bf16 peak where there is one. Then the ceiling the matrix products set:
build/bench/bench_gemm times each GEMM of the MLP's and the GPT's training step alone, on hot
operands, through ctrain's own GEMM; the "GEMMs" column is their GFLOP/s as a share of the same
peak (the CNN's convolutions are not GEMMs: "-"). A step's share can only approach its GEMMs'
share: the rest of the step adds time and no FLOPs.

PyTorch runs at its best setting: in the first round its twin is tried with 1 and with 2 threads
(all cores), each with OMP_WAIT_POLICY unset and =passive in its environment, and the fastest
of the four runs the later rounds; the row names it. The twin's data are in tensors before the
clock starts (the batches are views of a shuffled copy), so its timed loop is the step alone,
and glibc's malloc keeps the memory PyTorch frees each step rather than unmapping it
(TORCH_MALLOC, unless GLIBC_TUNABLES is set: faulting it back in each step made the MLP twin
4 times as slow on a VM with costly page faults).
ctrain runs with its defaults (the config's `threads`: 0, every core, fewer while other
processes keep cores busy); the "ctrain at" column shows the thread counts its runs went
through (the most common), e.g. "2t>1t" for a run that started on 2 threads and settled on 1.

With --precision bf16 (the default runs both, fp32 first in each round) ctrain trains with
`trainer.precision=bf16` and the twin under `torch.autocast("cpu", dtype=torch.bfloat16)`, the
PyTorch way to the same mixed precision (f32 master weights, bf16 matmuls and convolutions).

    /usr/bin/python3 bench/models.py [--build build] [--models mlp,cnn,gpt] [--repeats 3]
                                     [--precision fp32,bf16] [--busy] [--quick] [--steps N]

--busy keeps one core busy for the whole run with a spinning process (both sides under the
same load, the peak measured before it starts); --quick runs a quarter of the steps once (a
whole table in a few minutes); --steps N sets every model's steps (to check the script).
The full table takes about 15 minutes on a 2-core machine.

Throughput is measured the same way on both sides: wall time over the steps after a warm-up
(ctrain: the samples_per_sec records of metrics.jsonl after the first; PyTorch: the steps
after the first 10%), so start-up and data loading are left out of both.
"""
import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FMNIST = "/usr/share/datasets/fashion-mnist/"
# steps per run: ctrain's fp32 runs take 2-5 s (bf16 ones 1-4 s), long enough to ride out a
# slow second
STEPS = {"mlp": 1500, "cnn": 240, "gpt": 80}

# FLOPs per sample (per token for the GPT), two per multiply-add, from the shapes: the forward
# pass, the weight gradients (as many as the forward pass) and the input gradients of every
# layer but the first (whose input needs none). Elementwise work is not counted.
# MLP 784-512-256-10: 2 * (3 * (784*512 + 512*256 + 256*10) - 784*512) = 2,407,424
MLP_FLOPS_PER_SAMPLE = 2 * (3 * (784 * 512 + 512 * 256 + 256 * 10) - 784 * 512)
# CNN conv 1->32 (3x3, 28x28 out), pool, conv 32->64 (3x3, 14x14 out), pool, 3136->128->10:
# multiply-adds conv1 28*28*32*9, conv2 14*14*64*32*9, fc 3136*128 + 128*10;
# 2 * (3 * all - conv1) = 24,995,328
CNN_CONV1 = 28 * 28 * 32 * 9
CNN_FLOPS_PER_SAMPLE = 2 * (3 * (CNN_CONV1 + 14 * 14 * 64 * 32 * 9 + 3136 * 128 + 128 * 10)
                            - CNN_CONV1)
# GPT, 4 layers of width C=128, context T=128, 256 symbols, per token: each layer's linears
# C*3C + C*C + C*4C + 4C*C, its attention scores and weighted sum over the full T x T square
# (masked half included) 2*T*C, the tied head C*256; every matmul's input is an activation, so
# backward is twice forward: 2 * 3 * (4 * (12*C*C + 2*T*C) + C*256) = 5,701,632
GPT_FLOPS_PER_TOKEN = 2 * 3 * (4 * (12 * 128 * 128 + 2 * 128 * 128) + 128 * 256)
FLOPS = {"mlp": MLP_FLOPS_PER_SAMPLE, "cnn": CNN_FLOPS_PER_SAMPLE, "gpt": GPT_FLOPS_PER_TOKEN}
# PyTorch's settings tried in the first round: (threads, OMP_WAIT_POLICY or None for unset)
TORCH_SETTINGS = [(t, w) for t in sorted({1, os.cpu_count() or 1}) for w in (None, "passive")]
# glibc's malloc in every PyTorch twin (unless GLIBC_TUNABLES is set): blocks up to 32 MiB from
# the heap, and no trimming of it. PyTorch frees and allocates its step's tensors each step; by
# default glibc maps large blocks afresh and hands the freed top of the heap back to the
# system, and the next step faults the memory in again, which on a VM where a page fault is
# costly made the MLP twin's step 4 times as slow and the CNN's 2.8 times (ctrain's step
# allocates nothing). The trim threshold alone is worse: setting it fixes glibc's mmap
# threshold at 128 KiB, and the GPT twin then ran 8 times as slow.
TORCH_MALLOC = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967295"


def cpu_line():
    model, flags = "?", []
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name") and model == "?":
            model = line.split(":", 1)[1].strip()
        if line.startswith("flags"):
            have = line.split(":", 1)[1].split()
            flags = [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16") if f in have]
            break
    return "cpu: %s (%d cores; %s)" % (model, os.cpu_count(), " ".join(flags))


def version_lines(ctrain):
    """`ctrain --version`'s lines on the instruction sets and OpenMP's waiting threads."""
    res = subprocess.run([ctrain, "--version"], capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit("models.py: %s --version failed:\n%s" % (ctrain, res.stderr[-2000:]))
    keep = ("ctrain ", "cpu:", "oneDNN:", "OpenMP", "compiler:")
    return [l for l in res.stdout.splitlines() if l.startswith(keep)]


def peak(build, threads, ms):
    """{"fp32": (isa, GFLOP/s), "bf16": (isa, GFLOP/s) or None} from bench_peak."""
    exe = os.path.join(build, "bench", "bench_peak")
    if not os.path.exists(exe):
        sys.exit("models.py: %s not found: build first (cmake --build %s)" % (exe, build))
    res = subprocess.run([exe, "--threads", str(threads), "--ms", str(ms)],
                         capture_output=True, text=True, check=True)
    out = {}
    for line in res.stdout.splitlines():
        _, kind, isa, _, gflops = line.split()
        out[kind] = (isa, float(gflops)) if isa != "none" else None
    return out


def gemm_ceiling(build, threads, ms, precision):
    """{model: GFLOP/s} of the model's GEMMs alone (bench_gemm), for mlp and gpt."""
    exe = os.path.join(build, "bench", "bench_gemm")
    if not os.path.exists(exe):
        sys.exit("models.py: %s not found: build first (cmake --build %s)" % (exe, build))
    res = subprocess.run([exe, "--threads", str(threads), "--ms", str(ms), "--precision",
                          precision], capture_output=True, text=True, check=True)
    out = {}
    for line in res.stdout.splitlines():
        _, model, _, _, gflops = line.split()
        out[model] = float(gflops)
    return out


def start_busy():
    """One process spinning on one core until killed, or until this one is gone."""
    spin = ("import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n"
            "    for _ in range(1000000):\n        pass\n")
    return subprocess.Popen([sys.executable, "-c", spin])


def ctrain_run(ctrain, name, steps, tmp, precision):
    cfg = os.path.join(ROOT, "examples", {"mlp": "fashion_mnist_mlp.yaml",
                                          "cnn": "fashion_mnist_cnn.yaml",
                                          "gpt": "char_gpt.yaml"}[name])
    out = os.path.join(tmp, "ctrain-" + name)
    shutil.rmtree(out, ignore_errors=True)
    loop = max(steps // 10, 1)
    args = [ctrain, "fit", cfg, "output_dir=" + out, "~data.valid",
            "checkpoint.enabled=false", "logging.progress=none", "logging.report=none",
            "trainer.max_epochs=0", "trainer.max_steps=%d" % steps,
            "trainer.steps_per_loop=%d" % loop, "scheduler.total=%d" % steps,
            "scheduler.warmup=%d" % loop, "trainer.precision=" + precision]
    if name != "gpt":  # no evaluation engines: nothing to monitor
        args += ["~data.test", "~metrics", "~checkpoint.monitor"]
    else:
        args += ["~trainer.valid_every_steps", "~checkpoint.monitor"]
    rss_file = os.path.join(tmp, "rss")
    res = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss_file] + args,
                         capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit("models.py: ctrain failed (exit %d):\n%s" % (res.returncode, res.stderr[-3000:]))
    recs = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))
            if "samples_per_sec" in l]
    recs = recs[1:] if len(recs) > 1 else recs
    sps = statistics.median(r["samples_per_sec"] for r in recs)
    rss_mib = int(open(rss_file).read().split()[-1]) / 1024.0
    # the thread counts the run went through (`threads: 2 -> 1 at step ...` lines)
    counts = [l.split("threads: ", 1)[1].split(" at ")[0] for l in res.stderr.splitlines()
              if "info: threads: " in l]
    at = "%dt" % len(os.sched_getaffinity(0))
    for c in counts:
        at += ">" + c.split(" -> ")[1] + "t"
    return sps, rss_mib, at


# ---- the PyTorch twins: run in a child process
# (python3 models.py --torch NAME STEPS THREADS PRECISION)
# so that each side's peak RSS is its own ----

def load_fmnist(torch):
    import numpy as np
    with gzip.open(FMNIST + "train-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(FMNIST + "train-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    perm = torch.randperm(x.shape[0]).numpy()  # shuffled once, as bytes
    x, y = x[perm], y[perm]
    x = (torch.from_numpy(x).float() / 255.0 - 0.2860) / 0.3530
    return x, torch.from_numpy(y.astype(np.int64))


def fortune_files():
    """The text files char_gpt.yaml trains on (its `files:` list)."""
    files, take = [], False
    for line in open(os.path.join(ROOT, "examples", "char_gpt.yaml")):
        s = line.strip()
        if s.startswith("files:"):
            take = True
            continue
        if take and s.startswith("- "):
            files.append(s[2:].strip())
        elif take:
            break
    return files


def torch_twin(name, steps, threads, precision):
    import contextlib
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    if name in ("mlp", "cnn"):
        x, y = load_fmnist(torch)  # shuffled
        batch = 128
        if name == "mlp":
            model = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(),
                                  nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
        else:
            model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                  nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                  nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(),
                                  nn.Linear(128, 10))
        opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-4)

        # views of the shuffled data: the timed loop only takes the next
        batches = [(x[i:i + batch], y[i:i + batch])
                   for i in range(0, x.shape[0] - batch + 1, batch)]

        def loss_of(xb, yb):
            return F.cross_entropy(model(xb), yb)
        per_step = batch
        clip = None
    else:
        data = b"".join(open(p, "rb").read() for p in fortune_files())
        ids = torch.frombuffer(bytearray(data), dtype=torch.uint8).long()
        T, C, H, L, batch = 128, 128, 4, 4, 16

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.ln_1 = nn.LayerNorm(C)
                self.c_attn = nn.Linear(C, 3 * C)
                self.c_proj = nn.Linear(C, C)
                self.ln_2 = nn.LayerNorm(C)
                self.fc = nn.Linear(C, 4 * C)
                self.proj = nn.Linear(4 * C, C)
                self.drop = nn.Dropout(0.1)
                self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))

            def forward(self, h):
                B, t, _ = h.shape
                q, k, v = self.c_attn(self.ln_1(h)).split(C, dim=2)
                q = q.view(B, t, H, C // H).transpose(1, 2)
                k = k.view(B, t, H, C // H).transpose(1, 2)
                v = v.view(B, t, H, C // H).transpose(1, 2)
                att = (q @ k.transpose(-2, -1)) / (C // H) ** 0.5
                att = att.masked_fill(~self.mask[:t, :t], float("-inf"))
                att = self.drop(F.softmax(att, dim=-1))
                a = (att @ v).transpose(1, 2).contiguous().view(B, t, C)
                h = h + self.drop(self.c_proj(a))
                return h + self.drop(self.proj(F.gelu(self.fc(self.ln_2(h)))))

        class GPT(nn.Module):
            def __init__(self):
                super().__init__()
                self.wte = nn.Embedding(256, C)
                self.wpe = nn.Embedding(T, C)
                self.drop = nn.Dropout(0.1)
                self.h = nn.ModuleList(Block() for _ in range(L))
                self.ln_f = nn.LayerNorm(C)
                self.head = nn.Linear(C, 256, bias=False)
                self.head.weight = self.wte.weight  # tied, as ctrain's gpt

            def forward(self, idx):
                pos = torch.arange(idx.shape[1])
                h = self.drop(self.wte(idx) + self.wpe(pos))
                for b in self.h:
                    h = b(h)
                return self.head(self.ln_f(h))

        model = GPT()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
        n_win = (ids.shape[0] - 1) // T

        batches = []  # every batch the run takes, gathered before the clock starts
        while len(batches) < steps:
            perm = torch.randperm(n_win)
            for i in range(0, n_win - batch + 1, batch):
                starts = perm[i:i + batch] * T
                w = ids[starts[:, None] + torch.arange(T + 1)[None, :]]
                batches.append((w[:, :-1], w[:, 1:]))

        def loss_of(xb, yb):
            return F.cross_entropy(model(xb).view(-1, 256), yb.reshape(-1))
        per_step = batch * T
        clip = 1.0
    if precision == "bf16":
        def autocast():
            return torch.autocast("cpu", dtype=torch.bfloat16)
    else:
        autocast = contextlib.nullcontext
    warm = max(steps // 10, 1)
    t0 = None
    for s in range(steps):
        if s == warm:
            t0 = time.perf_counter()
        xb, yb = batches[s % len(batches)]
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = loss_of(xb, yb)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
    dt = time.perf_counter() - t0
    print(json.dumps({"sps": (steps - warm) * per_step / dt}))


def torch_run(name, steps, setting, tmp, precision):
    threads, wait = setting
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    env.pop("GOMP_SPINCOUNT", None)  # a setting for ctrain's side (docs/performance.md)
    env.setdefault("GLIBC_TUNABLES", TORCH_MALLOC)
    if wait:
        env["OMP_WAIT_POLICY"] = wait
    rss_file = os.path.join(tmp, "rss-torch")
    res = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss_file, sys.executable,
                          os.path.abspath(__file__), "--torch", name, str(steps), str(threads),
                          precision],
                         capture_output=True, text=True, env=env)
    if res.returncode != 0:
        sys.exit("models.py: the PyTorch twin failed:\n" + res.stderr[-3000:])
    sps = json.loads(res.stdout.strip().splitlines()[-1])["sps"]
    return sps, int(open(rss_file).read().split()[-1]) / 1024.0


def setting_name(setting):
    threads, wait = setting
    return "%dt%s" % (threads, " " + wait if wait else "")


def main():
    if len(sys.argv) == 6 and sys.argv[1] == "--torch":
        torch_twin(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--models", default="mlp,cnn,gpt")
    ap.add_argument("--repeats", type=int, default=None, help="rounds (default 3; 1 with --quick)")
    ap.add_argument("--precision", default="fp32,bf16")
    ap.add_argument("--busy", action="store_true", help="one core kept busy for the whole run")
    ap.add_argument("--quick", action="store_true", help="a quarter of the steps, one round")
    ap.add_argument("--steps", type=int, default=None, help="every model's steps")
    a = ap.parse_args()
    repeats = a.repeats or (1 if a.quick else 3)
    ctrain = os.path.join(a.build, "ctrain")
    tmp = tempfile.mkdtemp(prefix="ctrain-models-")
    started = time.perf_counter()
    unit = {"mlp": "samples/s", "cnn": "samples/s", "gpt": "tokens/s"}
    ncpu = os.cpu_count() or 1
    print(cpu_line())
    print("%s --version:" % ctrain)
    for line in version_lines(ctrain):
        print("  " + line)
    pk = peak(a.build, ncpu, 50 if a.quick else 200)
    print("peak: fp32 %.1f GFLOP/s (%s FMA, %d threads); bf16 %s" % (
        pk["fp32"][1], pk["fp32"][0], ncpu,
        "%.1f GFLOP/s (%s dot products)" % (pk["bf16"][1], pk["bf16"][0]) if pk.get("bf16")
        else "none (no AVX512_BF16 or AMX)"))
    print("PyTorch twins: GLIBC_TUNABLES=%s" % os.environ.get("GLIBC_TUNABLES", TORCH_MALLOC))
    precisions = a.precision.split(",")
    ceiling = {}
    for precision in precisions:
        if precision == "bf16" and not pk.get("bf16"):
            continue
        ceiling[precision] = gemm_ceiling(a.build, ncpu, 25 if a.quick else 100, precision)
        top = pk["bf16"] if precision == "bf16" else pk["fp32"]
        print("GEMMs alone (bench_gemm), %s: %s" % (precision, ", ".join(
            "%s %.1f GFLOP/s (%.0f%%)" % (k, v, 100.0 * v / top[1])
            for k, v in sorted(ceiling[precision].items()))))
    busy = start_busy() if a.busy else None
    if busy:
        print("busy: one spinning process (pid %d) for the whole run" % busy.pid)
    print("%-9s %6s %10s %9s %10s %11s %7s %8s %6s %6s %11s %11s" % (
        "", "steps", "ctrain", "ctrain at", "PyTorch", "PyTorch at", "ratio", "GFLOP/s", "peak",
        "GEMMs", "ctrain MiB", "PyTorch MiB"))
    sys.stdout.flush()
    round_peaks = []
    try:
        for name in a.models.split(","):
            steps = a.steps or (max(STEPS[name] // 4, 10) if a.quick else STEPS[name])
            runs = {p: {"mine": [], "share": [], "theirs": {s: [] for s in TORCH_SETTINGS},
                        "rss_mine": [], "rss_theirs": [], "ats": []} for p in precisions}
            for _ in range(repeats):
                # the peak again at the start of each round (not under --busy, whose peak is
                # the quiet machine's): a share compares a run with the machine of its minute
                pk_round = pk if busy else peak(a.build, ncpu, 50 if a.quick else 200)
                round_peaks.append(pk_round)
                # both precisions in each round, back to back: their ratio pairs runs made
                # seconds apart, not minutes (this VM's speed drifts within minutes)
                for precision in precisions:
                    r = runs[precision]
                    sps, rss, at = ctrain_run(ctrain, name, steps, tmp, precision)
                    r["ats"].append(at)
                    r["mine"].append(sps * (128 if name == "gpt" else 1))
                    r["rss_mine"].append(rss)
                    top = (pk_round["bf16"] if precision == "bf16" and pk_round.get("bf16")
                           else pk_round["fp32"])
                    r["share"].append(r["mine"][-1] * FLOPS[name] * 1e-9 / top[1])
                    # every setting in the first round, then only the fastest (the whole
                    # table stays near 15 minutes)
                    theirs = r["theirs"]
                    tried = [k for k in theirs if theirs[k]]
                    settings = TORCH_SETTINGS if not tried else (
                        max(tried, key=lambda k: statistics.median(theirs[k])),)
                    for setting in settings:
                        sps, rss = torch_run(name, steps, setting, tmp, precision)
                        theirs[setting].append(sps)
                        r["rss_theirs"].append(rss)
            for precision in precisions:
                r = runs[precision]
                theirs = r["theirs"]
                best = max((k for k in theirs if theirs[k]),
                           key=lambda k: statistics.median(theirs[k]))
                m, t = statistics.median(r["mine"]), statistics.median(theirs[best])
                gflops = m * FLOPS[name] * 1e-9
                top = pk["bf16"] if precision == "bf16" and pk.get("bf16") else pk["fp32"]
                g = ceiling.get(precision, {}).get(name)
                print("%-9s %6d %10.0f %9s %10.0f %11s %7.2f %8.1f %5.0f%% %6s %11.0f %11.0f"
                      "  (%s)" % (
                          name + " " + precision, steps, m,
                          max(set(r["ats"]), key=r["ats"].count), t, setting_name(best), m / t,
                          gflops, 100.0 * statistics.median(r["share"]),
                          "%.0f%%" % (100.0 * g / top[1]) if g else "-", max(r["rss_mine"]),
                          max(r["rss_theirs"]), unit[name]))
            if "fp32" in runs and "bf16" in runs and runs["bf16"]["mine"]:
                pairs = [b / f for f, b in zip(runs["fp32"]["mine"], runs["bf16"]["mine"])]
                print("%-9s ctrain bf16 / fp32, round by round: %s (median %.2f)" % (
                    name, " ".join("%.2f" % q for q in pairs), statistics.median(pairs)))
            sys.stdout.flush()
        if not busy and round_peaks:
            f32 = [q["fp32"][1] for q in round_peaks]
            b16 = [q["bf16"][1] for q in round_peaks if q.get("bf16")]
            print("peak at the rounds' starts: fp32 %.0f-%.0f GFLOP/s%s" % (
                min(f32), max(f32), "; bf16 %.0f-%.0f" % (min(b16), max(b16)) if b16 else ""))
        print("(%.1f minutes)" % ((time.perf_counter() - started) / 60.0))
    finally:
        if busy:
            busy.kill()
            busy.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
