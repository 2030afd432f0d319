"""The shared library libctrain through ctypes: finding it, the signatures of the functions the
package calls (include/ctrain/*.h), errors as ctrain.Error, and a context per session.

The library is found, in order: the path in $CTRAIN_LIBRARY; the build tree this package sits
in (../build/libctrain.so from python/, the CMake build folder `build`); the installed library
(ctypes.util.find_library("ctrain"), then the soname libctrain.so.0).
"""
import ctypes
import ctypes.util
import os
import re

c_ctx = ctypes.c_void_p

# include/ctrain/status.h, ct_status (append-only)
CT_OK = 0
CT_STOP = 10


class Error(Exception):
    """A failure of a ctrain call: the status (an int, and its name such as "CT_ERR_CONFIG"),
    the message as the command line shows it (`message`, without the library's source
    locations), the first of those locations ("schema.c:289") and the full text (`raw`)."""

    def __init__(self, status, raw):
        self.status = int(status)
        self.status_name = status_name(self.status)
        self.raw = raw
        m = _LOCATION.search(raw)
        self.location = m.group(1) if m else None
        self.message = _LOCATION.sub(lambda m: m.group(0)[: -len(m.group(1)) - 2], raw)
        super().__init__(f"{self.message} ({self.status_name}"
                         f"{' at ' + self.location if self.location else ''})")


Error.__module__ = "ctrain"

# "name.c:123: " at the start of the message or after a space (ct_fail_at, ct_err_wrap)
_LOCATION = re.compile(r"(?:^| )([A-Za-z0-9_\-]+\.[ch]:[0-9]+): ")


class MetricValue(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("value", ctypes.c_double)]


PROGRESS_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int64,
                               ctypes.c_int64, ctypes.POINTER(MetricValue), ctypes.c_int64)


class Progress(ctypes.Structure):
    _fields_ = [("fn", PROGRESS_FN), ("user", ctypes.c_void_p)]


READ_ONLY = 1
RESTART = 2

_lib = None


def _candidates():
    env = os.environ.get("CTRAIN_LIBRARY")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    build = os.path.join(here, "..", "..", "build")
    out = [os.path.normpath(os.path.join(build, n)) for n in ("libctrain.so", "libctrain.so.0")]
    out = [p for p in out if os.path.exists(p)]
    found = ctypes.util.find_library("ctrain")
    if found:
        out.append(found)
    out.append("libctrain.so.0")
    return out


def library_path():
    """The path or name the library was loaded from."""
    return lib()._name


def lib():
    """The loaded library (once per process)."""
    global _lib
    if _lib is not None:
        return _lib
    tried = []
    for path in _candidates():
        try:
            handle = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path}: {e}")
            continue
        _declare(handle)
        _lib = handle
        return handle
    raise OSError("ctrain: cannot load libctrain (set CTRAIN_LIBRARY to its path); tried: " +
                  "; ".join(tried))


def _fn(handle, name, restype, *argtypes):
    f = getattr(handle, name)
    f.restype = restype
    f.argtypes = list(argtypes)


def _declare(h):
    P = ctypes.POINTER
    vp, cp, i64, st = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int64, ctypes.c_int
    _fn(h, "ct_version", cp)
    _fn(h, "ct_status_str", cp, st)
    _fn(h, "ct_ctx_create", st, vp, P(vp))
    _fn(h, "ct_ctx_destroy", None, vp)
    _fn(h, "ct_ctx_set_threads", st, vp, i64)
    _fn(h, "ct_last_error", cp, vp)
    _fn(h, "ct_last_status", st, vp)
    _fn(h, "ct_experiment_load_config", st, vp, cp, P(cp), i64, P(vp))
    _fn(h, "ct_config_destroy", None, vp)
    _fn(h, "ct_experiment_open", st, vp, vp, ctypes.c_uint, P(Progress), P(vp))
    _fn(h, "ct_experiment_destroy", None, vp)
    _fn(h, "ct_experiment_fit", st, vp)
    _fn(h, "ct_experiment_trainer", vp, vp)
    _fn(h, "ct_experiment_output_dir", cp, vp)
    _fn(h, "ct_experiment_engines", P(cp), vp, P(i64))
    _fn(h, "ct_experiment_load_with", st, vp, cp, ctypes.c_bool, P(i64), P(ctypes.c_int))
    _fn(h, "ct_experiment_output_size", i64, vp)
    _fn(h, "ct_experiment_predict_array", st, vp, P(ctypes.c_float), i64, P(i64), ctypes.c_int32,
        ctypes.c_bool, P(ctypes.c_float), i64)
    _fn(h, "ct_trainer_metrics", P(MetricValue), vp, cp, P(i64))
    _fn(h, "ct_trainer_evaluate", st, vp, cp)
    _fn(h, "ct_trainer_step", i64, vp)
    _fn(h, "ct_trainer_current_epoch", i64, vp)
    _fn(h, "ct_checkpoint_resolve", st, vp, cp, cp, cp, ctypes.c_size_t, P(i64))


def status_name(status):
    name = lib().ct_status_str(int(status))
    return name.decode() if name else f"status {status}"


def version():
    """The library's version, "MAJOR.MINOR.PATCH"."""
    return lib().ct_version().decode()


def enc(s):
    return os.fsencode(s) if not isinstance(s, bytes) else s


class Session:
    """A context, a configuration and an experiment, freed in the reverse order (close(), or
    `with`). Each call that fails raises Error with the context's last error."""

    def __init__(self):
        self.lib = lib()
        self.ctx = ctypes.c_void_p()
        self.cfg = ctypes.c_void_p()
        self.exp = ctypes.c_void_p()
        rc = self.lib.ct_ctx_create(None, ctypes.byref(self.ctx))
        if rc != CT_OK:
            raise Error(rc, "cannot create a ctrain context")

    def check(self, rc):
        if rc != CT_OK:
            raise Error(rc, (self.lib.ct_last_error(self.ctx) or b"").decode(errors="replace"))
        return rc

    def load_config(self, path, overrides):
        ov = [enc(o) for o in overrides]
        arr = (ctypes.c_char_p * max(len(ov), 1))(*ov)
        self.check(self.lib.ct_experiment_load_config(self.ctx, enc(path), arr, len(ov),
                                                      ctypes.byref(self.cfg)))

    def open(self, flags, progress=None):
        self.check(self.lib.ct_experiment_open(self.ctx, self.cfg, flags,
                                               ctypes.byref(progress) if progress else None,
                                               ctypes.byref(self.exp)))

    def trainer(self):
        return self.lib.ct_experiment_trainer(self.exp)

    def engines(self):
        n = ctypes.c_int64()
        keys = self.lib.ct_experiment_engines(self.exp, ctypes.byref(n))
        return [keys[i].decode() for i in range(n.value)]

    def metrics(self, key):
        n = ctypes.c_int64()
        v = self.lib.ct_trainer_metrics(self.trainer(), enc(key), ctypes.byref(n))
        return {v[i].name.decode(): v[i].value for i in range(n.value)}

    def output_dir(self):
        return os.fsdecode(self.lib.ct_experiment_output_dir(self.exp))

    def load_weights(self, which, ema):
        """Loads a checkpoint ("best", "latest", "step-N", a path) or a .safetensors file:
        (step, kind). "best" in a run that never saved one means "latest", as in the command
        line."""
        if which == "best" and not self._has_pointer("best"):
            which = "latest"
        step, kind = ctypes.c_int64(), ctypes.c_int()
        self.check(self.lib.ct_experiment_load_with(self.exp, enc(which), bool(ema),
                                                    ctypes.byref(step), ctypes.byref(kind)))
        return step.value, ("trained", "ema", "file")[kind.value]

    def _has_pointer(self, name):
        return os.path.lexists(os.path.join(self.output_dir(), "checkpoints", name))

    def close(self):
        if self.exp:
            self.lib.ct_experiment_destroy(self.exp)
            self.exp = ctypes.c_void_p()
        if self.cfg:
            self.lib.ct_config_destroy(self.cfg)
            self.cfg = ctypes.c_void_p()
        if self.ctx:
            self.lib.ct_ctx_destroy(self.ctx)
            self.ctx = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
