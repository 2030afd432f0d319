#!/usr/bin/python3
"""torch_to_safetensors.py - a PyTorch checkpoint as a safetensors file for ctrain.

Usage: /usr/bin/python3 tools/torch_to_safetensors.py IN.pt OUT.safetensors [--dtype keep|f32]
                                                       [--full-load]

IN is what torch.save wrote: a state dict (model.state_dict()), a dict holding one under
"model" (nanoGPT's ckpt.pt, whose "model_args" are printed as a ctrain model section) or
"state_dict", or a whole nn.Module (with --full-load: unpickling a module runs its class's
code). Prefixes that torch.compile ("_orig_mod.") and DistributedDataParallel ("module.") add
are stripped; nanoGPT's causal-mask buffers ("*.attn.bias", [1, 1, T, T], not weights) are
left out. Tensors keep their dtype (ctrain reads F32, F16, BF16 and F64 into f32) unless
--dtype f32 converts floating-point ones.

The file is written from the format's definition (8-byte little-endian header length, a JSON
header of dtype, shape and data_offsets per tensor, padded with spaces to 8 bytes, then the raw
little-endian data), so only Debian's python3-torch is needed. The input is read with
torch.load(weights_only=True), or where an older torch's weights-only reader refuses plain
numbers with an unpickler that builds only tensors, numbers, strings and containers: neither
runs code from the file. --full-load reads a file that holds other Python objects (only for
files you trust).
"""
import argparse
import json
import os
import pickle
import struct
import sys

import torch

DTYPES = {
    torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}
PREFIXES = ("_orig_mod.", "module.")


def fail(msg):
    print(f"torch_to_safetensors: error: {msg}", file=sys.stderr)
    sys.exit(2)


class SafeUnpickler(pickle.Unpickler):
    """Tensors, numbers, strings and containers only (what torch.load's weights-only reader
    accepts; torch < 2.0's refuses plain floats, which nanoGPT's ckpt.pt holds)."""
    ALLOWED = {("collections", "OrderedDict"), ("torch._utils", "_rebuild_tensor_v2"),
               ("torch._utils", "_rebuild_parameter"), ("torch", "Size"),
               ("torch._utils", "_rebuild_parameter_with_state"), ("torch", "device")}

    def find_class(self, module, name):
        if (module, name) in self.ALLOWED or (module == "torch" and name.endswith("Storage")):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not a tensor, number, string or "
                                     "container")


class safe_pickle:  # the module interface torch.load's weights-only path calls
    Unpickler = SafeUnpickler

    @staticmethod
    def load(f, **kw):
        return SafeUnpickler(f, **kw).load()


def load(path, full):
    if not os.path.exists(path):
        fail(f"{path}: no such file")
    if full:
        return torch.load(path, map_location="cpu")
    hint = " (hint: --full-load for a file you trust that holds other objects)"
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        first = e
    # torch < 2.0 takes its weights-only reader from this module attribute (and ignores a
    # pickle_module unless weights_only is false, where it would run any code): the same load
    # with SafeUnpickler in its place
    import torch.serialization as ser
    saved = getattr(ser, "_weights_only_unpickler", None)
    if saved is None:
        fail(f"{path}: cannot load: {first}{hint}")
    ser._weights_only_unpickler = safe_pickle
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # the unpickler's own message names what it refused
        fail(f"{path}: cannot load: {e}{hint}")
    finally:
        ser._weights_only_unpickler = saved


def state_dict_of(obj, path):
    """The state dict in obj, and nanoGPT's model_args when obj is its ckpt.pt."""
    if isinstance(obj, torch.nn.Module):
        return obj.state_dict(), None
    if not isinstance(obj, dict):
        fail(f"{path}: holds a {type(obj).__name__}, expected a state dict or a checkpoint dict")
    for key in ("model", "state_dict", "model_state_dict"):
        inner = obj.get(key)
        if isinstance(inner, torch.nn.Module):
            inner = inner.state_dict()
        if isinstance(inner, dict) and inner and all(torch.is_tensor(v) for v in inner.values()):
            return inner, obj.get("model_args")
    tensors = {k: v for k, v in obj.items() if torch.is_tensor(v)}
    if not tensors:
        fail(f"{path}: no tensors found (keys: {', '.join(map(str, list(obj)[:10]))})")
    return tensors, None


def clean(sd):
    out, dropped = {}, []
    for name, t in sd.items():
        for p in PREFIXES:
            while name.startswith(p):
                name = name[len(p):]
        if name.endswith(".attn.bias") and t.dim() == 4:  # nanoGPT's causal mask, not a weight
            dropped.append(name)
            continue
        if name in out:
            fail(f"two tensors are named '{name}' once prefixes are stripped")
        out[name] = t
    return out, dropped


def tensor_bytes(t):
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)  # numpy has no bfloat16; the bits are the same
    a = t.numpy()
    return a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()


def write_safetensors(path, tensors):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        if t.dtype not in DTYPES:
            fail(f"tensor '{name}': dtype {t.dtype} has no safetensors name here")
        b = tensor_bytes(t)
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(path + ".tmp", path)


def yaml_of(args):
    """nanoGPT's GPTConfig (model_args) as ctrain's model section."""
    keys = [("n_layer", "n_layer"), ("n_head", "n_head"), ("n_embd", "d_model"),
            ("block_size", "context"), ("vocab_size", "vocab"), ("bias", "bias"),
            ("dropout", "dropout")]
    parts = ["type: gpt"]
    for src, dst in keys:
        if src in args:
            v = args[src]
            parts.append(f"{dst}: {str(v).lower() if isinstance(v, bool) else v}")
    return "model: {" + ", ".join(parts) + "}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--dtype", choices=("keep", "f32"), default="keep")
    ap.add_argument("--full-load", action="store_true")
    a = ap.parse_args()
    sd, model_args = state_dict_of(load(a.input, a.full_load), a.input)
    tensors, dropped = clean(sd)
    if a.dtype == "f32":
        tensors = {k: v.float() if v.is_floating_point() else v for k, v in tensors.items()}
    write_safetensors(a.output, tensors)
    n = sum(t.numel() for t in tensors.values())
    print(f"{a.output}: {len(tensors)} tensors, {n} values")
    if dropped:
        print(f"left out {len(dropped)} causal-mask buffers (*.attn.bias): not weights")
    if model_args is not None:
        print(f"nanoGPT model_args: {dict(model_args)}")
        print("ctrain: " + yaml_of(model_args))
        print(f"        model.init_from: {a.output}")


if __name__ == "__main__":
    main()
