"""python_package.py - the Python package (python/ctrain) over the library of this build tree,
with Debian's /usr/bin/python3: fit returns the final metrics and calls progress with each
event (returning False or raising stops the run); a bad override raises ctrain.Error naming
the key, with the status and the library's location; Run gives metrics.jsonl's records, the
checkpoint's weights under PyTorch names and predictions equal to `ctrain predict`'s; evaluate
scores a split; the package installs with pip offline.

Exits 77 (ctest's skip) with the reason when numpy is missing: never silently.
Usage: /usr/bin/python3 python_package.py PATH/TO/ctrain PATH/TO/libctrain.so REPO
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError as e:
    print(f"SKIP: the Python package needs python3-numpy ({e}); install it with "
          "scripts/install-deps.sh")
    sys.exit(77)

CTRAIN, LIBRARY, REPO = (os.path.abspath(a) for a in sys.argv[1:4])
os.environ["CTRAIN_LIBRARY"] = LIBRARY
sys.path.insert(0, os.path.join(REPO, "python"))
import ctrain  # noqa: E402

FAILED = 0
PASSED = 0
# the command line links its own sanitizer runtime: not the one preloaded for Python
CLI_ENV = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}


def check(name, cond, why=""):
    global FAILED, PASSED
    if cond:
        PASSED += 1
        print(f"ok   {name}")
    else:
        FAILED += 1
        print(f"FAIL {name}: {why}")


EXPERIMENT = """\
seed: 5
data:
  train: {type: synthetic, kind: blobs, n: 120, features: 8, classes: 3}
  valid: {split: 0.25}
  test: {type: synthetic, kind: blobs, n: 40, features: 8, classes: 3, seed: 0}
  batch_size: 15
  transforms: [{type: scale, a: 0.5, b: 0.25}]
model: {type: mlp, hidden: [16]}
optimizer: {type: adamw, lr: 0.01}
trainer: {max_epochs: 3, steps_per_loop: 2}
metrics:
  valid: [accuracy]
  test: [accuracy]
logging: {progress: none}
output_dir: runs/unused
"""


def main():
    tmp = tempfile.mkdtemp(prefix="ct_python_")
    try:
        run_tests(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{PASSED} checks, {FAILED} failed")
    return 1 if FAILED else 0


def run_tests(tmp):
    exp = os.path.join(tmp, "exp.yaml")
    with open(exp, "w") as f:
        f.write(EXPERIMENT)
    run_dir = os.path.join(tmp, "run")
    check("the library is this build's", os.path.samefile(ctrain.library_path(), LIBRARY),
          ctrain.library_path())

    events = []
    metrics = ctrain.fit(exp, ["trainer.max_epochs=2"], run_dir=run_dir, progress=events.append)
    check("fit returns the final metrics",
          {"valid/acc", "valid/loss", "test/acc", "test/loss", "train/loss"} <= set(metrics) and
          all(isinstance(v, float) for v in metrics.values()), metrics)
    check("fit learned something", metrics["valid/acc"] > 0.5, metrics)
    logs = [e for e in events if e["event"] == "log"]
    check("progress: a log event every 2 steps", [e["step"] for e in logs] == [2, 4, 6, 8, 10, 12],
          [e["step"] for e in logs])
    check("progress: loss, epoch and the learning rate in each log event",
          all(np.isfinite(e["loss"]) and e["loss"] == e["train/loss"] and "train/lr" in e and
              e["epoch"] in (1, 2) for e in logs), logs[:1])
    batches = [e for e in events if e["event"] == "batch"]
    check("progress: a batch event per training batch, with its loss",
          [(e["step"], e["batch"], e["batches"]) for e in batches] ==
          [(s, (s - 1) % 6 + 1, 6) for s in range(1, 13)] and
          all(np.isfinite(e["loss"]) for e in batches), batches[:2])
    check("progress: an eval event per epoch with valid/acc, the end, then the test's eval",
          [e["epoch"] for e in events if e["event"] == "eval" and "valid/acc" in e] == [1, 2] and
          [e["event"] for e in events[-2:]] == ["end", "eval"] and "test/acc" in events[-1],
          [e["event"] for e in events])

    stopped = []

    def stop_at_4(e):
        stopped.append(e)
        if e["event"] == "log" and e["step"] == 4:
            raise ctrain.Stop
        return False  # ignored

    m = ctrain.fit(exp, run_dir=os.path.join(tmp, "stopped"), progress=stop_at_4)
    check("ctrain.Stop from progress ends the run, with the metrics so far",
          max(e["step"] for e in stopped) == 4 and
          m["train/loss"] == [e for e in stopped if e["event"] == "log"][-1]["loss"],
          ([(e["event"], e["step"]) for e in stopped], m))

    # Ctrl-C: as the command line's, the run ends after the step under way, with its checkpoint
    # (ctest may start Python with SIGINT ignored: Python's own handler is what fit takes over)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    seen = []

    def interrupt(e):
        seen.append(e)
        if e["event"] == "batch" and e["step"] == 3:
            os.kill(os.getpid(), signal.SIGINT)

    try:
        ctrain.fit(exp, run_dir=os.path.join(tmp, "ctrl-c"), progress=interrupt)
        check("Ctrl-C raises KeyboardInterrupt from fit", False, "no exception")
    except KeyboardInterrupt:
        check("Ctrl-C raises KeyboardInterrupt from fit, after the step under way",
              max(e["step"] for e in seen) == 3 and
              ctrain.Run(os.path.join(tmp, "ctrl-c")).checkpoint_dir().endswith("step-00000003"),
              ([(e["event"], e["step"]) for e in seen],
               os.listdir(os.path.join(tmp, "ctrl-c", "checkpoints"))))

    class Boom(Exception):
        pass

    def boom(e):
        raise Boom("from progress")

    try:
        ctrain.fit(exp, run_dir=os.path.join(tmp, "boom"), progress=boom)
        check("an exception in progress reaches the caller", False, "no exception")
    except Boom:
        check("an exception in progress reaches the caller", True)

    try:
        ctrain.fit(exp, ["trainer.max_epoch=2"], run_dir=os.path.join(tmp, "bad"))
        check("a bad override raises ctrain.Error", False, "no exception")
    except ctrain.Error as e:
        check("a bad override raises ctrain.Error naming the key",
              "max_epoch" in e.message and e.status_name == "CT_ERR_CONFIG" and
              e.location and e.location.split(":")[0].endswith(".c") and
              isinstance(e, Exception), (e.status_name, e.location, str(e)))
        check("ctrain.Error's message is the command line's (no source locations)",
              e.location not in e.message and e.location in e.raw, (e.message, e.raw))
    check("nothing is made for a bad override", not os.path.exists(os.path.join(tmp, "bad")))

    run = ctrain.Run(run_dir)
    records = run.metrics()
    check("Run.metrics: the records of metrics.jsonl",
          len(records) > 0 and all(isinstance(r, dict) for r in records) and
          any("train/loss" in r for r in records) and any("valid/acc" in r for r in records),
          records[:2])
    try:
        import yaml  # noqa: F401
        check("Run.config: the resolved configuration",
              run.config["trainer"]["max_epochs"] == 2 and run.config["output_dir"] == run_dir,
              run.config_text[:200])
    except ImportError:
        print("skip Run.config: no PyYAML (python3-yaml)")
    w = run.weights()
    shapes = {k: v.shape for k, v in w.items()}
    check("Run.weights: PyTorch names and shapes",
          shapes == {"0.weight": (16, 8), "0.bias": (16,), "2.weight": (3, 16), "2.bias": (3,)}
          and all(v.dtype == np.float32 for v in w.values()), shapes)

    rng = np.random.default_rng(0)
    x = rng.normal(size=(37, 8)).astype(np.float32) * 3
    p = run.predict(x)
    xin, pout, lout = (os.path.join(tmp, n) for n in ("x.npy", "p.npy", "l.csv"))
    np.save(xin, x)
    subprocess.run([CTRAIN, "predict", run_dir, "--input", xin, "--output", pout], check=True,
                   stderr=subprocess.DEVNULL, env=CLI_ENV)
    check("Run.predict equals `ctrain predict`", p.shape == (37, 3) and
          np.array_equal(p, np.load(pout)), np.abs(p - np.load(pout)).max())
    check("Run.predict: probabilities", np.allclose(p.sum(axis=1), 1, atol=1e-6))
    z = run.predict(x, logits=True)
    subprocess.run([CTRAIN, "predict", run_dir, "--input", xin, "--output", lout, "--logits"],
                   check=True, stderr=subprocess.DEVNULL, env=CLI_ENV)
    cli_logits = np.loadtxt(lout, delimiter=",", skiprows=1)[:, 2:]
    check("Run.predict(logits=True) equals `ctrain predict --logits`",
          np.allclose(z, cli_logits, rtol=1e-7, atol=0), np.abs(z - cli_logits).max())
    try:
        run.predict(np.zeros((2, 7), np.float32))
        check("Run.predict refuses another sample shape", False, "no exception")
    except ctrain.Error as e:
        check("Run.predict refuses another sample shape",
              e.status_name == "CT_ERR_SHAPE" and "[7]" in e.message and "[8]" in e.message,
              str(e))
    run.close()

    ev = ctrain.evaluate(run_dir, split="test", checkpoint="latest")
    check("evaluate: the test split of the final weights, as fit scored it",
          set(ev) == {"test/loss", "test/acc"} and ev["test/acc"] == metrics["test/acc"] and
          abs(ev["test/loss"] - metrics["test/loss"]) < 1e-9, (ev, metrics))
    ev = ctrain.evaluate(exp, ["output_dir=" + run_dir], split="valid")
    check("evaluate: an experiment file with overrides, the valid split",
          set(ev) == {"valid/loss", "valid/acc"}, ev)
    try:
        ctrain.evaluate(run_dir, split="nope")
        check("evaluate: an unknown split raises ctrain.Error", False, "no exception")
    except ctrain.Error as e:
        check("evaluate: an unknown split raises ctrain.Error", "nope" in e.message, str(e))

    check_install(tmp)


def check_install(tmp):
    """pip installs the package offline from a copy of python/ (the build leaves files next to
    the sources), and the installed package imports and loads the library."""
    try:
        import pip  # noqa: F401
    except ImportError:
        print("skip pip install: /usr/bin/python3 has no pip (python3-pip); PYTHONPATH=python "
              "was tested above")
        return
    src = os.path.join(tmp, "src")
    shutil.copytree(os.path.join(REPO, "python"), src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    target = os.path.join(tmp, "site")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation",
                        "--no-index", "--target", target, src],
                       capture_output=True, text=True)
    check("pip install --no-build-isolation --no-index ./python", r.returncode == 0,
          r.stdout[-800:] + r.stderr[-800:])
    r = subprocess.run([sys.executable, "-c", "import ctrain, sys; print(ctrain.__file__); "
                        "print(ctrain.version())"],
                       capture_output=True, text=True, cwd=tmp,
                       env=dict(os.environ, PYTHONPATH=target))
    check("the installed package imports and loads the library",
          r.returncode == 0 and r.stdout.startswith(target), r.stdout + r.stderr)


if __name__ == "__main__":
    sys.exit(main())
