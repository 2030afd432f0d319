#!/usr/bin/python3
"""gen_trainer.py - a whole training run in PyTorch that tests/golden/test_golden_trainer.c
repeats through ct_trainer: the golden value for the trainer's assembly of its parts.

Regenerate with:  /usr/bin/python3 tests/golden/gen_trainer.py   (Debian's python3-torch 1.13)

The run: an MLP 8-16-3 (nn.Sequential names 0.*, 2.*) on 96 fixed samples in order (no
shuffle), micro-batches of 16 with gradient accumulation over 2 (3 steps per epoch), 3
epochs; cross-entropy; AdamW (lr 0.01, weight decay 0.05) with biases in a group without
decay; gradients clipped to a global norm of 0.5; CosineAnnealingLR over the 9 steps stepped
after every step. Writes tests/golden/fixtures/trainer.bin (gen_golden.py's format):
    x [96, 8] f32, y [96] i64, init/<name> and final/<name> for every parameter,
    window_loss [9] f32: the mean of each window's two micro-batch losses,
    grad_norm [9] f32: the total norm before clipping, lr [9] f32: the lr after each step.
"""

import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_golden import Fixture  # noqa: E402


def main():
    torch.manual_seed(1234)
    x = torch.randn(96, 8)
    y = torch.randint(0, 3, (96,))
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    fx = Fixture("trainer")
    fx.add("x", x)
    fx.add("y", y)
    for name, p in model.state_dict().items():
        fx.add("init/" + name, p)
    decay = [p for n, p in model.named_parameters() if not n.endswith(".bias")]
    no_decay = [p for n, p in model.named_parameters() if n.endswith(".bias")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                             {"params": no_decay, "weight_decay": 0.0}], lr=0.01)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=9)
    losses, norms, lrs = [], [], []
    accum, batch = 2, 16
    for epoch in range(3):
        window = []
        for i in range(96 // batch):
            xb, yb = x[i * batch:(i + 1) * batch], y[i * batch:(i + 1) * batch]
            loss = F.cross_entropy(model(xb), yb)
            (loss / accum).backward()
            window.append(loss.item())
            if (i + 1) % accum == 0:
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
                opt.step()
                sched.step()
                opt.zero_grad()
                losses.append(sum(window) / len(window))
                norms.append(float(norm))
                lrs.append(opt.param_groups[0]["lr"])
                window = []
    fx.add("window_loss", torch.tensor(losses, dtype=torch.float32))
    fx.add("grad_norm", torch.tensor(norms, dtype=torch.float32))
    fx.add("lr", torch.tensor(lrs, dtype=torch.float32))
    for name, p in model.state_dict().items():
        fx.add("final/" + name, p)
    print("wrote", fx.write())
    print("regenerate with /usr/bin/python3 tests/golden/gen_trainer.py")


if __name__ == "__main__":
    main()
