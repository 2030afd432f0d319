#!/usr/bin/python3
"""gen_models.py - golden values for ctrain's model builders (ct_model_build: mlp, cnn, gpt).

Regenerate with:  /usr/bin/python3 tests/golden/gen_models.py
(Debian's python3-torch; generated with torch 1.13, CPU, float32, fixed seeds.)

Writes tests/golden/fixtures/models.bin in gen_golden.py's fixture format (version 1). Each
model is built in torch exactly as ctrain's builder builds it, with the same state_dict names:
    "<model>/<state_dict name>"  the initial weights and buffers
    "<model>/x", "<model>/y"     one batch
    "<model>/logits"             the output for x at the initial weights (training mode)
    "<model>/losses"             the first 5 cross-entropy losses of plain SGD (lr 0.05) on x, y
The options ctrain's test passes to ct_model_build are listed next to each model below.
"""

import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_golden import Fixture  # noqa: E402

STEPS = 5
LR = 0.05


class GlobalAvgPool(nn.Module):  # ctrain's global_avg_pool: [N, C, H, W] -> [N, C]
    def forward(self, x):
        return x.mean((2, 3))


def mlp(n_in, hidden, out):  # ct_model_build("mlp", hidden=16,8 out=5), input [12]
    layers, d = [], n_in
    for h in hidden:
        layers += [nn.Linear(d, h), nn.ReLU()]
        d = h
    layers.append(nn.Linear(d, out))
    return nn.Sequential(*layers)


def cnn(c_in, channels, out):  # ct_model_build("cnn", channels=4,8 out=10), input [1, 8, 8]
    layers, c = [], c_in
    for ch in channels:
        layers += [nn.Conv2d(c, ch, 3, padding=1), nn.BatchNorm2d(ch), nn.ReLU(), nn.MaxPool2d(2)]
        c = ch
    layers += [GlobalAvgPool(), nn.Linear(c, out)]
    return nn.Sequential(*layers)


# nanoGPT's GPT (model.py), with its module names; attention computed with an explicit mask so
# that no causal-mask buffer appears in the state_dict (as nanoGPT's flash path on torch 2).
class CausalSelfAttention(nn.Module):
    def __init__(self, c, n_head):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(c, 3 * c)
        self.c_proj = nn.Linear(c, c)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c, 4 * c)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * c, c)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, c, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c)
        self.attn = CausalSelfAttention(c, n_head)
        self.ln_2 = nn.LayerNorm(c)
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):  # ct_model_build("gpt", n_layer=2 n_head=2 d_model=16 context=8 vocab=17)
    def __init__(self, n_layer, n_head, c, context, vocab):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, c),
            wpe=nn.Embedding(context, c),
            drop=nn.Dropout(0.0),
            h=nn.ModuleList([Block(c, n_head) for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(c),
        ))
        self.lm_head = nn.Linear(c, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied, as nanoGPT
        # weights of a larger spread than nanoGPT's N(0, 0.02), so the logits are not flat
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or \
                        name.endswith("ln_f.weight"):
                    p.copy_(1 + 0.1 * torch.randn_like(p))
                elif p.dim() == 1:
                    p.copy_(0.05 * torch.randn_like(p))
                else:
                    p.copy_(0.3 * torch.randn_like(p))

    def forward(self, idx):
        T = idx.shape[1]
        x = self.transformer.drop(self.transformer.wte(idx) +
                                  self.transformer.wpe(torch.arange(T)))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def gen(fx, name, model, x, y):
    for k, v in model.state_dict().items():
        fx.add("%s/%s" % (name, k), v)
    fx.add(name + "/x", x)
    fx.add(name + "/y", y)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    model.train()
    losses = []
    for step in range(STEPS):
        opt.zero_grad()
        logits = model(x)
        if step == 0:
            fx.add(name + "/logits", logits)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    fx.add(name + "/losses", torch.tensor(losses, dtype=torch.float32))


def main():
    assert sys.byteorder == "little"
    torch.set_num_threads(1)
    fx = Fixture("models")
    torch.manual_seed(11)
    gen(fx, "mlp", mlp(12, [16, 8], 5), torch.randn(6, 12), torch.randint(0, 5, (6,)))
    torch.manual_seed(12)
    gen(fx, "cnn", cnn(1, [4, 8], 10), torch.randn(4, 1, 8, 8), torch.randint(0, 10, (4,)))
    torch.manual_seed(13)
    gen(fx, "gpt", GPT(2, 2, 16, 8, 17), torch.randint(0, 17, (3, 8)),
        torch.randint(0, 17, (3, 8)))
    path = fx.write()
    print("wrote %s (%d bytes)" % (path, os.path.getsize(path)))


if __name__ == "__main__":
    main()
