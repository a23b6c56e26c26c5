"""The ``--device`` check: ``cpu``, or ``cuda`` where the framework that runs the model sees a GPU.

The torch, TensorFlow and onnxruntime profilers and the memory measurement
all take ``--device``. Which names are devices, and how a missing GPU is
reported, is written here once, so that they all accept the same names and
refuse with the same message. Frameworks are imported only to look for a GPU.

Examples
--------
>>> check_device("cpu", "torch")
'cpu'
>>> check_device("tpu")
Traceback (most recent call last):
...
dlsched.errors.DlschedError: unknown device 'tpu'; expected cpu or cuda
"""
from __future__ import annotations

from dlsched.errors import DlschedError

DEVICES = ("cpu", "cuda")


def _torch_gpu() -> tuple[str, str] | None:
    import torch

    if torch.cuda.is_available():
        return None
    return "PyTorch", f"torch {torch.__version__}, built with CUDA {torch.version.cuda or 'none'}"


def _tensorflow_gpu() -> tuple[str, str] | None:
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        return None
    return "TensorFlow", "tensorflow-cpu, no CUDA device, or CUDA_VISIBLE_DEVICES hides it"


def _onnxruntime_gpu() -> tuple[str, str] | None:
    import onnxruntime as ort

    offered = ort.get_available_providers()
    if "CUDAExecutionProvider" in offered:
        return None
    return "onnxruntime", (f"it needs the CUDAExecutionProvider but offers only {', '.join(offered)}; "
                           "install onnxruntime-gpu")


# framework -> probe: None when it sees a GPU, else (its name, why not)
_GPU_PROBES = {"torch": _torch_gpu, "tensorflow": _tensorflow_gpu, "onnxruntime": _onnxruntime_gpu}


def check_device(device: str, framework: str | None = None) -> str:
    """``device`` when the model can run there; a :class:`DlschedError` otherwise.

    Parameters
    ----------
    device : str
        ``cpu`` or ``cuda`` (the ``--device`` option).
    framework : {"torch", "tensorflow", "onnxruntime"}, optional
        Whose view of the GPU decides whether ``cuda`` is available; ``None``
        checks the name only.

    Returns
    -------
    str
        ``device``.

    Raises
    ------
    DlschedError
        An unknown device name, or ``cuda`` where ``framework`` sees no GPU.

    Examples
    --------
    >>> check_device("cuda")
    'cuda'
    """
    if device not in DEVICES:
        raise DlschedError(f"unknown device {device!r}; expected {' or '.join(DEVICES)}")
    if device == "cuda" and framework is not None:
        missing = _GPU_PROBES[framework]()
        if missing is not None:
            name, why = missing
            raise DlschedError(f"--device cuda: {name} sees no GPU, so no CUDA device is available ({why}); use "
                               "--device cpu or run on a machine with a GPU")
    return device
