"""Fixtures for the torch importer and profiler tests: small factory files written to disk."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

FACTORIES = textwrap.dedent('''
    """Small factories for dlsched's torch tests."""
    import torch
    from torch import nn


    class BNNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
            self.bn = nn.BatchNorm2d(8)
            self.scale = nn.Parameter(torch.ones(1))
            self.fc = nn.Linear(8, 4)

        def forward(self, x):
            x = torch.relu(self.bn(self.conv(x))) * self.scale
            return self.fc(x.mean(dim=(2, 3)))


    def bnnet():
        """No batch keyword: dlsched resizes dim 0 of the example input itself."""
        torch.manual_seed(0)
        return BNNet(), (torch.randn(3, 3, 8, 8),)


    class Regressor(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(6, 6)

        def forward(self, x):
            return self.lin(x)  # 3-D output: the training loss is the mean square


    def regressor(batch=2):
        torch.manual_seed(0)
        return Regressor(), (torch.randn(batch, 5, 6),)


    class Rotary(nn.Module):
        """A persistent running statistic and a non-persistent derived constant (like Llama's inv_freq)."""
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.register_buffer("shift", torch.zeros(4))
            self.register_buffer("inv_freq", torch.arange(1.0, 5.0), persistent=False)

        def forward(self, x):
            return self.lin(x) * self.inv_freq + self.shift


    def rotary():
        torch.manual_seed(0)
        return Rotary(), (torch.randn(2, 4),)


    def raises():
        raise RuntimeError("weights file is corrupt")


    def not_a_module():
        return 42


    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            if x.sum() > 0:  # data-dependent control flow: symbolic tracing fails
                return self.lin(x)
            return x


    def branchy():
        return Branchy(), (torch.randn(2, 4),)
''')


@pytest.fixture(scope="session")
def torch_factories(tmp_path_factory) -> Path:
    """Path of a ``factories.py`` holding bnnet, regressor, raises, not_a_module, branchy."""
    path = tmp_path_factory.mktemp("torch_factories") / "factories.py"
    path.write_text(FACTORIES)
    return path
