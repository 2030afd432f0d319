"""interop_torch.py - checkpoints and PyTorch, both ways, through the real `ctrain` binary.

1. ctrain trains an MLP; its checkpoint's model.safetensors loads into the equivalent
   torch.nn.Sequential with load_state_dict(strict=True), and torch's softmax over a batch
   equals `ctrain predict`'s probabilities.
2. torch makes weights and writes them as safetensors; `ctrain fit` starts from them with
   model.init_from (learning rate 0, so one step keeps them) and `ctrain predict` gives torch's
   probabilities again.

The safetensors files are read and written here from the format's definition (8-byte
little-endian header length, JSON header, raw little-endian data), without the safetensors
package. Exits 77 (ctest's skip) with a message when PyTorch is not installed: never silently.
Usage: /usr/bin/python3 interop_torch.py PATH/TO/ctrain
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"SKIP: interop_torch needs python3-torch and python3-numpy ({e}); "
          "install them with scripts/install-deps.sh")
    sys.exit(77)

CTRAIN = os.path.abspath(sys.argv[1])
FAILED = 0
PASSED = 0


def check(name, cond, why=""):
    global FAILED, PASSED
    if cond:
        PASSED += 1
        print(f"ok   {name}")
    else:
        FAILED += 1
        print(f"FAIL {name}: {why}")


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
        assert info["dtype"] == "F32", info
        a, b = info["data_offsets"]
        arr = np.frombuffer(data[a:b], dtype="<f4").reshape(info["shape"])
        out[name] = torch.from_numpy(arr.copy())
    return header.get("__metadata__", {}), out


def write_safetensors(path, tensors):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        b = t.detach().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def run(args, cwd):
    p = subprocess.run([CTRAIN] + args, cwd=cwd, capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stdout, p.stderr)
    return p.returncode


CONFIG = """
seed: 3
data:
  train: {type: synthetic, kind: blobs, n: 512, features: 8, classes: 4, seed: 1}
  batch_size: 32
model: {type: mlp, hidden: [16]}
optimizer: {type: adam, lr: 0.01}
trainer: {max_epochs: 2}
logging: {progress: none}
"""


def torch_model():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "exp.yaml"), "w") as f:
            f.write(CONFIG)
        x = np.random.default_rng(5).standard_normal((64, 8)).astype(np.float32)
        np.save(os.path.join(tmp, "x.npy"), x)

        # 1. ctrain -> torch
        check("fit", run(["fit", "exp.yaml"], tmp) == 0, "ctrain fit failed")
        ckdir = os.path.join(tmp, "runs", "exp", "checkpoints")
        with open(os.path.join(ckdir, "latest")) as f:
            latest = f.readline().strip()  # the name; the next line is its crc32c
        meta, sd = read_safetensors(os.path.join(ckdir, latest, "model.safetensors"))
        check("metadata format pt", meta.get("format") == "pt", str(meta))
        m = torch_model()
        try:
            m.load_state_dict(sd, strict=True)
            loaded = True
        except RuntimeError as e:
            loaded = False
            print(e)
        check("torch load_state_dict(strict=True)", loaded)
        check("predict", run(["predict", "exp.yaml", "--checkpoint", "latest", "--input", "x.npy",
                              "--output", "p.npy"], tmp) == 0)
        p = np.load(os.path.join(tmp, "p.npy"))
        with torch.no_grad():
            ref = torch.softmax(m(torch.from_numpy(x)).double(), dim=1).numpy()
        err = float(np.abs(p - ref).max())
        check("torch logits match ctrain predict", err < 1e-5, f"max abs difference {err}")

        # 2. torch -> ctrain through model.init_from
        torch.manual_seed(11)
        m2 = torch_model()
        write_safetensors(os.path.join(tmp, "init.safetensors"), m2.state_dict())
        rc = run(["fit", "exp.yaml", "++output_dir=runs/init", "+model.init_from=init.safetensors",
                  "optimizer.type=sgd", "optimizer.lr=0", "trainer.max_steps=1"], tmp)
        check("fit from init_from", rc == 0)
        rc = run(["predict", "exp.yaml", "++output_dir=runs/init", "+model.init_from=init.safetensors",
                  "optimizer.type=sgd", "optimizer.lr=0", "trainer.max_steps=1", "--checkpoint",
                  "latest", "--input", "x.npy", "--output", "p2.npy"], tmp)
        check("predict from init_from", rc == 0)
        p2 = np.load(os.path.join(tmp, "p2.npy"))
        with torch.no_grad():
            ref2 = torch.softmax(m2(torch.from_numpy(x)).double(), dim=1).numpy()
        err2 = float(np.abs(p2 - ref2).max())
        check("ctrain from torch weights matches torch", err2 < 1e-5, f"max abs difference {err2}")

        # a wrong-model file is refused with the tensor named
        bad = {k: v for k, v in m2.state_dict().items() if k != "2.bias"}
        write_safetensors(os.path.join(tmp, "bad.safetensors"), bad)
        p = subprocess.run([CTRAIN, "fit", "exp.yaml", "++output_dir=runs/bad",
                            "+model.init_from=bad.safetensors"], cwd=tmp, capture_output=True,
                           text=True)
        check("init_from missing tensor refused", p.returncode == 2 and "2.bias" in p.stderr,
              f"rc {p.returncode}: {p.stderr}")
    print(f"interop_torch: {PASSED} passed, {FAILED} failed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
