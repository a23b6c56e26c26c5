"""Write the AlexNet algorithm table of paper 003's Table 2 (its Fig. 2 example), offline.

Usage::

    python examples/make_alexnet_algorithms.py [OUT.csv]

``OUT.csv`` defaults to ``examples/alexnet_algorithms.csv``: GEMM and FFT rows
for AlexNet's five convolutions at batches 16, 32, …, 1024. Table 2 gives the
FFT/GEMM workspace ratios; the absolute times and workspaces are assumptions,
listed in :mod:`dlsched.planning.paper_alexnet`.
"""
from __future__ import annotations

import sys
from pathlib import Path

from dlsched.formats.algorithm_table import write_algorithm_table
from dlsched.planning.paper_alexnet import alexnet_algorithm_table

DEFAULT = Path(__file__).resolve().parent / "alexnet_algorithms.csv"

if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else DEFAULT
    write_algorithm_table(alexnet_algorithm_table(), out)
    print(f"wrote {out}")
