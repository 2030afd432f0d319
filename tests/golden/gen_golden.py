#!/usr/bin/python3
"""gen_golden.py - golden values from PyTorch for ctrain's golden tests.

Regenerate with:  /usr/bin/python3 tests/golden/gen_golden.py
(Debian's python3-torch; generated with torch 1.13, CPU, float32, fixed seeds.)

Writes tests/golden/fixtures/{losses,ops,mlp,cnn,gpt}.bin, read by tests/golden/fixture.h.

Fixture format (version 1), all integers little-endian:
    magic   4 bytes  "CTGF"
    version u32      1
    count   u32      number of records
    count records:
        name_len u32, name bytes (no NUL)
        dtype    u32  ct_dtype: 0 = f32, 3 = i64
        ndim     u32
        shape    ndim x i64
        data     numel x element size, raw little-endian, row-major

Naming. In losses.bin and ops.bin every case is a prefix: "<case>/<input>" for its inputs,
"<case>/out" for the forward result, "<case>/r" for the fixed random weights of the probe
L = sum(out * r) and "<case>/grad/<input>" for dL/d<input> (only for inputs that take a
gradient). Extra results (batch norm's running statistics) are "<case>/<input>_out".
In mlp.bin, cnn.bin and gpt.bin the initial weights use PyTorch state_dict names; "final/<name>"
holds them after the run, "x" and "y" the batch, "losses" the first 20 SGD losses.
"""

import os
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

VERSION = 1
HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "fixtures")
DTYPES = {torch.float32: 0, torch.int64: 3}


class Fixture:
    def __init__(self, name):
        self.name = name
        self.records = []
        self.names = set()

    def add(self, name, t):
        assert name not in self.names, name
        t = t.detach().cpu().clone().contiguous()  # a snapshot: the source may change later
        assert t.dtype in DTYPES, (name, t.dtype)
        self.names.add(name)
        self.records.append((name, t))

    def write(self):
        path = os.path.join(OUT_DIR, self.name + ".bin")
        with open(path, "wb") as f:
            f.write(b"CTGF")
            f.write(struct.pack("<II", VERSION, len(self.records)))
            for name, t in self.records:
                b = name.encode()
                f.write(struct.pack("<I", len(b)))
                f.write(b)
                f.write(struct.pack("<II", DTYPES[t.dtype], t.dim()))
                f.write(struct.pack("<%dq" % t.dim(), *t.shape))
                f.write(t.numpy().tobytes())  # little-endian host (checked in main)
        return path


def case(fx, name, fn, inputs, grad=None, extra=None):
    """Runs out = fn(**inputs), probes L = sum(out * r) and stores inputs, out, r and the
    gradients of the f32 inputs named in grad (default: every f32 input)."""
    if grad is None:
        grad = [k for k, v in inputs.items() if v.dtype == torch.float32]
    leaves = {}
    for k, v in inputs.items():
        fx.add("%s/%s" % (name, k), v)
        leaves[k] = v.clone().requires_grad_(k in grad)
    out = fn(**leaves)
    r = torch.rand(out.shape) * 2 - 1
    (out * r).sum().backward()
    fx.add(name + "/out", out)
    fx.add(name + "/r", r)
    for k in grad:
        fx.add("%s/grad/%s" % (name, k), leaves[k].grad)
    if extra:
        for k, v in extra(leaves).items():
            fx.add("%s/%s" % (name, k), v)


# ---------------------------------------------------------------------------------------------
# losses


def gen_losses():
    torch.manual_seed(1)
    fx = Fixture("losses")
    reds = ["mean", "sum", "none"]
    x = torch.randn(8, 10) * 2
    t = torch.randint(0, 10, (8,))
    t[2] = -100
    t[5] = -100
    for red in reds:
        for ls in (0.0, 0.1):
            case(fx, "ce_%s_ls%d" % (red, int(ls * 10)),
                 lambda x, t, red=red, ls=ls: F.cross_entropy(
                     x, t, reduction=red, label_smoothing=ls),
                 {"x": x, "t": t})
        # a valid class id used as ignore_index, with smoothing
        t2 = torch.randint(0, 10, (8,))
        t2[1] = 2
        t2[6] = 2
        case(fx, "ce_%s_ign2" % red,
             lambda x, t, red=red: F.cross_entropy(
                 x, t, reduction=red, ignore_index=2, label_smoothing=0.2),
             {"x": x, "t": t2})
        logp = F.log_softmax(torch.randn(8, 10), dim=1)
        case(fx, "nll_%s" % red, lambda x, t, red=red: F.nll_loss(x, t, reduction=red),
             {"x": logp, "t": t})
        p = torch.randn(3, 7) * 2
        y = torch.rand(3, 7)
        q = torch.randn(3, 7)
        case(fx, "bce_%s" % red,
             lambda p, y, red=red: F.binary_cross_entropy_with_logits(p, y, reduction=red),
             {"p": p, "y": y})
        case(fx, "mse_%s" % red, lambda p, y, red=red: F.mse_loss(p, y, reduction=red),
             {"p": p, "y": q})
        case(fx, "l1_%s" % red, lambda p, y, red=red: F.l1_loss(p, y, reduction=red),
             {"p": p, "y": q})
        for beta in (1.0, 0.5):
            case(fx, "smooth_l1_%s_b%g" % (red, beta),
                 lambda p, y, red=red, beta=beta: F.smooth_l1_loss(
                     p, y, reduction=red, beta=beta),
                 {"p": p, "y": q})
        for delta in (1.0, 0.7):
            case(fx, "huber_%s_d%g" % (red, delta),
                 lambda p, y, red=red, delta=delta: F.huber_loss(
                     p, y, reduction=red, delta=delta),
                 {"p": p, "y": q})
    return fx


# ---------------------------------------------------------------------------------------------
# ops


def attention_ref(qkv, n_head):
    """nanoGPT's CausalSelfAttention without the projections."""
    B, T, C3 = qkv.shape
    C = C3 // 3
    q, k, v = qkv.split(C, dim=2)
    q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
    k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
    v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / (k.size(-1) ** 0.5))
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    att = att.masked_fill(~mask, float("-inf"))
    att = F.softmax(att, dim=-1)
    y = att @ v
    return y.transpose(1, 2).contiguous().view(B, T, C)


def gen_ops():
    torch.manual_seed(2)
    fx = Fixture("ops")
    rn = torch.randn

    def away(*shape):  # values with |v| in [0.5, 2], for divisors
        return (torch.rand(*shape) * 1.5 + 0.5) * torch.sign(rn(*shape))

    case(fx, "add", lambda a, b: a + b, {"a": rn(2, 3, 4), "b": rn(3, 1)})
    case(fx, "sub", lambda a, b: a - b, {"a": rn(2, 3, 4), "b": rn(4)})
    case(fx, "mul", lambda a, b: a * b, {"a": rn(2, 1, 4), "b": rn(3, 1)})
    case(fx, "div", lambda a, b: a / b, {"a": rn(2, 3, 4), "b": away(2, 1, 4)})
    case(fx, "div_same", lambda a, b: a / b, {"a": rn(3, 5), "b": away(3, 5)})
    case(fx, "scale", lambda x: x * -1.7, {"x": rn(3, 5)})
    case(fx, "add_scalar", lambda x: x + 0.3, {"x": rn(3, 5)})
    case(fx, "sum_axis1", lambda x: x.sum(1), {"x": rn(2, 3, 4)})
    case(fx, "sum_axis0_keep", lambda x: x.sum(0, keepdim=True), {"x": rn(2, 3, 4)})
    case(fx, "mean_axis_last_keep", lambda x: x.mean(-1, keepdim=True), {"x": rn(2, 3, 4)})
    case(fx, "mean_axis1", lambda x: x.mean(1), {"x": rn(2, 3, 4)})
    case(fx, "sum_all", lambda x: x.sum(), {"x": rn(3, 4)})
    case(fx, "mean_all", lambda x: x.mean(), {"x": rn(3, 4)})
    case(fx, "softmax_last", lambda x: F.softmax(x, -1), {"x": rn(3, 7) * 3})
    case(fx, "softmax_axis1", lambda x: F.softmax(x, 1), {"x": rn(2, 3, 4) * 3})
    case(fx, "log_softmax_last", lambda x: F.log_softmax(x, -1), {"x": rn(3, 7) * 3})
    case(fx, "log_softmax_axis1", lambda x: F.log_softmax(x, 1), {"x": rn(2, 3, 4) * 3})
    case(fx, "relu", lambda x: F.relu(x), {"x": rn(4, 6)})
    case(fx, "leaky_relu", lambda x: F.leaky_relu(x, 0.1), {"x": rn(4, 6)})
    case(fx, "gelu_erf", lambda x: F.gelu(x), {"x": rn(4, 6) * 2})
    case(fx, "gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), {"x": rn(4, 6) * 2})
    case(fx, "silu", lambda x: F.silu(x), {"x": rn(4, 6) * 2})
    case(fx, "tanh", lambda x: torch.tanh(x), {"x": rn(4, 6) * 2})
    case(fx, "sigmoid", lambda x: torch.sigmoid(x), {"x": rn(4, 6) * 2})
    case(fx, "matmul_2d", lambda a, b: a @ b, {"a": rn(5, 6), "b": rn(6, 4)})
    case(fx, "matmul_bcast", lambda a, b: a @ b, {"a": rn(2, 5, 6), "b": rn(6, 4)})
    case(fx, "matmul_batched", lambda a, b: a @ b, {"a": rn(2, 3, 5, 6), "b": rn(2, 3, 6, 4)})
    case(fx, "linear", lambda x, w, b: F.linear(x, w, b),
         {"x": rn(2, 3, 6), "w": rn(5, 6), "b": rn(5)})
    case(fx, "linear_nobias", lambda x, w: F.linear(x, w), {"x": rn(4, 6), "w": rn(5, 6)})
    case(fx, "transpose", lambda x: x.transpose(0, 2), {"x": rn(2, 3, 4)})
    case(fx, "permute", lambda x: x.permute(2, 0, 3, 1), {"x": rn(2, 3, 4, 5)})
    case(fx, "concat", lambda a, b, c: torch.cat([a, b, c], 1),
         {"a": rn(2, 1, 3), "b": rn(2, 4, 3), "c": rn(2, 2, 3)})
    case(fx, "narrow", lambda x: x.narrow(1, 2, 3), {"x": rn(4, 6)})

    conv = [  # name, x shape, w shape, bias, stride, padding, dilation, groups
        ("conv_basic", (2, 3, 7, 7), (4, 3, 3, 3), True, (1, 1), (0, 0), (1, 1), 1),
        ("conv_stride2_pad1", (2, 3, 7, 7), (4, 3, 3, 3), True, (2, 2), (1, 1), (1, 1), 1),
        ("conv_dilation2", (1, 2, 8, 8), (3, 2, 3, 3), True, (1, 1), (2, 2), (2, 2), 1),
        ("conv_groups2", (2, 4, 6, 6), (6, 2, 3, 3), True, (1, 1), (1, 1), (1, 1), 2),
        ("conv_asym_nobias", (1, 3, 7, 6), (2, 3, 3, 2), False, (2, 1), (1, 0), (1, 2), 1),
        ("conv_depthwise", (2, 3, 5, 5), (3, 1, 3, 3), True, (1, 1), (1, 1), (1, 1), 3),
    ]
    for name, xs, ws, has_b, st, pd, dl, gr in conv:
        inputs = {"x": rn(*xs), "w": rn(*ws) * 0.5}
        if has_b:
            inputs["b"] = rn(ws[0])
        case(fx, name, lambda x, w, b=None, st=st, pd=pd, dl=dl, gr=gr: F.conv2d(
            x, w, b, stride=st, padding=pd, dilation=dl, groups=gr), inputs)

    case(fx, "max_pool_k2", lambda x: F.max_pool2d(x, 2), {"x": rn(2, 3, 8, 8)})
    case(fx, "max_pool_k3_s2_p1", lambda x: F.max_pool2d(x, 3, 2, 1), {"x": rn(2, 3, 7, 7)})
    case(fx, "avg_pool_k2", lambda x: F.avg_pool2d(x, 2), {"x": rn(2, 3, 8, 8)})
    case(fx, "avg_pool_k3_s2_p1", lambda x: F.avg_pool2d(x, 3, 2, 1), {"x": rn(2, 3, 7, 7)})
    case(fx, "global_avg_pool", lambda x: F.adaptive_avg_pool2d(x, 1).flatten(1),
         {"x": rn(2, 3, 5, 5)})

    for name, xs in (("batch_norm_4d", (4, 3, 5, 5)), ("batch_norm_2d", (6, 4))):
        c = xs[1]
        inputs = {"x": rn(*xs) * 2 + 1, "w": rn(c), "b": rn(c),
                  "running_mean": rn(c) * 0.1, "running_var": torch.rand(c) + 0.5,
                  "num_batches_tracked": torch.tensor(3, dtype=torch.int64)}

        def bn(x, w, b, running_mean, running_var, num_batches_tracked):
            num_batches_tracked += 1
            return F.batch_norm(x, running_mean, running_var, w, b, training=True,
                                momentum=0.1, eps=1e-5)

        case(fx, name, bn, inputs, grad=["x", "w", "b"],
             extra=lambda lv: {"running_mean_out": lv["running_mean"],
                               "running_var_out": lv["running_var"],
                               "num_batches_tracked_out": lv["num_batches_tracked"]})

    case(fx, "layer_norm", lambda x, w, b: F.layer_norm(x, (8,), w, b, 1e-5),
         {"x": rn(3, 4, 8) * 2 + 0.5, "w": rn(8), "b": rn(8)})
    case(fx, "layer_norm_noaffine", lambda x: F.layer_norm(x, (6,), None, None, 1e-5),
         {"x": rn(5, 6)})
    case(fx, "embedding", lambda w, idx: F.embedding(idx, w),
         {"w": rn(10, 4), "idx": torch.tensor([[1, 3, 3, 9, 0], [3, 2, 1, 1, 7]])})
    case(fx, "index_select", lambda x, idx: torch.index_select(x, 0, idx),
         {"x": rn(6, 3), "idx": torch.tensor([5, 0, 2, 0])})
    case(fx, "gather", lambda x, idx: torch.gather(x, -1, idx),
         {"x": rn(3, 5), "idx": torch.tensor([[0, 4, 4, 1], [2, 2, 3, 0], [1, 0, 4, 3]])})
    case(fx, "gather_3d", lambda x, idx: torch.gather(x, -1, idx),
         {"x": rn(2, 3, 5), "idx": torch.randint(0, 5, (2, 3, 2))})
    case(fx, "attention", lambda qkv: attention_ref(qkv, 2), {"qkv": rn(2, 5, 24)})
    case(fx, "attention_4h", lambda qkv: attention_ref(qkv, 4), {"qkv": rn(1, 7, 48)})
    return fx


# ---------------------------------------------------------------------------------------------
# models: 20 steps of plain SGD


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 4 * 4, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        return self.fc(torch.flatten(x, 1))


class Block(nn.Module):
    def __init__(self, c, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(c)
        self.attn = nn.Module()
        self.attn.c_attn = nn.Linear(c, 3 * c)
        self.attn.c_proj = nn.Linear(c, c)
        self.ln_2 = nn.LayerNorm(c)
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(c, 4 * c)
        self.mlp.c_proj = nn.Linear(4 * c, c)

    def forward(self, x):
        x = x + self.attn.c_proj(attention_ref(self.attn.c_attn(self.ln_1(x)), self.n_head))
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, vocab=16, block=8, c=16, n_head=2):
        super().__init__()
        self.wte = nn.Embedding(vocab, c)
        self.wpe = nn.Embedding(block, c)
        self.h = nn.ModuleList([Block(c, n_head)])
        self.ln_f = nn.LayerNorm(c)
        self.lm_head = nn.Linear(c, vocab, bias=False)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.h:
            x = b(x)
        logits = self.lm_head(self.ln_f(x))
        return logits.view(-1, logits.size(-1))


def gen_model(name, seed, model, x, y, lr, steps=20):
    torch.manual_seed(seed)
    fx = Fixture(name)
    for k, v in model.state_dict().items():
        fx.add(k, v)
    fx.add("x", x)
    fx.add("y", y)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    model.train()
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y.view(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    fx.add("losses", torch.tensor(losses, dtype=torch.float32))
    for k, v in model.state_dict().items():
        fx.add("final/" + k, v)
    print("%s: losses %.4f -> %.4f" % (name, losses[0], losses[-1]))
    return fx


def gen_models():
    torch.manual_seed(3)
    mlp = MLP()
    x = torch.randn(32, 16)
    y = torch.randint(0, 10, (32,))
    yield gen_model("mlp", 3, mlp, x, y, lr=0.1)

    torch.manual_seed(4)
    cnn = CNN()
    x = torch.randn(8, 3, 8, 8)
    y = torch.randint(0, 10, (8,))
    yield gen_model("cnn", 4, cnn, x, y, lr=0.1)

    torch.manual_seed(5)
    gpt = GPT()
    tok = torch.randint(0, 16, (4, 9))
    yield gen_model("gpt", 5, gpt, tok[:, :-1].contiguous(), tok[:, 1:].contiguous(), lr=0.1)


def main():
    assert sys.byteorder == "little"
    torch.set_num_threads(1)
    os.makedirs(OUT_DIR, exist_ok=True)
    total = 0
    for fx in [gen_losses(), gen_ops(), *gen_models()]:
        path = fx.write()
        size = os.path.getsize(path)
        total += size
        print("wrote %s: %d arrays, %d bytes" % (os.path.relpath(path), len(fx.records), size))
    print("total %d bytes (torch %s)" % (total, torch.__version__))
    print("regenerate with: /usr/bin/python3 tests/golden/gen_golden.py")


if __name__ == "__main__":
    main()
