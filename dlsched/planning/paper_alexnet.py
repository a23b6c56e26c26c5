"""AlexNet's convolution algorithm table from paper ``003_*``'s Table 2 (its Fig. 2 example).

Table 2 gives AlexNet's five convolutions (input and output sides, depths,
filter size) and, at batch 128, each one's FFT workspace as a multiple of
GEMM's: 11.6×, 1.6×, 2.3×, 2.7×, 2.3×. Everything else below is an assumption
of this module, chosen to be plausible for a 2017 GPU, not a measurement:

- GEMM workspace: the explicit-GEMM (im2col) column buffer, (filter area ×
  input depth) by (output area) float32 values per sample, for the whole batch.
- FFT workspace: Table 2's ratio times GEMM's, at every batch.
- GEMM time per training step: 2 ms of fixed cost per layer (kernel launches,
  a GPU not yet full) plus, per sample, the forward and the two backward
  convolutions (3 × the layer's multiply-adds × 2 FLOPs) at 4 TFLOP/s. So it
  grows linearly in the batch from an intercept, and throughput rises with
  the batch as the fixed cost is amortised.
- FFT time: GEMM's divided by 2 on conv1 (11×11 filters) and by 1.5 on conv2
  (5×5). FFT pays off on large filters (Mathieu et al. 2013); on the 3×3
  layers it is assumed no faster than GEMM, so GEMM is both faster (or as fast)
  and leaner there: those layers have no trade-off.
- Memory (Eqs. 2–4, float32): parameters of every layer three times (weights
  and two gradient copies, the paper's ×3); per sample, the input and every
  convolution, pooling and fully-connected output (the paper writes the
  fully-connected outputs without the batch factor; they are per sample).

With those, on a 12 GiB device the curve has Fig. 2's shape: samples/s rises
with the batch, drops where conv1's FFT workspace stops fitting, and never
regains that peak. ``examples/make_alexnet_algorithms.py`` writes the table to
``examples/alexnet_algorithms.csv``.

Examples
--------
>>> table = alexnet_algorithm_table([128])
>>> table[table.layer == "conv1"][["algorithm", "time_s", "workspace_bytes"]]
  algorithm   time_s  workspace_bytes
0      gemm  0.02224        562214400
1       fft  0.01112       6521687040
>>> round(alexnet_memory_left()(128) / 2**30, 2)
10.86
"""
from __future__ import annotations

from typing import Iterable

from .fastest_batch import LinearMemory

FLOAT_BYTES = 4
#: Table 2: name, input side, output side (square maps), input depth, output depth, filter side.
CONVOLUTIONS = (
    ("conv1", 224, 55, 3, 96, 11),
    ("conv2", 27, 27, 96, 256, 5),
    ("conv3", 13, 13, 256, 384, 3),
    ("conv4", 13, 13, 384, 384, 3),
    ("conv5", 13, 13, 384, 256, 3),
)
#: Table 2: FFT workspace / GEMM workspace at batch 128.
FFT_WORKSPACE_RATIO = {"conv1": 11.6, "conv2": 1.6, "conv3": 2.3, "conv4": 2.7, "conv5": 2.3}
#: Assumed: GEMM time / FFT time.
FFT_SPEEDUP = {"conv1": 2.0, "conv2": 1.5, "conv3": 1.0, "conv4": 1.0, "conv5": 1.0}
GEMM_FLOPS_PER_S = 4e12
LAYER_OVERHEAD_S = 2e-3
#: Outputs of the feature extraction (side, depth): input, conv1, pool1, conv2, pool2, conv3–5, pool5 (Eq. 2).
FEATURE_MAPS = ((224, 3), (55, 96), (27, 96), (27, 256), (13, 256), (13, 384), (13, 384), (13, 256), (6, 256))
#: Fully-connected widths, the flattened pool5 first (Eq. 4).
CLASSIFIER = (9216, 4096, 4096, 1000)
DEFAULT_BATCHES = tuple(range(16, 1025, 16))
DEVICE_BYTES = 12 * 2**30


def alexnet_algorithm_table(batches: Iterable[int] = DEFAULT_BATCHES):
    """GEMM and FFT rows for AlexNet's convolutions at ``batches`` (an algorithm table DataFrame).

    Rows are by batch, then layer, GEMM before FFT; workspaces are whole bytes.
    """
    import pandas as pd

    rows = []
    for b in batches:
        for name, side_in, side_out, depth_in, depth_out, f in CONVOLUTIONS:
            column_values = f * f * depth_in * side_out * side_out  # im2col buffer, per sample
            macs = column_values * depth_out
            gemm_s = LAYER_OVERHEAD_S + b * 3 * 2 * macs / GEMM_FLOPS_PER_S
            gemm_ws = b * column_values * FLOAT_BYTES
            rows.append((name, "gemm", b, gemm_s, gemm_ws))
            rows.append((name, "fft", b, gemm_s / FFT_SPEEDUP[name], round(gemm_ws * FFT_WORKSPACE_RATIO[name])))
    return pd.DataFrame(rows, columns=["layer", "algorithm", "batch", "time_s", "workspace_bytes"])


def alexnet_memory_left(capacity: float = DEVICE_BYTES) -> LinearMemory:
    """Memory left for workspace on a ``capacity``-byte device, from Eqs. 2–4 (the module's assumptions)."""
    conv_params = sum(f * f * d_in * d_out + d_out for _, _, _, d_in, d_out, f in CONVOLUTIONS)
    fc_params = sum(a * b + b for a, b in zip(CLASSIFIER, CLASSIFIER[1:]))
    per_sample = sum(side * side * depth for side, depth in FEATURE_MAPS) + sum(CLASSIFIER[1:])
    return LinearMemory(capacity, fixed_bytes=3 * (conv_params + fc_params) * FLOAT_BYTES,
                        per_sample_bytes=per_sample * FLOAT_BYTES)
