"""ctrain from Python: train, evaluate and use experiments through the shared library libctrain
(ctypes; numpy for arrays). See docs/python.md.

    import ctrain
    metrics = ctrain.fit("examples/fashion_mnist_mlp.yaml", ["trainer.max_epochs=1"])
    run = ctrain.Run("runs/fashion_mnist_mlp")
    probs = run.predict(images)        # [N, 10]
"""
from ._native import Error, library_path, version
from .api import Run, Stop, evaluate, fit, read_safetensors

__all__ = ["Error", "Run", "Stop", "evaluate", "fit", "library_path", "read_safetensors",
           "version"]
__version__ = "0.1.0"
