"""onnx_export.py - `ctrain export --format onnx` checked in a real runtime, through the built binary.

Small models are trained for a few steps (non-trivial weights) and exported; onnx's checker
(Debian's python3-onnx, full check with shape inference) validates every file, and
onnxruntime-node (from the npm registry, installed once per build tree into NPM_DIR) runs each
on real inputs. Its outputs must equal ctrain's within 1e-4 (|a - b| <= 1e-4 (1 + |ref|)):
  - a sequential stack of every layer type that takes vectors (linear, gelu both ways, dropout,
    residual, layernorm with and without affine, silu, batchnorm, leaky_relu, tanh, sigmoid)
    on Fashion-MNIST test images, against `ctrain predict --logits`; exported with
    --with-preprocessing (raw uint8 pixels in) at opset 17 (and 13, for layernorm's steps),
    and without it;
  - the cnn builder (conv2d, batchnorm, relu, maxpool2d, global_avg_pool, linear) and a
    sequential CNN (strided, dilated and grouped convolutions, avgpool2d with padding,
    maxpool2d, flatten), likewise;
  - the mlp builder on the diabetes table (scikit-learn's copy), against `ctrain predict`;
  - a sequential language model (embedding, residual, layernorm, linear) on text windows;
  - a gpt on text windows, full context and shorter (the sequence length is dynamic), at opsets
    17 and 13, against the logits of ct_model_forward (lm_logits, as `ctrain predict` runs the
    model: predict writes no language-model logits).
A perturbed weight must make the comparison fail, and unsupported opsets are refused.

Exits 77 (ctest's skip) with the reason when something it needs is missing (numpy, onnx, node,
npm, the npm registry, an ONNX-less build): never a silent pass.
Usage: /usr/bin/python3 onnx_export.py CTRAIN LM_LOGITS NPM_DIR
"""
import glob
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

ORT_VERSION = "1.30.0"  # onnxruntime-node: ships the CPU runtime for linux-x64 in the package


def skip(why):
    print(f"SKIP: onnx: {why}")
    sys.exit(77)


try:
    import numpy as np
    import onnx
    from onnx import numpy_helper
except ImportError as e:
    skip(f"needs python3-numpy and python3-onnx ({e}); scripts/install-deps.sh installs them")

CTRAIN, LM_LOGITS, NPM_DIR = (os.path.abspath(a) for a in sys.argv[1:4])
FM = "/usr/share/datasets/fashion-mnist"
FORTUNES = "/usr/share/games/fortunes"
SKDATA = "/usr/lib/python3/dist-packages/sklearn/datasets/data"
FAILED = PASSED = 0


def check(name, cond, why=""):
    global FAILED, PASSED
    if cond:
        PASSED += 1
        print(f"ok   {name}")
    else:
        FAILED += 1
        print(f"FAIL {name}: {why}")
    return cond


def run(*args, **kw):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=120, **kw)


def install_ort():
    """onnxruntime-node in NPM_DIR/node_modules, installed once: its path, or skip."""
    for tool in ("node", "npm"):
        if not shutil.which(tool):
            skip(f"needs {tool} (Debian nodejs, npm)")
    pkg = os.path.join(NPM_DIR, "node_modules", "onnxruntime-node")
    if not os.path.isdir(pkg):
        os.makedirs(NPM_DIR, exist_ok=True)
        # --ignore-scripts: the package's install script only fetches the CUDA provider (from
        # NuGet); the CPU runtime is in the package itself
        try:
            r = run("npm", "install", "--prefix", NPM_DIR, "--no-audit", "--no-fund",
                    "--ignore-scripts", "--no-save", f"onnxruntime-node@{ORT_VERSION}")
        except subprocess.TimeoutExpired:
            skip("npm install onnxruntime-node timed out (no registry?)")
        if r.returncode != 0:
            skip(f"npm install onnxruntime-node failed (offline?): {r.stderr.strip()[-300:]}")
    libs = glob.glob(os.path.join(pkg, "bin", "napi-v*", "linux", "x64", "libonnxruntime.so*"))
    if not libs:
        skip(f"{pkg} has no linux-x64 CPU runtime (bin/napi-v*/linux/x64)")
    return os.path.join(NPM_DIR, "node_modules")


def idx_images(n):
    with gzip.open(f"{FM}/t10k-images-idx3-ubyte.gz") as f:
        raw = f.read()
    return np.frombuffer(raw, dtype=np.uint8, offset=16)[: n * 784].reshape(n, 1, 28, 28)


def fit(name, yaml):
    with open(f"{name}.yaml", "w") as f:
        f.write(yaml)
    r = run(CTRAIN, "fit", f"{name}.yaml", f"++output_dir={name}")
    if r.returncode != 0:
        print(r.stderr)
    return r.returncode == 0


def export(run_dir, out, *flags):
    return run(CTRAIN, "export", run_dir, "--format", "onnx", "-o", out, *flags)


def checked(path):
    """onnx's full check (with shape inference): '' or the error."""
    try:
        onnx.checker.check_model(onnx.load(path), full_check=True)
        return ""
    except Exception as e:  # noqa: BLE001 - any failure is the test's finding
        return str(e)[:300]


def worst(got, ref):
    """'' when got equals ref within 1e-4 (1 + |ref|), else the worst element."""
    if got.shape != ref.shape:
        return f"shape {got.shape}, expected {ref.shape}"
    excess = np.abs(got - ref) - 1e-4 * (1 + np.abs(ref))
    i = np.unravel_index(np.argmax(excess), excess.shape)
    if excess[i] <= 0:
        return ""
    return f"at {tuple(int(k) for k in i)}: {got[i]} vs ctrain's {ref[i]}"


def main():
    node_path = install_ort()
    work = tempfile.mkdtemp(prefix="ctrain-onnx.")
    os.chdir(work)
    images = idx_images(64)
    np.save("images.npy", images)
    scaled = images.astype(np.float32) * np.float32(1 / 255)
    np.save("scaled.npy", scaled)
    # the smaller test file trains too (its first 512 images): it opens faster
    train = (f"  train: {{type: idx, images: {FM}/t10k-images-idx3-ubyte.gz, "
             f"labels: {FM}/t10k-labels-idx1-ubyte.gz, limit: 512}}\n")
    common = "optimizer: {type: adam, lr: 0.003}\n" \
             "trainer: {max_epochs: 0, max_steps: 8}\nlogging: {progress: none}\n"
    seqmlp = ("seed: 1\ndata:\n" + train + "  batch_size: 64\n"
              "  transforms: [{type: scale, a: 0.00392156862745098},"
              " {type: normalize, mean: 0.2860, std: 0.3530}]\n"
              "model:\n  type: sequential\n  layers:\n"
              "    - flatten\n    - {type: linear, out: 64}\n    - {type: gelu, approx: tanh}\n"
              "    - {type: dropout, p: 0.1}\n"
              "    - type: residual\n      children: [layernorm, {type: linear, out: 64}, silu,"
              " {type: layernorm, affine: false}]\n"
              "    - batchnorm\n    - {type: leaky_relu, negative_slope: 0.1}\n"
              "    - {type: linear, out: 32}\n    - tanh\n    - {type: linear, out: 32, bias: false}\n"
              "    - sigmoid\n    - gelu\n    - {type: linear, out: 10}\n" + common)
    cnn = ("seed: 2\ndata:\n" + train + "  batch_size: 32\n"
           "  transforms: [{type: scale, a: 0.00392156862745098}]\n"
           "model: {type: cnn, channels: \"8,16\", out: 10}\n" + common)
    seqcnn = ("seed: 3\ndata:\n" + train + "  batch_size: 32\n"
              "  transforms: [{type: scale, a: 0.00392156862745098}]\n"
              "model:\n  type: sequential\n  layers:\n"
              "    - {type: conv2d, out: 8, kernel: 5, stride: 2, padding: 2}\n    - relu\n"
              "    - {type: conv2d, out: 8, kernel: 3, dilation: 2, groups: 4, bias: false}\n"
              "    - {type: avgpool2d, kernel: 3, stride: 2, padding: 1}\n"
              "    - {type: maxpool2d, kernel: 2}\n    - flatten\n    - {type: linear, out: 10}\n"
              + common)
    files = [f"{FORTUNES}/{n}" for n in ("computers", "science")]
    gpt = ("seed: 4\ndata:\n  train: {type: text, context: 32, files: [%s]}\n"
           "  batch_size: 16\n"
           "model: {type: gpt, n_layer: 2, n_head: 4, d_model: 32, context: 32, dropout: 0.1}\n"
           % ", ".join(files) + common)
    jobs, compare = [], []

    def add(model, inp, ref, name):
        out = f"{name}.out.npy"
        jobs.append({"model": model, "input": inp, "output": out})
        compare.append((name, out, ref))

    # the diabetes table, standardized by the dataset (not a transform: given standardized)
    table = np.loadtxt(gzip.open(f"{SKDATA}/diabetes_data_raw.csv.gz"))[:32].astype(np.float32)
    np.save("table.npy", (table - table.mean(0)) / table.std(0))
    mlp = ("seed: 5\ndata:\n  train: {type: csv, path: %s/diabetes_data_raw.csv.gz, target_path: "
           "%s/diabetes_target.csv.gz, header: false, delimiter: space, task: regression, "
           "standardize: true}\n  batch_size: 32\n"
           "model: {type: mlp, hidden: [16, 8], activation: leaky_relu}\nloss: {type: mse}\n"
           % (SKDATA, SKDATA) + common)
    models = [("seqmlp", seqmlp, "images.npy", "normalized"), ("cnn", cnn, "images.npy",
              "scaled.npy"), ("seqcnn", seqcnn, "images.npy", "scaled.npy")]
    if os.path.exists(f"{SKDATA}/diabetes_data_raw.csv.gz"):
        models.append(("mlp", mlp, "table.npy", "table.npy"))
    for name, yaml, raw_input, plain_input in models:
        if not fit(name, yaml):
            check(f"{name} trains", False, "ctrain fit failed")
            continue
        logits = ["--logits"] if name != "mlp" else []  # a regression's values are its outputs
        p = run(CTRAIN, "predict", name, "--input", raw_input, "--output", f"{name}.ref.npy",
                *logits)
        if not check(f"{name}: ctrain predict {' '.join(logits)}", p.returncode == 0,
                     p.stderr[-300:]):
            continue
        ref = np.load(f"{name}.ref.npy")
        variants = [("pre17", ["--with-preprocessing"]), ("plain", [])]
        if name == "seqmlp":  # layernorm's steps below opset 17
            variants.append(("pre13", ["--with-preprocessing", "--opset", "13"]))
        for tag, flags in variants:
            path = f"{name}.{tag}.onnx"
            e = export(name, path, *flags)
            if not check(f"{name} {tag}: exported", e.returncode == 0, e.stderr[-300:]):
                continue
            why = checked(path)
            check(f"{name} {tag}: onnx.checker", not why, why)
            if tag == "plain" and plain_input == "normalized":
                x = (scaled - np.float32(0.2860)) * np.float32(1 / np.float32(0.3530))
                np.save("normalized.npy", x.astype(np.float32))
                plain_input = "normalized.npy"
            add(path, raw_input if tag != "plain" else plain_input, ref, f"{name} {tag}")
    # the perturbed copy of the first model: one weight moved by 1e-2
    first = "seqmlp.pre17.onnx"
    if os.path.exists(first):
        m = onnx.load(first)
        for t in m.graph.initializer:
            if t.name == "1.weight":
                w = numpy_helper.to_array(t).copy()
                w[3, 100] += 0.01
                t.CopyFrom(numpy_helper.from_array(w, t.name))
        onnx.save(m, "perturbed.onnx")
        jobs.append({"model": "perturbed.onnx", "input": "images.npy", "output": "perturbed.npy"})
    # a sequential language model from embedding: its sample length is the trained one
    seqlm = ("seed: 6\ndata:\n  train: {type: text, context: 32, files: [%s]}\n"
             "  batch_size: 16\n"
             "model:\n  type: sequential\n  layers:\n    - {type: embedding, vocab: 256, dim: 16}\n"
             "    - {type: residual, children: [{type: linear, out: 16}, relu]}\n"
             "    - layernorm\n    - {type: linear, out: 256}\n" % files[0] + common)
    if fit("seqlm", seqlm):
        text = open(files[0], "rb").read()
        ids = np.array([list(text[i: i + 32]) for i in (0, 700)], dtype=np.int64)
        np.save("seqlm_ids.npy", ids)
        ids.tofile("seqlm_ids.bin")
        lr = run(LM_LOGITS, "seqlm", "seqlm_ids.bin", "2", "32", "seqlm.ref.bin")
        e = export("seqlm", "seqlm.onnx")
        if check("seqlm: exported, reference logits", lr.returncode == 0 and e.returncode == 0,
                 lr.stderr[-300:] + e.stderr[-300:]):
            why = checked("seqlm.onnx")
            check("seqlm: onnx.checker", not why, why)
            ref = np.fromfile("seqlm.ref.bin", dtype=np.float32).reshape(2, 32, 256)
            add("seqlm.onnx", "seqlm_ids.npy", ref, "seqlm")
    else:
        check("seqlm trains", False, "ctrain fit failed")
    # the gpt: windows of the text, full context and shorter
    if fit("gpt", gpt):
        text = b"".join(open(f, "rb").read() for f in files)
        for t in (32, 20):
            ids = np.array([list(text[i: i + t]) for i in (0, 1000, 5000)], dtype=np.int64)
            np.save(f"ids{t}.npy", ids)
            ids.tofile(f"ids{t}.bin")
            lr = run(LM_LOGITS, "gpt", f"ids{t}.bin", "3", str(t), f"gpt{t}.ref.bin")
            if not check(f"gpt T={t}: reference logits", lr.returncode == 0, lr.stderr[-300:]):
                continue
            ref = np.fromfile(f"gpt{t}.ref.bin", dtype=np.float32).reshape(3, t, 256)
            for tag, flags in (("opset17", []), ("opset13", ["--opset", "13"])):
                path = f"gpt.{tag}.onnx"
                if t == 32:
                    e = export("gpt", path, *flags)
                    check(f"gpt {tag}: exported", e.returncode == 0, e.stderr[-300:])
                    why = checked(path)
                    check(f"gpt {tag}: onnx.checker", not why, why)
                add(path, f"ids{t}.npy", ref, f"gpt T={t} {tag}")
    else:
        check("gpt trains", False, "ctrain fit failed")
    with open("jobs.json", "w") as f:
        json.dump(jobs, f)
    env = dict(os.environ, NODE_PATH=node_path)
    src = os.path.dirname(os.path.abspath(__file__))
    r = run("node", os.path.join(src, "onnx_run.js"), "jobs.json", env=env)
    if check("onnxruntime-node runs every model", r.returncode == 0, r.stderr[-600:]):
        for name, out, ref in compare:
            why = worst(np.load(out).astype(np.float32), ref)
            check(f"{name}: onnxruntime equals ctrain within 1e-4", not why, why)
        if os.path.exists("perturbed.npy"):
            why = worst(np.load("perturbed.npy"), np.load("seqmlp.ref.npy"))
            check("a perturbed weight fails the comparison", why != "", "no difference found")
    # opsets outside the range are refused with a usage error naming them
    for bad in ("12", "18"):
        e = export("cnn", "bad.onnx", "--opset", bad)
        check(f"--opset {bad} refused", e.returncode == 2 and "opset" in e.stderr
              and not os.path.exists("bad.onnx"), f"exit {e.returncode}: {e.stderr[-200:]}")
    e = export("cnn", "bad.onnx", "--format", "tflite")
    check("--format tflite refused", e.returncode == 2 and "--format" in e.stderr,
          f"exit {e.returncode}: {e.stderr[-200:]}")
    # a checkpoint directory stands for its run and that checkpoint: the same file
    steps = sorted(glob.glob("cnn/checkpoints/step-*"))
    e = export(steps[-1] if steps else "cnn/checkpoints/none", "from_checkpoint.onnx")
    same = e.returncode == 0 and open("from_checkpoint.onnx", "rb").read() == \
        open("cnn.plain.onnx", "rb").read()
    check("a checkpoint directory exports its weights", same, e.stderr[-200:])
    os.chdir("/")
    shutil.rmtree(work, ignore_errors=True)
    print(f"{PASSED} passed, {FAILED} failed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    r = subprocess.run([sys.argv[1], "export", "x", "--format", "onnx", "-o", "/dev/null"],
                       capture_output=True, text=True)
    if "built without ONNX export" in r.stderr:
        skip("this ctrain was built without ONNX export (libprotobuf-c-dev, "
             "protobuf-c-compiler, libonnx-dev)")
    sys.exit(main())
