#!/usr/bin/python3
"""gen_schedule.py - golden learning-rate sequences from PyTorch's schedulers for
tests/golden/test_golden_schedule.c.

Regenerate with:  /usr/bin/python3 tests/golden/gen_schedule.py
(Debian's python3-torch 1.13; no randomness beyond a fixed seed for the plateau metrics.)

Writes tests/golden/fixtures/schedule.bin in gen_golden.py's fixture format (version 1). Each
case is a prefix:
    "<case>/opts"    i64 [n]  the bytes of "type;key=value;key=value" (ctrain's type and options)
    "<case>/base_lr" f32 [1]  the base learning rate given to ct_schedule_create
    "<case>/lr"      f32 [N+1] the optimizer's lr after construction and after each of N steps
    "<case>/metric"  f32 [N]  plateau only: the metric passed to each step (NaN included)
Warmup phases have no PyTorch class that starts at 0 (LinearLR cannot), so they are a LambdaLR
(t / warmup) inside a SequentialLR whose later phases are PyTorch's own schedulers.
"""

import math
import os
import sys
import warnings

import torch
from torch.optim import lr_scheduler as S

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_golden import Fixture  # noqa: E402

BASE = 0.1


def optimizer(lr):
    return torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)


def run(sched, opt, n, metrics=None):
    lrs = [opt.param_groups[0]["lr"]]
    for i in range(n):
        opt.step()
        if metrics is None:
            sched.step()
        else:
            sched.step(float(metrics[i]))
        lrs.append(opt.param_groups[0]["lr"])
    return lrs


def add(fx, name, opts, base, lrs, metrics=None):
    fx.add(name + "/opts", torch.tensor(list(opts.encode()), dtype=torch.int64))
    fx.add(name + "/base_lr", torch.tensor([base], dtype=torch.float32))
    fx.add(name + "/lr", torch.tensor(lrs, dtype=torch.float64).float())
    if metrics is not None:
        fx.add(name + "/metric", metrics)


def warmup(opt, w):
    return S.LambdaLR(opt, lambda t: t / w)


def plateau_metrics(n, seed, rising):
    """A noisy curve with improvements, plateaus and two NaNs, exactly representable in f32."""
    g = torch.Generator().manual_seed(seed)
    m = []
    level = 1.0
    for i in range(n):
        if i in (4, 18, 37):
            level *= 0.6  # an improvement after each plateau
        m.append(level + 0.002 * (torch.rand(1, generator=g).item() - 0.5))
    m = torch.tensor(m, dtype=torch.float32)
    if rising:
        m = 1.0 - m
    m[13] = float("nan")
    m[29] = float("nan")
    return m


def gen():
    fx = Fixture("schedule")
    N = 60

    def simple(name, opts, make, n=N, base=BASE):
        opt = optimizer(base)
        add(fx, name, opts, base, run(make(opt), opt, n))

    simple("constant", "constant", lambda o: S.ConstantLR(o, factor=1.0, total_iters=0))
    simple("constant_factor", "constant;factor=0.5;total=4",
           lambda o: S.ConstantLR(o, factor=0.5, total_iters=4))
    simple("step", "step;step_size=7;gamma=0.5", lambda o: S.StepLR(o, step_size=7, gamma=0.5))
    simple("multistep", "multistep;milestones=5, 12,30;gamma=0.3",
           lambda o: S.MultiStepLR(o, milestones=[5, 12, 30], gamma=0.3))
    simple("exponential", "exponential;gamma=0.95", lambda o: S.ExponentialLR(o, gamma=0.95))
    # periodic past t_max, as PyTorch's recursive form
    simple("cosine", "cosine;t_max=25;eta_min=0.001",
           lambda o: S.CosineAnnealingLR(o, T_max=25, eta_min=0.001))
    simple("cosine_zero", "cosine;t_max=60", lambda o: S.CosineAnnealingLR(o, T_max=60))
    simple("cosine_warmup", "cosine;t_max=40;eta_min=0.002;warmup=10",
           lambda o: S.SequentialLR(o, [warmup(o, 10), S.CosineAnnealingLR(o, 40, 0.002)], [10]))
    simple("warmup_linear", "warmup_linear;warmup=10;total=50;min_lr=0.005",
           lambda o: S.SequentialLR(o, [warmup(o, 10),
                                        S.LinearLR(o, 1.0, 0.005 / BASE, total_iters=40)], [10]))
    simple("warmup_linear_nowarm", "warmup_linear;total=30",
           lambda o: S.LinearLR(o, 1.0, 0.0, total_iters=30))
    simple("warmup_cosine", "warmup_cosine;warmup=8;total=50;min_lr=0.001",
           lambda o: S.SequentialLR(o, [warmup(o, 8), S.CosineAnnealingLR(o, 42, 0.001),
                                        S.LambdaLR(o, lambda t: 0.001 / BASE)], [8, 50]))
    simple("onecycle", "onecycle;total=60",
           lambda o: S.OneCycleLR(o, max_lr=BASE, total_steps=60, cycle_momentum=False), n=59)
    simple("onecycle_linear3",
           "onecycle;max_lr=0.5;total=50;pct_start=0.25;anneal=linear;div_factor=10;"
           "final_div_factor=100;three_phase=true",
           lambda o: S.OneCycleLR(o, max_lr=0.5, total_steps=50, pct_start=0.25,
                                  anneal_strategy="linear", div_factor=10.0,
                                  final_div_factor=100.0, three_phase=True,
                                  cycle_momentum=False), n=49)
    simple("polynomial", "polynomial;total=40;power=2",
           lambda o: S.PolynomialLR(o, total_iters=40, power=2.0))
    # min_lr: PyTorch's PolynomialLR over (base - min_lr), shifted by min_lr
    opt = optimizer(BASE - 0.01)
    lrs = [0.01 + v for v in run(S.PolynomialLR(opt, total_iters=30, power=0.5), opt, N)]
    add(fx, "polynomial_min", "polynomial;total=30;power=0.5;min_lr=0.01", BASE, lrs)

    def plateau(name, opts, metrics, **kw):
        opt = optimizer(BASE)
        add(fx, name, opts, BASE, run(S.ReduceLROnPlateau(opt, **kw), opt, N, metrics), metrics)

    plateau("plateau", "plateau;factor=0.5;patience=3;threshold=0.01;cooldown=2;min_lr=0.004",
            plateau_metrics(N, 1, False), factor=0.5, patience=3, threshold=0.01, cooldown=2,
            min_lr=0.004)
    plateau("plateau_max_abs",
            "plateau;mode=max;threshold_mode=abs;threshold=0.01;patience=2;factor=0.3",
            plateau_metrics(N, 2, True), mode="max", threshold_mode="abs", threshold=0.01,
            patience=2, factor=0.3)
    plateau("plateau_eps", "plateau;patience=1;factor=0.5;min_lr=0.04;eps=0.02",
            plateau_metrics(N, 3, False), patience=1, factor=0.5, min_lr=0.04, eps=0.02)
    plateau("plateau_defaults", "plateau", plateau_metrics(N, 4, False))
    return fx


def main():
    assert sys.byteorder == "little"
    warnings.simplefilter("ignore")  # SequentialLR's deprecated step(0) calls
    fx = gen()
    path = fx.write()
    print("wrote %s: %d arrays, %d bytes (torch %s)"
          % (os.path.relpath(path), len(fx.records), os.path.getsize(path), torch.__version__))
    print("regenerate with: /usr/bin/python3 tests/golden/gen_schedule.py")


if __name__ == "__main__":
    main()
