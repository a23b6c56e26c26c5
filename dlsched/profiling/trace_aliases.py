"""One table from the op spellings of traces and DAGs to the op *family* they are matched by.

A PyTorch trace names the op aten dispatched, which is not always the op the
DAG holds: ``F.batch_norm`` is ``aten::batch_norm`` → ``_batch_norm_impl_index``
→ ``cudnn_batch_norm`` on NVIDIA, ``miopen_batch_norm`` on AMD and
``native_batch_norm`` on CPU, while ``make_fx`` writes ``native_batch_norm``
(or ``_native_batch_norm_legit``) into a training DAG and an inference DAG holds
the ``BatchNorm2d`` module. Every spelling is first normalised
(:func:`normalize_type`: namespace, overload and trailing ``_`` dropped,
lower case, no underscores), then mapped through :data:`FAMILIES` to one family;
a trace event and a DAG op match when their families are equal.

Module events (``nn.Module: Conv2d_0``) are not mapped by family when the trace
is walked: a module is a unit only when the DAG holds that very module type, so
a training DAG's separate ``add_`` (BatchNorm's ``num_batches_tracked``) and
``native_batch_norm`` still meet the two aten ops inside ``nn.Module: BatchNorm2d``.

Examples
--------
>>> [op_family(n) for n in ("aten::cudnn_batch_norm", "aten.native_batch_norm.default", "BatchNorm2d")]
['batchnorm', 'batchnorm', 'batchnorm']
>>> op_family("aten::miopen_convolution") == op_family("Conv2d") == op_family("aten.convolution.default")
True
"""
from __future__ import annotations

import re

# Spellings that differ only in Python operator names or module class names.
_SPELLINGS = {"batchnorm1d": "batchnorm", "batchnorm2d": "batchnorm", "batchnorm3d": "batchnorm",
              "iadd": "add", "imul": "mul", "truediv": "div", "isub": "sub", "itruediv": "div",
              "floordiv": "floordivide"}

_TABLE = {
    "convolution": ("conv1d", "conv2d", "conv3d", "convolution", "convolutionoverrideable", "cudnnconvolution",
                    "miopenconvolution", "miopendepthwiseconvolution", "mkldnnconvolution", "thnnconv2d",
                    "slowconv2d", "slowconv3d", "cudnnconvolutionrelu", "cudnnconvolutionaddrelu"),
    "convolutionbackward": ("convolutionbackward", "convolutionbackwardoverrideable", "cudnnconvolutionbackward",
                            "miopenconvolutionbackward", "mkldnnconvolutionbackward", "slowconv2dbackward"),
    "batchnorm": ("batchnorm", "batchnormimplindex", "nativebatchnorm", "cudnnbatchnorm", "miopenbatchnorm",
                  "nativebatchnormlegit", "nativebatchnormlegitnotraining", "nativebatchnormlegitfunctional"),
    "batchnormbackward": ("batchnormbackward", "nativebatchnormbackward", "cudnnbatchnormbackward",
                          "miopenbatchnormbackward", "batchnormimplindexbackward"),
    "linear": ("linear", "addmm", "mm", "matmul"),
    "maxpool2d": ("maxpool2d", "maxpool2dwithindices"),
    "maxpool2dbackward": ("maxpool2dwithindicesbackward", "maxpool2dbackward"),
    "adaptiveavgpool2d": ("adaptiveavgpool2d",),
    "dropout": ("dropout", "nativedropout", "fuseddropout"),
    "layernorm": ("layernorm", "nativelayernorm"),
    "layernormbackward": ("nativelayernormbackward",),
    "relu": ("relu",),
    "gelu": ("gelu",),
}

#: Normalised spelling → family (spellings not listed are their own family).
FAMILIES = {s: fam for fam, spellings in _TABLE.items() for s in spellings}


def normalize_type(name: str) -> str:
    """Canonical op type for matching across fx, aten and trace spellings.

    Examples
    --------
    >>> [normalize_type(n) for n in ("aten::max_pool2d", "aten.convolution.default", "MaxPool2d", "add_")]
    ['maxpool2d', 'convolution', 'maxpool2d', 'add']
    """
    s = str(name)
    if s.startswith("nn.Module: "):
        s = s[len("nn.Module: "):]
        s = re.sub(r"_\d+$", "", s)
    s = re.sub(r"^(aten|prim|torch\.ops\.aten)(::|\.)", "", s)
    if "." in s:  # aten overload spelling op.overload
        s = s.split(".")[0]
    s = s.rstrip("_").lower().replace("_", "")
    return _SPELLINGS.get(s, s)


def op_family(name: str) -> str:
    """The family an op spelling is matched by (:data:`FAMILIES`, else its :func:`normalize_type`)."""
    s = normalize_type(name)
    return FAMILIES.get(s, s)
