"""fit, evaluate and Run: experiments and their run directories from Python (docs/python.md).

Every call opens its own ctrain context (include/ctrain/status.h): calls in several threads
do not share one. Failures raise ctrain.Error.
"""
import ctypes
import json
import os
import signal
import struct
import threading

from . import _native
from ._native import Error, Session


class Stop(Exception):
    """Raised by a progress callable: fit ends the run cleanly, with a checkpoint (after the
    step under way, at a "batch" event), and returns the metrics so far."""


def _yaml_quoted(text):
    return "'" + text.replace("'", "''") + "'"


def _values(values, n):
    return {values[i].name.decode(): values[i].value for i in range(n)}


class _Progress:
    """The C progress callback: each event becomes a dict for the user's callable. Raising
    Stop in it ends the run cleanly; another exception ends the run the same way and is raised
    again when fit returns. A Ctrl-C (SIGINT) during fit is caught by a handler of its
    own, which only notes it: the next event ends the run as the command line's Ctrl-C does
    (after the current step, with its checkpoint), then fit raises KeyboardInterrupt. (Python's
    own handler would raise it at whatever Python line runs next: at best inside a callback,
    where ctypes cannot hand it back to fit.)"""

    def __init__(self, user_fn):
        self.user_fn = user_fn
        self.error = None
        self.interrupted = False
        self.last_log = {}
        self.c_fn = _native.PROGRESS_FN(self._call)
        self.c_struct = _native.Progress(self.c_fn, None)

    def on_sigint(self, signum, frame):
        self.interrupted = True

    def _call(self, _user, event, step, epoch, values, n):
        if self.interrupted or self.error is not None:
            return _native.CT_STOP
        try:
            info = {"event": event.decode(), "step": step, "epoch": epoch}
            info.update(_values(values, n))
            if info["event"] == "batch":
                info["batch"], info["batches"] = int(info["batch"]), int(info["batches"])
            if info["event"] == "log":
                self.last_log = _values(values, n)
                if "train/loss" in info:
                    info["loss"] = info["train/loss"]
            if self.user_fn is not None:
                self.user_fn(info)
            return _native.CT_STOP if self.interrupted else _native.CT_OK
        except Stop:
            return _native.CT_STOP
        except BaseException as e:  # noqa: B036 - handed back to the caller of fit
            self.error = e
            return _native.CT_STOP


def fit(config_path, overrides=(), run_dir=None, progress=None, restart=False):
    """Trains the experiment of `config_path` (an experiment file, or a run directory to go on
    with) with `overrides` ("optimizer.lr=3e-4", as on the command line), in `run_dir` when
    given (else the file's output_dir), resuming from its latest checkpoint as `ctrain fit`
    does; restart=True moves an existing run aside first. `progress`, when given, is called
    with a dict per event, each with "event", "step" and "epoch": "batch" (a training batch
    ended: "loss", "batch", "batches"), "log" ("loss", "train/loss", "train/lr", ...), "eval"
    ("valid/loss", "valid/acc", ...), "epoch" and "end"; raising ctrain.Stop in it ends the run
    cleanly (a checkpoint saved); Ctrl-C does too, then raises KeyboardInterrupt. Returns the
    final metrics: each evaluation's latest values ("valid/acc", "test/acc", ...) and the last
    training record's ("train/loss", ...)."""
    overrides = list(overrides)
    if run_dir is not None:
        overrides.insert(0, "output_dir=" + _yaml_quoted(os.path.abspath(os.fspath(run_dir))))
    p = _Progress(progress)
    catch = (threading.current_thread() is threading.main_thread() and
             signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    with Session() as s:
        s.load_config(config_path, overrides)
        s.open(_native.RESTART if restart else 0, p.c_struct)
        old = signal.signal(signal.SIGINT, p.on_sigint) if catch else None
        try:
            rc = s.lib.ct_experiment_fit(s.exp)
        finally:
            if catch:
                signal.signal(signal.SIGINT, old)
        if p.error is not None:
            raise p.error
        if p.interrupted:
            raise KeyboardInterrupt
        s.check(rc)
        out = dict(p.last_log)
        for key in s.engines():
            out.update(s.metrics(key))
        return out


def evaluate(run_or_config, overrides=(), split="test", checkpoint="best", ema=True):
    """Scores a checkpoint on one evaluation split ("test", "valid") as `ctrain eval` does:
    `run_or_config` is a run directory or the experiment file that made it; `checkpoint` is
    "best" (the latest in a run that saved no best), "latest", "step-N", a checkpoint path or a
    .safetensors weights file; ema=False takes a checkpoint's trained weights instead of its EMA
    weights. Returns {"test/loss": ..., "test/acc": ...}; nothing is written."""
    with Session() as s:
        s.load_config(run_or_config, list(overrides))
        s.open(_native.READ_ONLY)
        s.load_weights(checkpoint, ema)
        s.check(s.lib.ct_trainer_evaluate(s.trainer(), split.encode()))
        return s.metrics(split)


_NP_DTYPES = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
              "I8": "i1", "U8": "u1", "BOOL": "?"}


def read_safetensors(path):
    """The tensors of a safetensors file as {name: numpy array} (BF16 widened to float32), in
    the file's order."""
    import numpy as np
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: not a safetensors file (shorter than 8 bytes)")
    (hlen,) = struct.unpack("<Q", raw[:8])
    if hlen > len(raw) - 8:
        raise ValueError(f"{path}: header of {hlen} bytes in a file of {len(raw)}")
    header = json.loads(raw[8:8 + hlen])
    data = memoryview(raw)[8 + hlen:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        dt = info["dtype"]
        if dt == "BF16":
            bits = np.frombuffer(data[a:b], dtype="<u2").astype(np.uint32) << 16
            arr = bits.view(np.float32)
        elif dt in _NP_DTYPES:
            arr = np.frombuffer(data[a:b], dtype=_NP_DTYPES[dt]).copy()
        else:
            raise ValueError(f"{path}: tensor '{name}': dtype {dt} is not supported")
        out[name] = arr.reshape(info["shape"])
    return out


class Run:
    """A run directory (output_dir of a fit): its records, weights and predictions.

    The experiment behind predict() is opened once, on first use, and kept until close() (or
    the end of a `with` block)."""

    def __init__(self, path):
        self.path = os.path.abspath(os.fspath(path))
        if not os.path.isfile(os.path.join(self.path, "config.yaml")):
            raise FileNotFoundError(f"{self.path}: no config.yaml; expected a run directory")
        self._session = None
        self._loaded = None

    def __repr__(self):
        return f"ctrain.Run({self.path!r})"

    @property
    def config_text(self):
        """The run's resolved configuration, config.yaml, as text."""
        with open(os.path.join(self.path, "config.yaml"), encoding="utf-8") as f:
            return f.read()

    @property
    def config(self):
        """The resolved configuration as nested dicts (needs PyYAML, Debian's python3-yaml)."""
        import yaml
        return yaml.safe_load(self.config_text)

    def metrics(self):
        """The records of metrics.jsonl, one dict each, in order."""
        out = []
        with open(os.path.join(self.path, "metrics.jsonl"), encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    out.append(json.loads(line))
        return out

    def checkpoint_dir(self, checkpoint="latest"):
        """The directory of a checkpoint ("latest", "best", "step-N"), its pointer checked."""
        with Session() as s:
            buf = ctypes.create_string_buffer(4200)
            step = ctypes.c_int64()
            s.check(s.lib.ct_checkpoint_resolve(s.ctx, _native.enc(self.path),
                                                checkpoint.encode(), buf, len(buf),
                                                ctypes.byref(step)))
            return os.fsdecode(buf.value)

    def weights(self, checkpoint="latest", ema=False):
        """The model's tensors in a checkpoint, {name: numpy array}, under their PyTorch
        state_dict names ("0.weight", "fc1.bias": what load_state_dict takes); ema=True gives the
        EMA weights of a run that keeps them."""
        d = self.checkpoint_dir(checkpoint)
        return read_safetensors(os.path.join(d, "ema.safetensors" if ema else "model.safetensors"))

    def _experiment(self, checkpoint, ema):
        if self._session is None:
            s = Session()
            try:
                s.load_config(self.path, [])
                s.open(_native.READ_ONLY)
            except BaseException:
                s.close()
                raise
            self._session = s
        if self._loaded != (checkpoint, ema):
            self._session.load_weights(checkpoint, ema)
            self._loaded = (checkpoint, ema)
        return self._session

    def predict(self, x, checkpoint="best", logits=False, ema=True):
        """The model's outputs for the samples x (an array [N, sample shape...] of the training
        data's sample shape; converted to float32, the evaluation transforms applied as to the
        data files): a classifier's class probabilities [N, classes] (its logits with
        logits=True), a regression's values [N, outputs]. The same numbers as `ctrain predict
        RUN --input x.npy --output p.npy`."""
        import numpy as np
        s = self._experiment(checkpoint, ema)
        x = np.ascontiguousarray(x, dtype=np.float32)
        if x.ndim < 1:
            raise ValueError("predict: expected an array [N, sample shape...]")
        n = x.shape[0]
        c = s.lib.ct_experiment_output_size(s.exp)
        out = np.empty((n, c), dtype=np.float32)
        shape = (ctypes.c_int64 * max(x.ndim - 1, 1))(*x.shape[1:])
        fp = ctypes.POINTER(ctypes.c_float)
        s.check(s.lib.ct_experiment_predict_array(s.exp, x.ctypes.data_as(fp), n, shape,
                                                  x.ndim - 1, bool(logits),
                                                  out.ctypes.data_as(fp), out.size))
        return out

    def evaluate(self, split="test", checkpoint="best", ema=True):
        """evaluate(self.path, split=split, ...)."""
        return evaluate(self.path, split=split, checkpoint=checkpoint, ema=ema)

    def close(self):
        if self._session is not None:
            self._session.close()
            self._session = None
            self._loaded = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


__all__ = ["Error", "Run", "Stop", "evaluate", "fit", "read_safetensors"]
