"""The option groups the answers share: which model, which oracle.

A command builds them from its options (``dlsched.cli.common.model_options``,
``oracle_options``) and passes them down whole, so an answer's signature names
what it needs instead of repeating a dozen keywords, and the one way to load
MODEL with its oracle lives here.

Examples
--------
>>> ModelSpec("m.onnx", mode="training").import_options()
{'mode': 'training', 'batch': None, 'ps': None, 'ps_strategy': None, 'buffers': False}
>>> OracleSpec(None).given
False
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from dlsched.dag import Graph


@dataclass(frozen=True)
class ModelSpec:
    """MODEL and how to import it (DESIGN §2, :func:`dlsched.importers.loader.load_model`).

    ``mode`` is ``None`` when the user did not choose one, so that a saved
    ``.dag.json`` keeps its own (other formats default to inference).
    """

    path: str | None
    mode: str | None = None
    batch: int | None = None
    ps: int | None = None
    ps_strategy: str | None = None
    buffers: bool = False

    @property
    def given(self) -> bool:
        return self.path is not None

    def import_options(self) -> dict:
        """The loader's keywords, everything but the path."""
        opts = asdict(self)
        del opts["path"]
        return opts

    def load(self) -> Graph:
        """The model as the common DAG."""
        from dlsched.importers.loader import load_model

        return load_model(self.path, **self.import_options())


@dataclass(frozen=True)
class OracleSpec:
    """A time-oracle file and how to map it onto the model (DESIGN §3).

    ``default_time`` fills ops the oracle lacks; ``rescale_batch`` scales an
    oracle profiled at another batch instead of refusing it.
    """

    path: str | None
    default_time: float | None = None
    rescale_batch: bool = False

    @property
    def given(self) -> bool:
        return self.path is not None

    def times(self, graph: Graph) -> dict[str, float]:
        """Every op of ``graph`` mapped to its time (:func:`dlsched.profiling.oracle_times.load_times`)."""
        from dlsched.profiling.oracle_times import load_times

        return load_times(self.path, graph, self.default_time, rescale_batch=self.rescale_batch)


def load_timed_model(model: ModelSpec, oracle: OracleSpec) -> tuple[Graph, dict[str, float]]:
    """MODEL and its oracle's times: the one way every answer loads them (both must be given)."""
    graph = model.load()
    return graph, oracle.times(graph)
