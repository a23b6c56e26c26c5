"""DDP's gradient buckets: dlsched's packing (``analyses/ddp_buckets.py``) against torch's own DDP.

The peer's numbers come from a real ``DistributedDataParallel`` (gloo, one
process) after it rebuilt its buckets: ``_get_ddp_logging_data()["rebuilt_bucket_sizes"]``.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.analyses.ddp_buckets import DEFAULT_BUCKET_BYTES, FIRST_BUCKET_BYTES, bucket_assignment, step_shape
from dlsched.importers.loader import load_model
from tests.conftest import REPO

_DDP = r"""
import json, os, socket, sys
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
sys.path.insert(0, "examples")
import torch_models
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
dist.init_process_group("gloo", rank=0, world_size=1)
out = {}
for name in sys.argv[1:]:
    module, inputs = torch_models.FACTORIES[name](batch=2)
    ddp = DDP(module)
    for _ in range(3):  # DDP rebuilds its buckets at the forward after the first backward
        ddp(*inputs).float().sum().backward()
    out[name] = [int(x) for x in ddp._get_ddp_logging_data()["rebuilt_bucket_sizes"].split(", ")]
print(json.dumps(out))
"""

MODELS = ["small_cnn", "transformer"]


@pytest.fixture(scope="module")
def ddp_sizes():
    proc = subprocess.run([sys.executable, "-c", _DDP, *MODELS], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", MODELS)
def test_bucket_sizes_equal_ddps_at_its_defaults(ddp_sizes, name):
    graph = load_model(f"examples/torch_models.py:{name}", mode="training", batch=2)
    shape = step_shape(graph, {op.name: 1e-3 for op in graph.ops()})
    assert list(shape.bucket_bytes) == ddp_sizes[name]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 5_000_000), min_size=1, max_size=60), st.integers(1, 8_000_000),
       st.integers(1, 8_000_000))
def test_no_gradient_is_lost_and_each_bucket_closes_at_its_cap(sizes, cap, first):
    buckets = bucket_assignment(sizes, cap, first)
    assert [i for b in buckets for i in b] == list(range(len(sizes)))  # every gradient once, in order
    for k, b in enumerate(buckets):
        limit = first if k == 0 else cap
        total = sum(sizes[i] for i in b)
        assert total - sizes[b[-1]] < limit  # it closed as soon as it reached its cap
        if k < len(buckets) - 1:
            assert total >= limit


def test_resnet18_fc_fills_the_first_bucket_alone():
    """pytorch issue #48880's figure: ResNet-18's fc (bias then weight, 2,052,000 B) is its first bucket."""
    buckets = bucket_assignment([4_000, 2_048_000, 1_048_576], DEFAULT_BUCKET_BYTES, FIRST_BUCKET_BYTES)
    assert buckets[0] == [0, 1]
