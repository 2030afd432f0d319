#!/usr/bin/python3
"""gen_optim.py - golden values from PyTorch's optimizers and clip_grad_norm_ for
tests/golden/test_golden_optim.c.

Regenerate with:  /usr/bin/python3 tests/golden/gen_optim.py
(Debian's python3-torch; generated with torch 1.13, CPU, float32, fixed seeds.)

Writes tests/golden/fixtures/optim.bin in gen_golden.py's fixture format (version 1).

Two parameters, "a.weight" [5, 3] and "a.bias" [3], start from "init/<name>" and take 10
steps with the fixed gradients "grads/<name>" ([10, ...]: one slice per step). Each case
"<case>" stores:
    <case>/kind     i64 [1]   ct_optim_kind (0 SGD, 1 Adam, 2 AdamW, 3 RMSprop, 4 Adagrad)
    <case>/hp       f32 [14]  lr, weight_decay, momentum, dampening, nesterov, beta1, beta2, eps,
                              alpha, centered, lr_decay, initial_accumulator_value,
                              group_lr_scale, group_weight_decay
                              (a group "*.bias" with those settings when group_lr_scale >= 0)
    <case>/<name>   f32 [10, ...]  the parameter after each step
Every hyperparameter is rounded to float32 before PyTorch sees it, so that both sides use the
same numbers (ctrain keeps them as floats).
clip_grad_norm_: "clip/grad/<name>" gradients, "clip/max_norm" [1], "clip/norm" [1] (the total
norm torch returns) and "clip/out/<name>" (the gradients after clipping).
"""

import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_golden import OUT_DIR, Fixture  # noqa: E402

STEPS = 10
NAMES = ["a.weight", "a.bias"]
SHAPES = {"a.weight": (5, 3), "a.bias": (3,)}
KINDS = {"sgd": 0, "adam": 1, "adamw": 2, "rmsprop": 3, "adagrad": 4}
HP_FIELDS = ["lr", "weight_decay", "momentum", "dampening", "nesterov", "beta1", "beta2", "eps",
             "alpha", "centered", "lr_decay", "initial_accumulator_value", "group_lr_scale",
             "group_weight_decay"]
HP_DEFAULTS = dict(weight_decay=0.0, momentum=0.0, dampening=0.0, nesterov=0.0, beta1=0.9,
                   beta2=0.999, eps=1e-8, alpha=0.99, centered=0.0, lr_decay=0.0,
                   initial_accumulator_value=0.0, group_lr_scale=-1.0, group_weight_decay=0.0)

CASES = [
    ("sgd", "sgd", dict(lr=0.1)),
    ("sgd_momentum", "sgd", dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    ("sgd_nesterov", "sgd", dict(lr=0.05, momentum=0.9, nesterov=1, weight_decay=1e-3,
                                 group_lr_scale=2.0, group_weight_decay=0.0)),
    ("adam", "adam", dict(lr=1e-2)),
    ("adam_wd", "adam", dict(lr=1e-2, weight_decay=0.1, beta1=0.8, beta2=0.99, eps=1e-6)),
    ("adamw", "adamw", dict(lr=1e-2, weight_decay=0.1, group_lr_scale=1.0,
                            group_weight_decay=0.0)),
    ("rmsprop", "rmsprop", dict(lr=1e-2)),
    ("rmsprop_centered", "rmsprop", dict(lr=1e-2, alpha=0.9, centered=1, momentum=0.5,
                                         weight_decay=0.01)),
    ("adagrad", "adagrad", dict(lr=0.1, lr_decay=0.01, weight_decay=0.01,
                                initial_accumulator_value=0.1, eps=1e-10)),
]


def f32(x):
    return float(np.float32(x))


def make_optimizer(kind, hp, params):
    """params: name -> leaf tensor. The "*.bias" group gets lr * group_lr_scale."""
    lr, wd = hp["lr"], hp["weight_decay"]
    if hp["group_lr_scale"] >= 0:
        groups = [{"params": [params["a.weight"]]},
                  {"params": [params["a.bias"]], "lr": lr * hp["group_lr_scale"],
                   "weight_decay": hp["group_weight_decay"]}]
    else:
        groups = [{"params": [params[n] for n in NAMES]}]
    if kind == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=hp["momentum"],
                               dampening=hp["dampening"], weight_decay=wd,
                               nesterov=bool(hp["nesterov"]), foreach=False)
    if kind in ("adam", "adamw"):
        cls = torch.optim.Adam if kind == "adam" else torch.optim.AdamW
        return cls(groups, lr=lr, betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"],
                   weight_decay=wd, foreach=False)
    if kind == "rmsprop":
        return torch.optim.RMSprop(groups, lr=lr, alpha=hp["alpha"], eps=hp["eps"],
                                   weight_decay=wd, momentum=hp["momentum"],
                                   centered=bool(hp["centered"]), foreach=False)
    if kind == "adagrad":
        return torch.optim.Adagrad(groups, lr=lr, lr_decay=hp["lr_decay"], weight_decay=wd,
                                   initial_accumulator_value=hp["initial_accumulator_value"],
                                   eps=hp["eps"], foreach=False)
    raise ValueError(kind)


def gen_optim():
    fx = Fixture("optim")
    torch.manual_seed(11)
    init = {n: torch.randn(SHAPES[n]) for n in NAMES}
    grads = {n: torch.randn((STEPS,) + SHAPES[n]) for n in NAMES}
    for n in NAMES:
        fx.add("init/" + n, init[n])
        fx.add("grads/" + n, grads[n])
    for case, kind, overrides in CASES:
        hp = dict(HP_DEFAULTS, **overrides)
        hp = {k: f32(v) for k, v in hp.items()}
        params = {n: init[n].clone().requires_grad_(True) for n in NAMES}
        opt = make_optimizer(kind, hp, params)
        traj = {n: [] for n in NAMES}
        for s in range(STEPS):
            for n in NAMES:
                params[n].grad = grads[n][s].clone()
            opt.step()
            for n in NAMES:
                traj[n].append(params[n].detach().clone())
        fx.add(case + "/kind", torch.tensor([KINDS[kind]], dtype=torch.int64))
        fx.add(case + "/hp", torch.tensor([hp[k] for k in HP_FIELDS], dtype=torch.float32))
        for n in NAMES:
            fx.add("%s/%s" % (case, n), torch.stack(traj[n]))

    # clip_grad_norm_: gradients whose norm (about 11) exceeds max_norm
    params = {n: init[n].clone().requires_grad_(True) for n in NAMES}
    max_norm = f32(2.5)
    for n in NAMES:
        params[n].grad = torch.randn(SHAPES[n]) * 3
        fx.add("clip/grad/" + n, params[n].grad)
    norm = torch.nn.utils.clip_grad_norm_([params[n] for n in NAMES], max_norm)
    fx.add("clip/max_norm", torch.tensor([max_norm], dtype=torch.float32))
    fx.add("clip/norm", norm.reshape(1))
    for n in NAMES:
        fx.add("clip/out/" + n, params[n].grad)
    return fx


def main():
    assert sys.byteorder == "little"
    torch.set_num_threads(1)
    os.makedirs(OUT_DIR, exist_ok=True)
    fx = gen_optim()
    path = fx.write()
    print("wrote %s: %d arrays, %d bytes (torch %s)"
          % (os.path.relpath(path), len(fx.records), os.path.getsize(path), torch.__version__))
    print("regenerate with: /usr/bin/python3 tests/golden/gen_optim.py")


if __name__ == "__main__":
    main()
