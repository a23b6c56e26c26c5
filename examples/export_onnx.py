"""Export the example PyTorch networks to ONNX, offline.

Usage::

    python examples/export_onnx.py [OUT_DIR] [--models resnet50,vgg16] [--batch 8] [--opset 17]

``OUT_DIR`` defaults to ``$DLSCHED_CACHE`` or ``.cache/models``. Each model is
written as ``<name>.onnx`` with a symbolic batch axis (``batch``), so dlsched's
``--batch`` can resize it later.

Two export options matter for dlsched and are fixed here:

- ``do_constant_folding=False``: folding would fuse BatchNormalization into
  the preceding Conv and fold transposed Linear weights into new, anonymous
  initializers. Without it every initializer keeps its torch parameter name
  (``layer1.0.conv1.weight``) and the ONNX parameter totals equal torch's
  ``named_parameters()`` (ResNet-50: 25,557,032; VGG-16: 138,357,544).
- ``keep_initializers_as_inputs=True`` during export: otherwise the exporter
  deduplicates initializers with equal values (all the freshly initialised
  BatchNorm weights are ones) and routes them through ``Identity`` nodes,
  which loses parameter names. The initializers are removed from the graph
  inputs afterwards, so the file is a conventional IR ≥ 4 model.
- ``training=TrainingMode.EVAL`` (the model is in eval mode anyway): dropout
  disappears and BatchNormalization reads its running statistics as
  initializers, which dlsched treats as non-trainable state.

The legacy TorchScript exporter (``dynamo=False``) is used because the
default one needs onnxscript. Nothing is downloaded; weights are the
factories' seeded random initialisation.

Example
-------
>>> from examples.export_onnx import export           # doctest: +SKIP
>>> export("small_cnn", ".cache/models", batch=4)      # doctest: +SKIP
PosixPath('.cache/models/small_cnn.onnx')
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import os
import sys
import tempfile
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODELS = ("resnet50", "vgg16", "transformer", "small_cnn")


def default_dir() -> Path:
    """``$DLSCHED_CACHE`` or ``<repo>/.cache/models``."""
    return Path(os.environ.get("DLSCHED_CACHE", HERE.parent / ".cache" / "models"))


def _factories():
    # Load torch_models.py by path so this works with or without `examples` on sys.path.
    spec = importlib.util.spec_from_file_location("_dlsched_example_torch_models", HERE / "torch_models.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.FACTORIES


def _drop_initializer_inputs(path: str) -> None:
    """Remove initializers from the graph inputs (kept there only to stop deduplication)."""
    import onnx

    model = onnx.load(path)
    inits = {t.name for t in model.graph.initializer}
    real = [i for i in model.graph.input if i.name not in inits]
    del model.graph.input[:]
    model.graph.input.extend(real)
    onnx.save(model, path)


def export(name: str, out_dir: str | Path | None = None, batch: int = 2, opset: int = 17,
           filename: str | None = None) -> Path:
    """Export the example model ``name`` to ``out_dir/<name>.onnx`` and return the path.

    Parameters
    ----------
    name : {"resnet50", "vgg16", "transformer", "small_cnn"}
    out_dir : path, optional
        Destination folder (created); default :func:`default_dir`.
    batch : int
        Batch of the example input used for tracing. The exported batch axis
        is symbolic either way.
    opset : int
        ONNX opset version.
    filename : str, optional
        File name inside ``out_dir``; default ``<name>.onnx``.

    Returns
    -------
    pathlib.Path
        The written file. It is written under a temporary name and renamed, so
        a concurrent reader never sees half a file.
    """
    import torch

    factories = _factories()
    if name not in factories:
        raise ValueError(f"unknown example model {name!r}; choose from {', '.join(factories)}")
    out_dir = Path(out_dir) if out_dir is not None else default_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / (filename or f"{name}.onnx")
    module, inputs = factories[name](batch=batch)
    module.eval()
    input_names = ["tokens"] if name == "transformer" else ["input"]
    dynamic_axes = {input_names[0]: {0: "batch"}, "output": {0: "batch"}}
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=out_dir)
    os.close(fd)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module, tuple(inputs), tmp, dynamo=False, opset_version=opset,
                input_names=input_names, output_names=["output"], dynamic_axes=dynamic_axes,
                do_constant_folding=False, training=torch.onnx.TrainingMode.EVAL,
                export_params=True, keep_initializers_as_inputs=True,
            )
        _drop_initializer_inputs(tmp)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", nargs="?", default=None, help="output folder [$DLSCHED_CACHE or .cache/models]")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of " + ",".join(MODELS))
    ap.add_argument("--batch", type=int, default=2, help="batch of the tracing input (the axis stays symbolic)")
    ap.add_argument("--opset", type=int, default=17)
    args = ap.parse_args(argv)
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        path = export(name, args.out_dir, batch=args.batch, opset=args.opset)
        print(f"{name}: {path} ({path.stat().st_size / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
