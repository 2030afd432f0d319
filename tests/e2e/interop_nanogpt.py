"""interop_nanogpt.py - nanoGPT checkpoints and ctrain, both ways, through the real `ctrain`.

A compact twin of nanoGPT's model.py GPT (same module tree, names, tied wte/lm_head, LayerNorm
with optional bias, exact GELU) is the reference, with bias on and off and a vocabulary of 37
over the `tokens` dataset:
1. nanoGPT -> ctrain: a ckpt.pt as nanoGPT writes it ("model" with torch.compile's _orig_mod.
   prefixes, causal-mask buffers, "model_args") converted by tools/torch_to_safetensors.py;
   `ctrain predict --logits` equals the twin's logits to 1e-5 and `ctrain eval` its loss on the
   same window; `fit` starts from it with model.init_from; a file with only lm_head.weight
   (safetensors.torch.save_model keeps one of tied names) loads too.
2. ctrain -> nanoGPT: `ctrain export` (f32, bf16) and the checkpoint's model.safetensors load
   into the twin with load_state_dict(strict=True), and the twin's logits equal ctrain's.
3. strict: false lists the missing and unexpected keys; a file matching nothing is refused;
   F16, BF16 and F64 files load (converted to f32); tied weights that differ are refused.

Exits 77 (ctest's skip) with a message when PyTorch is not installed: never silently.
Usage: /usr/bin/python3 interop_nanogpt.py PATH/TO/ctrain
"""
import copy
import importlib.util
import io
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    print(f"SKIP: interop_nanogpt needs python3-torch and python3-numpy ({e}); "
          "install them with scripts/install-deps.sh")
    sys.exit(77)

CTRAIN = os.path.abspath(sys.argv[1])
TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                    "torch_to_safetensors.py")
V, T, C, L, H = 37, 8, 16, 2, 2
FAILED = 0
PASSED = 0
torch.set_num_threads(1)


def check(name, cond, why=""):
    global FAILED, PASSED
    if cond:
        PASSED += 1
        print(f"ok   {name}")
    else:
        FAILED += 1
        print(f"FAIL {name}: {why}")


# ---- a compact twin of nanoGPT's model.py ----

class LayerNorm(nn.Module):
    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, bias, dropout):
        super().__init__()
        self.c_attn = nn.Linear(C, 3 * C, bias=bias)
        self.c_proj = nn.Linear(C, C, bias=bias)
        self.attn_dropout, self.resid_dropout = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x):
        B, Tx, _ = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (a.view(B, Tx, H, C // H).transpose(1, 2) for a in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.tril(torch.ones(Tx, Tx, dtype=torch.bool))
        att = self.attn_dropout(F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, Tx, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, bias, dropout):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C, bias=bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * C, C, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, bias, dropout):
        super().__init__()
        self.ln_1, self.attn = LayerNorm(C, bias), CausalSelfAttention(bias, dropout)
        self.ln_2, self.mlp = LayerNorm(C, bias), MLP(bias, dropout)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, bias, dropout=0.0):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(V, C), wpe=nn.Embedding(T, C), drop=nn.Dropout(dropout),
            h=nn.ModuleList([Block(bias, dropout) for _ in range(L)]), ln_f=LayerNorm(C, bias)))
        self.lm_head = nn.Linear(C, V, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied, as nanoGPT
        for p in self.parameters():  # not nanoGPT's init: every value matters in the checks
            nn.init.normal_(p, 0.0, 0.3)

    def forward(self, idx):
        pos = torch.arange(0, idx.size(1), dtype=torch.long)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def model_args(bias):
    return dict(n_layer=L, n_head=H, n_embd=C, block_size=T, bias=bias, vocab_size=V,
                dropout=0.0)


# ---- safetensors by the format's definition ----

ST_DTYPES = {"F32": ("<f4", torch.float32), "F16": ("<f2", torch.float16),
             "F64": ("<f8", torch.float64)}


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        if info["dtype"] == "BF16":
            bits = np.frombuffer(data[a:b], dtype="<u2").astype(np.uint32) << 16
            arr = bits.view(np.float32)
        else:
            arr = np.frombuffer(data[a:b], dtype=ST_DTYPES[info["dtype"]][0]).astype(np.float32)
        out[name] = torch.from_numpy(arr.reshape(info["shape"]).copy())
    return header, out


def write_safetensors(path, tensors, dtype="F32"):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        b = t.detach().to(ST_DTYPES[dtype][1]).numpy().astype(ST_DTYPES[dtype][0]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def convert_in_process(src, dst, *extra):
    """tools/torch_to_safetensors.py's main() without a second torch start-up."""
    spec = importlib.util.spec_from_file_location("torch_to_safetensors", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    argv, sys.argv = sys.argv, [TOOL, src, dst, *extra]
    out = io.StringIO()
    try:
        with redirect_stdout(out):
            mod.main()
    finally:
        sys.argv = argv
    return out.getvalue()


# ---- ctrain ----

def config(bias, extra=""):
    return f"""seed: 2
data:
  train: {{type: tokens, path: train.bin, context: {T}, vocab: {V}}}
  valid: {{type: tokens, path: valid.bin, context: {T}, vocab: {V}}}
  batch_size: 4
model:
  {{type: gpt, n_layer: {L}, n_head: {H}, d_model: {C}, context: {T}, bias: {str(bias).lower()}}}
optimizer: {{type: adamw, lr: 0.01}}
trainer: {{max_steps: 4}}
logging: {{progress: none}}
{extra}"""


def ctrain(args, cwd):
    p = subprocess.run([CTRAIN] + args, cwd=cwd, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def ctrain_logits(cfg, weights, tmp, out="lg.npy"):
    rc, _, err = ctrain(["predict", cfg, "--checkpoint", weights, "--input", "ids.npy",
                         "--output", out, "--logits"], tmp)
    if rc != 0:
        print(err)
        return None
    return np.load(os.path.join(tmp, out)).astype(np.float64)


def twin_logits(model, ids):
    with torch.no_grad():
        return copy.deepcopy(model).double().eval()(torch.from_numpy(ids)).numpy()


def max_err(a, b):
    return float("inf") if a is None else float(np.abs(a - b).max())


def nanogpt_ckpt(model, bias):
    """What nanoGPT's train.py saves: the compiled model's state dict and its model_args."""
    sd = {"_orig_mod." + k: v for k, v in model.state_dict().items()}
    for i in range(L):  # torch < 2.0: nanoGPT's causal-mask buffers
        sd[f"_orig_mod.transformer.h.{i}.attn.bias"] = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
    return {"model": sd, "model_args": model_args(bias), "iter_num": 100, "best_val_loss": 2.0}


def torch_to_ctrain(tmp, ids, valid):
    for bias in (True, False):
        name = f"bias_{str(bias).lower()}"
        cfg = f"{name}.yaml"
        with open(os.path.join(tmp, cfg), "w") as f:
            f.write(config(bias))
        torch.manual_seed(7 if bias else 8)
        model = GPT(bias)
        torch.save(nanogpt_ckpt(model, bias), os.path.join(tmp, f"{name}.pt"))
        st = f"{name}.safetensors"
        if bias:  # the command users run, once; the other conversions run in-process
            p = subprocess.run(["/usr/bin/python3", TOOL, f"{name}.pt", st], cwd=tmp,
                               capture_output=True, text=True)
            out, rc = p.stdout + p.stderr, p.returncode
        else:
            out, rc = convert_in_process(os.path.join(tmp, f"{name}.pt"),
                                         os.path.join(tmp, st)), 0
        want = (f"model: {{type: gpt, n_layer: {L}, n_head: {H}, d_model: {C}, context: {T}, "
                f"vocab: {V}, bias: {str(bias).lower()}, dropout: 0.0}}")
        check(f"{name}: convert prints the model section", rc == 0 and want in out, out)
        header, _ = read_safetensors(os.path.join(tmp, st))
        check(f"{name}: no _orig_mod. prefix, no mask buffer",
              not any(k.startswith("_orig_mod.") or k.endswith(".attn.bias") for k in header)
              and "lm_head.weight" in header, str(list(header)))
        ref = twin_logits(model, ids)
        err = max_err(ctrain_logits(cfg, st, tmp), ref)
        check(f"{name}: ctrain's logits equal nanoGPT's", err < 1e-5, f"max abs difference {err}")
        rc, out, err_text = ctrain(["eval", cfg, "--checkpoint", st, "--json"], tmp)
        with torch.no_grad():
            x = torch.from_numpy(valid[:T].astype(np.int64))[None]
            y = torch.from_numpy(valid[1:T + 1].astype(np.int64))
            loss = F.cross_entropy(copy.deepcopy(model).double()(x)[0], y).item()
        got = json.loads(out)["valid/loss"] if rc == 0 else float("nan")
        check(f"{name}: ctrain's loss equals nanoGPT's", abs(got - loss) < 1e-5 * max(1, loss),
              f"ctrain {got}, torch {loss}: {err_text}")
    return model  # the bias=False one, converted to bias_false.safetensors


class RunsCode:
    """A pickle that runs a command when loaded: the converter must refuse it."""
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def converter_refuses_code(tmp):
    marker = os.path.join(tmp, "ran")
    torch.save({"model": {"w": torch.zeros(2)}, "x": RunsCode(marker)},
               os.path.join(tmp, "code.pt"))
    err = io.StringIO()
    try:
        with redirect_stderr(err):
            convert_in_process(os.path.join(tmp, "code.pt"), os.path.join(tmp, "code.st"))
        rc = 0
    except SystemExit as e:
        rc = e.code
    check("converter refuses a file that runs code", rc == 2 and not os.path.exists(marker)
          and "posix.system is not a tensor" in err.getvalue(), f"rc {rc}: {err.getvalue()}")


def init_from_and_tied(tmp, ids, model):
    sd = {k: v for k, v in model.state_dict().items()}
    # model.init_from: fit with learning rate 0 keeps the weights; predict then gives nanoGPT's
    rc, _, err = ctrain(["fit", "bias_false.yaml", "++output_dir=runs/init",
                         "+model.init_from=bias_false.safetensors", "optimizer.type=sgd",
                         "optimizer.lr=0", "trainer.max_steps=1"], tmp)
    check("fit from model.init_from", rc == 0, err)
    e = max_err(ctrain_logits("bias_false.yaml", "runs/init/checkpoints/step-00000001/"
                              "model.safetensors", tmp), twin_logits(model, ids))
    check("init_from weights carried through fit", e < 1e-5, f"max abs difference {e}")
    # only lm_head.weight, as safetensors.torch.save_model writes a tied model
    head_only = {k: v for k, v in sd.items() if k != "transformer.wte.weight"}
    write_safetensors(os.path.join(tmp, "head_only.safetensors"), head_only)
    e = max_err(ctrain_logits("bias_false.yaml", "head_only.safetensors", tmp),
                twin_logits(model, ids))
    check("tied weight from lm_head.weight alone", e < 1e-5, f"max abs difference {e}")
    # both names, different values: refused
    bad = dict(sd)
    bad["lm_head.weight"] = sd["lm_head.weight"] + 0.5
    write_safetensors(os.path.join(tmp, "untied.safetensors"), bad)
    rc, _, err = ctrain(["predict", "bias_false.yaml", "--checkpoint", "untied.safetensors",
                         "--input", "ids.npy", "--output", "u.npy", "--logits"], tmp)
    check("differing tied weights refused",
          rc == 2 and "'transformer.wte.weight' and 'lm_head.weight' name one tied parameter" in err
          and "differ" in err, f"rc {rc}: {err}")


def strict_false(tmp, model):
    sd = {k: v for k, v in model.state_dict().items() if k != "transformer.ln_f.weight"}
    sd["extra.weight"] = torch.zeros(3)
    write_safetensors(os.path.join(tmp, "partial.safetensors"), sd)
    with open(os.path.join(tmp, "partial.yaml"), "w") as f:
        f.write(config(False).replace("bias: false}", "bias: false,\n   init_from: {path: "
                                      "partial.safetensors, strict: false}}"))
    rc, _, err = ctrain(["fit", "partial.yaml", "trainer.max_steps=1"], tmp)
    check("strict: false lists missing and unexpected keys", rc == 0 and
          "missing keys, left at their initial values (1): [transformer.ln_f.weight]; "
          "unexpected keys, not used (1): [extra.weight]" in err, f"rc {rc}: {err}")
    write_safetensors(os.path.join(tmp, "other.safetensors"),
                      {"encoder." + k: v for k, v in sd.items()})
    with open(os.path.join(tmp, "other.yaml"), "w") as f:
        f.write(config(False).replace("bias: false}", "bias: false,\n   init_from: {path: "
                                      "other.safetensors, strict: false}}"))
    rc, _, err = ctrain(["fit", "other.yaml", "trainer.max_steps=1"], tmp)
    check("strict: false matching nothing refused", rc == 2 and "no tensor of the file" in err,
          f"rc {rc}: {err}")


def dtypes(tmp, ids, model):
    sd = model.state_dict()
    # F16 written directly; the reference is the twin with the same rounded weights
    write_safetensors(os.path.join(tmp, "f16.safetensors"), sd, "F16")
    ref = GPT(False)
    ref.load_state_dict({k: v.half().float() for k, v in sd.items()})
    e = max_err(ctrain_logits("bias_false.yaml", "f16.safetensors", tmp), twin_logits(ref, ids))
    check("F16 weights load", e < 1e-5, f"max abs difference {e}")
    # BF16 and F64 state dicts through the converter
    for dt, tdt in (("bf16", torch.bfloat16), ("f64", torch.float64)):
        torch.save({k: v.to(tdt) for k, v in sd.items()}, os.path.join(tmp, f"{dt}.pt"))
        convert_in_process(os.path.join(tmp, f"{dt}.pt"), os.path.join(tmp, f"{dt}.safetensors"))
        header, _ = read_safetensors(os.path.join(tmp, f"{dt}.safetensors"))
        ref = GPT(False)
        ref.load_state_dict({k: v.to(tdt).float() for k, v in sd.items()})
        e = max_err(ctrain_logits("bias_false.yaml", f"{dt}.safetensors", tmp),
                    twin_logits(ref, ids))
        check(f"{dt.upper()} weights load", header["lm_head.weight"]["dtype"] == dt.upper()
              and e < 1e-5, f"max abs difference {e}")


def ctrain_to_torch(tmp, ids):
    with open(os.path.join(tmp, "trained.yaml"), "w") as f:
        f.write(config(True).replace("bias: true}", "bias: true, dropout: 0.1}"))
    check("dropout set", "dropout: 0.1" in open(os.path.join(tmp, "trained.yaml")).read())
    rc, _, err = ctrain(["fit", "trained.yaml"], tmp)
    check("fit", rc == 0, err)
    lg = ctrain_logits("trained.yaml", "latest", tmp)
    rc, _, err = ctrain(["export", "runs/trained", "-o", "exported.safetensors"], tmp)
    check("export", rc == 0, err)
    ckpt = os.path.join("runs", "trained", "checkpoints", "step-00000004", "model.safetensors")
    for what in ("exported.safetensors", ckpt):
        header, sd = read_safetensors(os.path.join(tmp, what))
        model = GPT(True, dropout=0.1)
        try:
            model.load_state_dict(sd, strict=True)
            loaded = ""
        except RuntimeError as e:
            loaded = str(e)
        check(f"{what}: nanoGPT load_state_dict(strict=True)", not loaded, loaded)
        e = max_err(lg, twin_logits(model, ids))
        check(f"{what}: nanoGPT's logits equal ctrain's", e < 1e-5, f"max abs difference {e}")
    rc, _, err = ctrain(["export", os.path.dirname(ckpt), "-o", "bf16.out.safetensors",
                         "--dtype", "bf16"], tmp)
    header, sd = read_safetensors(os.path.join(tmp, "bf16.out.safetensors"))
    model = GPT(True)
    model.load_state_dict(sd, strict=True)
    e = max_err(lg, twin_logits(model, ids))
    check("bf16 export loads strictly, logits near", rc == 0 and all(
        v["dtype"] == "BF16" for k, v in header.items() if k != "__metadata__") and e < 0.1,
        f"rc {rc}, max abs difference {e}: {err}")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        rng = np.random.default_rng(3)
        rng.integers(0, V, 400).astype("<u2").tofile(os.path.join(tmp, "train.bin"))
        valid = rng.integers(0, V, T + 1).astype("<u2")  # one window
        valid.tofile(os.path.join(tmp, "valid.bin"))
        ids = rng.integers(0, V, (3, T)).astype(np.int64)
        ids[0, 0] = V - 1
        np.save(os.path.join(tmp, "ids.npy"), ids)
        model = torch_to_ctrain(tmp, ids, valid)
        init_from_and_tied(tmp, ids, model)
        converter_refuses_code(tmp)
        strict_false(tmp, model)
        dtypes(tmp, ids, model)
        ctrain_to_torch(tmp, ids)
    print(f"interop_nanogpt: {PASSED} passed, {FAILED} failed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
