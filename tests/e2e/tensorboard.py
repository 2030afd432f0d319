"""tensorboard.py - a run's TensorBoard events file read back independently of ctrain.

`ctrain fit` with logging.tensorboard and logging.histogram_every 1 on a tiny experiment; then
every record's framing is checked with a CRC-32C written here in Python from its definition,
every Event is decoded by protoc --decode_raw (protobuf-compiler) and by a small reader here,
and the events must say what metrics.jsonl says: the same scalar tags and values (as float32)
at the same steps, the configuration as text, data.classes' names beside the confusion
image as text, and weight and gradient histograms of every
parameter at every epoch whose counts add up to the parameter's size. The HParams: the
session start holds the configuration's dotted keys as numbers, strings and bools, and the
session end the run's status (success, failure for a non-finite loss, unknown for SIGINT); a
resumed run, stopped or finished before, has one session start and one end across its files. A model with a batchnorm
layer (named "1" by position) has no histograms of that layer's tensors with
logging.histogram_exclude_norm, and has them without.
The acceptance run, the Fashion-MNIST MLP of examples/ (shortened to 150 steps): its events
decode through protoc and every scalar equals metrics.jsonl's value, and every curve of its
report, read back through the plot's axes (report_curves.py), holds metrics.jsonl's values.
Exits 77 (ctest's skip) with a message when protoc is missing: never silently.
Usage: /usr/bin/python3 tensorboard.py PATH/TO/ctrain
"""
import glob
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

import report_curves

CTRAIN = os.path.abspath(sys.argv[1])
if not shutil.which("protoc"):
    print("SKIP: tensorboard needs protoc (Debian protobuf-compiler; scripts/install-deps.sh)")
    sys.exit(77)

PASSED = FAILED = 0


def check(name, cond, why=""):
    global PASSED, FAILED
    if cond:
        PASSED += 1
        print(f"ok   {name}")
    else:
        FAILED += 1
        print(f"FAIL {name}: {why}")


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(c):
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def fields(buf):
    """(field number, wire type, value) of a protobuf message."""
    i, out = 0, []
    while i < len(buf):
        key, i = varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = varint(buf, i)
        elif wire == 1:
            v = buf[i:i + 8]
            i += 8
        elif wire == 5:
            v = buf[i:i + 4]
            i += 4
        elif wire == 2:
            n, i = varint(buf, i)
            v = buf[i:i + n]
            i += n
        else:
            raise ValueError(f"wire type {wire}")
        out.append((num, wire, v))
    return out


def varint(buf, i):
    v = shift = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def first(fs, num):
    return next((v for n, _, v in fs if n == num), None)


def read_records(path):
    """The Event bytes of every TFRecord of a file, and whether every CRC and length held."""
    data = open(path, "rb").read()
    records, i, framing_ok = [], 0, True
    while i + 12 <= len(data):
        (n,) = struct.unpack("<Q", data[i:i + 8])
        (hc,) = struct.unpack("<I", data[i + 8:i + 12])
        body = data[i + 12:i + 12 + n]
        (dc,) = struct.unpack("<I", data[i + 12 + n:i + 16 + n] or b"\0\0\0\0")
        framing_ok &= hc == masked(crc32c(data[i:i + 8])) and dc == masked(crc32c(body))
        records.append(body)
        i += 16 + n
    return records, framing_ok and i == len(data)


def histogram_tags(records):
    tags = set()
    for r in records[1:]:
        value = fields(first(fields(first(fields(r), 5)), 1))
        if first(value, 5) is not None:
            tags.add(first(value, 1).decode())
    return tags


def hparams_records(records):
    """The hparams plugin's records of an events file, as (tag, version, oneof members): each
    a Summary.Value whose metadata (9) has plugin_data (1) {plugin_name (1) "hparams", content
    (2)}, the content an HParamsPluginData {version (1), experiment (2) | session_start_info
    (3) | session_end_info (4)} (tensorboard/plugins/hparams/plugin_data.proto); the members
    as [(field number, bytes)]."""
    out = []
    for r in records[1:]:
        value = fields(first(fields(first(fields(r), 5)), 1))
        md = first(value, 9)
        pd = fields(first(fields(md), 1) or b"") if md is not None else []
        if first(pd, 1) != b"hparams":
            continue
        content = fields(first(pd, 2) or b"")
        members = [(n, v) for n, _, v in content if n in (2, 3, 4)]
        out.append((first(value, 1).decode(), first(content, 1) or 0, members))
    return out


def session_hparams(data):
    """A SessionStartInfo's hparams (1), map<string, google.protobuf.Value>: {name: value},
    number_value (2) as a float, string_value (3) as a str, bool_value (4) as a bool."""
    out = {}
    for n, _, entry in fields(data):
        if n != 1:
            continue
        e = fields(entry)
        (num, _, raw), = fields(first(e, 2))
        out[first(e, 1).decode()] = (struct.unpack("<d", raw)[0] if num == 2 else
                                     raw.decode() if num == 3 else bool(raw) if num == 4 else None)
    return out


def end_status(data):
    """A SessionEndInfo's status (1): api.proto's Status, 0 (STATUS_UNKNOWN) when absent."""
    return first(fields(data), 1) or 0


def run_hparams(run_dir):
    """The hparams records of every events file of a run directory, in the order TensorBoard
    reads them (by name)."""
    out = []
    for path in sorted(glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))):
        out += hparams_records(read_records(path)[0])
    return out


def decode(records):
    """The scalars as sorted (step, tag, float32 value), the texts, the histograms as
    {tag: [(step, total count)]} and the images (tag, height, width, colorspace, PNG's width,
    PNG's height) of an events file's records after the first."""
    scalars, texts, hists, images = [], [], {}, []
    for r in records[1:]:
        ev = fields(r)
        step = first(ev, 2) or 0
        value = fields(first(fields(first(ev, 5)), 1))
        tag = first(value, 1).decode()
        if tag.startswith("_hparams_/"):
            continue
        if first(value, 2) is not None:
            scalars.append((step, tag, struct.unpack("<f", first(value, 2))[0]))
        elif first(value, 8) is not None:
            texts.append((tag, first(fields(first(value, 8)), 8).decode()))
        elif first(value, 4) is not None:
            img = fields(first(value, 4))
            png = first(img, 4)
            w, h = struct.unpack(">II", png[16:24]) if png[:8] == b"\x89PNG\r\n\x1a\n" else (0, 0)
            images.append((tag, first(img, 1), first(img, 2), first(img, 3), w, h))
        elif first(value, 5) is not None:
            h = fields(first(value, 5))
            counts = first(h, 7)
            total = sum(struct.unpack(f"<{len(counts) // 8}d", counts))
            hists.setdefault(tag, []).append((step, total))
    return sorted(scalars), texts, hists, images


def logged(metrics_path):
    """metrics.jsonl's values as sorted (step, tag, value rounded to float32)."""
    want = []
    for line in open(metrics_path):
        rec = json.loads(line)
        for k, v in rec.items():
            if k not in ("step", "epoch", "time") and v is not None and "/confusion/" not in k:
                want.append((rec["step"], k, struct.unpack("<f", struct.pack("<f", v))[0]))
    return sorted(want)


def same_scalars(name, scalars, want):
    missing = sorted(set(want) - set(scalars))[:3]
    extra = sorted(set(scalars) - set(want))[:3]
    check(name, scalars == want,
          f"{len(scalars)} events, {len(want)} values; missing {missing}, not logged {extra}")


NORM_CONFIG = """
seed: 1
data:
  train: {type: synthetic, kind: blobs, n: 200, features: 8, classes: 4, seed: 3}
  batch_size: 50
model:
  type: sequential
  layers: [{type: linear, out: 16}, batchnorm, relu, {type: linear, out: 4}]
optimizer: {type: sgd, lr: 0.1}
trainer: {max_epochs: 1}
logging: {progress: none, tensorboard: true, histogram_every: 1}
"""


def check_norm_exclusion(tmp):
    """logging.histogram_exclude_norm finds the batchnorm by its type, whatever its name."""
    with open(os.path.join(tmp, "norm.yaml"), "w") as f:
        f.write(NORM_CONFIG)
    tags = {}
    for flag in ("false", "true"):
        out = os.path.join(tmp, "norm_" + flag)
        p = subprocess.run([CTRAIN, "fit", "norm.yaml", f"++output_dir={out}",
                            f"++logging.histogram_exclude_norm={flag}"], cwd=tmp,
                           capture_output=True, text=True)
        ev = glob.glob(os.path.join(out, "events.out.tfevents.*"))
        check(f"fit with histogram_exclude_norm {flag}", p.returncode == 0 and len(ev) == 1,
              p.stderr[-300:])
        tags[flag] = histogram_tags(read_records(ev[0])[0]) if len(ev) == 1 else set()
    layers = {"0.weight", "0.bias", "1.weight", "1.bias", "3.weight", "3.bias"}
    want = {f"{k}/{n}" for k in ("weights", "grads") for n in layers}
    check("without histogram_exclude_norm: the batchnorm's histograms too",
          tags["false"] == want, str(sorted(tags["false"])))
    check("histogram_exclude_norm: no histogram of the batchnorm ('1.weight', '1.bias')",
          tags["true"] == {t for t in want if "/1." not in t}, str(sorted(tags["true"])))


CONFIG = """
seed: 1
data:
  train: {type: synthetic, kind: blobs, n: 600, features: 8, classes: 4, seed: 3}
  valid: {split: 0.2}
  batch_size: 32
  classes: [ant, bee, cat, dog]
model: {type: mlp, hidden: [16]}
optimizer: {type: sgd, lr: 0.1}
trainer: {max_epochs: 2, steps_per_loop: 5}
metrics: {valid: [accuracy, confusion]}
logging: {progress: none, tensorboard: true, histogram_every: 1, histogram_exclude: "*.bias"}
"""


def check_hparams(records):
    """The HParams of a finished run: its session start holds every leaf of the resolved
    configuration, typed, and its session end says success (STATUS_SUCCESS = 1). No experiment
    record: TensorBoard derives one from every run's session start and scalars."""
    hp = hparams_records(records)
    check("hparams: one session start and one session end, no experiment",
          [(t, m[0][0] if len(m) == 1 else m) for t, _, m in hp] ==
          [("_hparams_/session_start_info", 3), ("_hparams_/session_end_info", 4)], str(hp)[:300])
    check("hparams: plugin data version 0", all(v == 0 for _, v, _ in hp), str(hp)[:300])
    if len(hp) != 2 or len(hp[0][2]) != 1 or len(hp[1][2]) != 1:
        return
    got = session_hparams(hp[0][2][0][1])
    want = {"seed": 1.0, "optimizer.type": "sgd", "optimizer.lr": 0.1, "model.type": "mlp",
            "model.hidden": "[16]", "data.batch_size": 32.0, "data.valid.split": 0.2,
            "data.train.kind": "blobs", "data.shuffle": True, "trainer.max_epochs": 2.0,
            "metrics.valid": "[accuracy, confusion]", "logging.tensorboard": True,
            "logging.histogram_exclude": "*.bias", "name": "exp",
            "data.classes": "[ant, bee, cat, dog]"}
    wrong = {k: (got.get(k, "(absent)"), v) for k, v in want.items()
             if got.get(k, "(absent)") != v or type(got.get(k)) is not type(v)}
    check("hparams: the session start holds the configuration's dotted keys, typed", not wrong,
          f"got, expected: {wrong}")
    sections = [k for k in got if any(o.startswith(k + ".") for o in got)]
    check("hparams: every hparam a leaf of the configuration, a number, a string or a bool",
          len(got) > 30 and all(type(v) in (float, str, bool) for v in got.values()) and
          not sections, f"sections {sections}; {str(got)[:400]}")
    start = struct.unpack("<d", first(fields(hp[0][2][0][1]), 5))[0]
    end_info = fields(hp[1][2][0][1])
    end = struct.unpack("<d", first(end_info, 2))[0]
    check("hparams: the session ends in success, after it started",
          end_status(hp[1][2][0][1]) == 1 and 1e9 < start <= end, f"{end_info}")


def fit(tmp, out, *args):
    with open(os.path.join(tmp, "exp.yaml"), "w") as f:
        f.write(CONFIG)
    return subprocess.run([CTRAIN, "fit", "exp.yaml", f"++output_dir={out}", *args], cwd=tmp,
                          capture_output=True, text=True)


def starts_and_ends(run_dir):
    hp = run_hparams(run_dir)
    starts = [m[0][1] for t, _, m in hp if t == "_hparams_/session_start_info"]
    ends = [end_status(m[0][1]) for t, _, m in hp if t == "_hparams_/session_end_info"]
    return starts, ends, len(hp)


def check_hparams_resumed(tmp):
    """A run resumed (a longer run asked of a finished one) has one session start, its
    own, and one end: TensorBoard keeps the first of each that it reads."""
    out = os.path.join(tmp, "resumed")
    p1 = fit(tmp, out, "trainer.max_epochs=1")
    p2 = fit(tmp, out, "trainer.max_epochs=2")
    files = glob.glob(os.path.join(out, "events.out.tfevents.*"))
    starts, ends, n = starts_and_ends(out)
    epochs = [session_hparams(s).get("trainer.max_epochs") for s in starts]
    check("hparams of a resumed run: one session start (the resumed run's) and one end, "
          "success, in two events files",
          p1.returncode == 0 and p2.returncode == 0 and len(files) == 2 and epochs == [2.0] and
          ends == [1] and n == 2,
          f"{len(files)} files, max_epochs {epochs}, ends {ends}; {p2.stderr[-300:]}")


def check_hparams_failed(tmp):
    """A run that fails (a non-finite loss) ends in failure (STATUS_FAILURE = 2)."""
    out = os.path.join(tmp, "failed")
    p = fit(tmp, out, "optimizer.lr=1e17")
    starts, ends, _ = starts_and_ends(out)
    check("hparams of a failed run: its session ends in failure",
          p.returncode == 1 and len(starts) == 1 and ends == [2], f"exit {p.returncode}, "
          f"{len(starts)} starts, ends {ends}: {p.stderr[-300:]}")


def check_hparams_stopped(tmp):
    """A run stopped by SIGINT ends as unknown (api.proto's Status has no "stopped"); resumed
    to its end, it has one session start and one end, success."""
    out = os.path.join(tmp, "stopped")
    with open(os.path.join(tmp, "exp.yaml"), "w") as f:
        f.write(CONFIG)
    log = open(os.path.join(tmp, "stopped.out"), "w+")
    long = ["data.train.n=200000", "trainer.max_epochs=50", "++logging.progress=plain",
            "++logging.interval=0.05", "logging.histogram_every=0"]
    proc = subprocess.Popen([CTRAIN, "fit", "exp.yaml", f"++output_dir={out}", *long], cwd=tmp,
                            stdout=log, stderr=subprocess.STDOUT,
                            env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    for _ in range(600):
        log.seek(0)
        if any(line.startswith("train epoch") for line in log) or proc.poll() is not None:
            break
        time.sleep(0.05)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    rc = proc.wait(timeout=120)
    starts, ends, _ = starts_and_ends(out)
    log.seek(0)
    check("hparams of a run stopped by SIGINT: its session ends as unknown (no status)",
          rc == 130 and len(starts) == 1 and ends == [0], f"exit {rc}, {len(starts)} starts, "
          f"ends {ends}: {log.read()[-300:]}")
    latest = os.path.join(out, "checkpoints", "latest")
    step_dir = open(latest).readline().strip() if os.path.exists(latest) else ""
    state = os.path.join(out, "checkpoints", step_dir, "state.json")
    epoch = json.load(open(state)).get("epoch", 0) if step_dir and os.path.exists(state) else 0
    p = fit(tmp, out, *long[:2], f"trainer.max_epochs={epoch + 1}", "++logging.progress=none",
            "logging.histogram_every=0")
    starts, ends, _ = starts_and_ends(out)
    check("hparams of the stopped run resumed to its end: one session start, one end, success",
          p.returncode == 0 and len(starts) == 1 and ends == [1],
          f"exit {p.returncode}, {len(starts)} starts, ends {ends}: {p.stderr[-300:]}")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "exp.yaml"), "w") as f:
            f.write(CONFIG)
        p = subprocess.run([CTRAIN, "fit", "exp.yaml"], cwd=tmp, capture_output=True, text=True)
        check("fit", p.returncode == 0, p.stderr[-500:])
        files = glob.glob(os.path.join(tmp, "runs", "exp", "events.out.tfevents.*"))
        check("one events file", len(files) == 1, str(files))
        if len(files) != 1:
            return
        records, framing_ok = read_records(files[0])
        check("framing and masked CRC-32C of every record", framing_ok)
        decoded = all(subprocess.run(["protoc", "--decode_raw"], input=r,
                                     capture_output=True).returncode == 0 for r in records)
        check("protoc --decode_raw reads every event", decoded)

        first_ev = fields(records[0])
        check("first event: file_version brain.Event:2",
              first(first_ev, 3) == b"brain.Event:2")
        scalars, texts, hists, images = decode(records)
        same_scalars("scalars: every metrics.jsonl value, same tag, step and float32 value",
                     scalars, logged(os.path.join(tmp, "runs", "exp", "metrics.jsonl")))
        check("the configuration as text",
              [t for t, _ in texts][:1] == ["config"] and "optimizer:" in texts[0][1])
        classes = [x for t, x in texts if t == "valid/confusion/classes"]
        check("data.classes' names as text beside the confusion image, once, in class order",
              len(texts) == 2 and len(classes) == 1 and
              [ln.split()[-1] for ln in classes[0].splitlines() if ln.startswith("    ")] ==
              ["ant", "bee", "cat", "dog"], str(texts)[-300:])
        check("the confusion matrix as a PNG image per evaluation",
              len(images) == 2 and all(t == "valid/confusion" and hh == 64 and ww == 64 and
                                       cs == 3 and w == 64 and h == 64
                                       for t, hh, ww, cs, w, h in images), str(images))
        sizes = {"weights/0.weight": 128, "weights/2.weight": 64, "grads/0.weight": 128,
                 "grads/2.weight": 64}
        ok = set(hists) == set(sizes) and all(
            len(v) == 2 and all(t == sizes[k] for _, t in v) for k, v in hists.items())
        check("histograms of weights and gradients each epoch, biases excluded", ok,
              str({k: v for k, v in hists.items()}))
        check_hparams(records)
        check_norm_exclusion(tmp)
        check_hparams_resumed(tmp)
        check_hparams_failed(tmp)
        check_hparams_stopped(tmp)
        check_fashion_mnist(tmp)
    print(f"tensorboard: {PASSED} passed, {FAILED} failed")


def check_fashion_mnist(tmp):
    """The acceptance run: the reference experiment (Fashion-MNIST MLP), shortened to 150
    steps in two epochs (an epoch's length is known once the next one begins); its events
    decode and say what metrics.jsonl says, and so do its report's curves."""
    example = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                           "fashion_mnist_mlp.yaml")
    p = subprocess.run([CTRAIN, "fit", example, f"++output_dir={tmp}/fm",
                        "trainer.max_epochs=2", "trainer.limit_train_batches=75",
                        "scheduler.total=150", "logging.tensorboard=true",
                        "logging.progress=none"], capture_output=True, text=True)
    check("fashion-mnist reference run", p.returncode == 0, p.stderr[-300:])
    ev = glob.glob(os.path.join(tmp, "fm", "events.out.tfevents.*"))
    jl = os.path.join(tmp, "fm", "metrics.jsonl")
    if len(ev) != 1 or not os.path.exists(jl):
        check("fashion-mnist: one events file and metrics.jsonl", False, str(ev))
        return
    records, framing_ok = read_records(ev[0])
    decoded = all(subprocess.run(["protoc", "--decode_raw"], input=r,
                                 capture_output=True).returncode == 0 for r in records)
    check("fashion-mnist events: framing, CRCs, protoc --decode_raw",
          framing_ok and decoded and len(records) > 5)
    scalars, _, _, _ = decode(records)
    want = logged(jl)
    tags = {t for _, t, _ in want}
    same_scalars("fashion-mnist scalars: every metrics.jsonl value, same tag, step and "
                 "float32 value", scalars, want)
    check("fashion-mnist logged train, valid and test values",
          {"train/loss", "lr", "valid/acc", "valid/loss", "test/acc"} <= tags, str(tags))
    html_path = os.path.join(tmp, "fm", "report.html")
    html = open(html_path).read() if os.path.exists(html_path) else ""
    problems, n = report_curves.compare(html, jl)
    check("fashion-mnist report: every curve, read back through its axes, holds "
          "metrics.jsonl's values by step and by epoch",
          bool(html) and not problems and n > len(want),
          "; ".join(problems[:4]) + f" ({n} points read)")


if __name__ == "__main__":
    main()
    sys.exit(1 if FAILED else 0)
