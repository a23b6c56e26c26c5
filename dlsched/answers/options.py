"""The option groups the answers share: which model, which oracle, which order.

A command builds them from its options (``dlsched.cli.common.model_options``,
``oracle_options``) and passes them down whole, so an answer's signature names
what it needs instead of repeating a dozen keywords, and the one way to load
MODEL with its oracle lives here. A model or oracle already in memory (a
notebook, a test) is handed over with :meth:`ModelSpec.of` and
:meth:`OracleSpec.of`.

Examples
--------
>>> ModelSpec("m.onnx", mode="training").import_options()
{'mode': 'training', 'batch': None, 'ps': None, 'ps_strategy': None, 'buffers': False}
>>> OracleSpec(None).given
False
>>> from dlsched.synthetic import random_dag
>>> g, t = random_dag(6, 2, seed=1)
>>> graph, times = load_timed_model(ModelSpec.of(g), OracleSpec.of(t))
>>> graph is g, times == t
(True, True)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from dlsched.dag import Graph


@dataclass(frozen=True)
class ModelSpec:
    """MODEL and how to import it (DESIGN §2, :func:`dlsched.importers.loader.load_model`).

    ``mode`` is ``None`` when the user did not choose one, so that a saved
    ``.dag.json`` keeps its own (other formats default to inference).
    ``graph`` is a model already loaded (:meth:`of`); :meth:`load` returns it.
    """

    path: str | None
    mode: str | None = None
    batch: int | None = None
    ps: int | None = None
    ps_strategy: str | None = None
    buffers: bool = False
    graph: Graph | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, graph: Graph) -> "ModelSpec":
        """A model already in memory, named by its graph's name."""
        return cls(graph.name, mode=graph.mode, graph=graph)

    @property
    def given(self) -> bool:
        return self.path is not None

    def import_options(self) -> dict:
        """The loader's keywords, everything but the path."""
        return {"mode": self.mode, "batch": self.batch, "ps": self.ps, "ps_strategy": self.ps_strategy,
                "buffers": self.buffers}

    def load(self) -> Graph:
        """The model as the common DAG."""
        if self.graph is not None:
            return self.graph
        from dlsched.importers.loader import load_model

        return load_model(self.path, **self.import_options())


@dataclass(frozen=True)
class OracleSpec:
    """A time-oracle file and how to map it onto the model (DESIGN §3).

    ``default_time`` fills ops the oracle lacks; ``rescale_batch`` scales an
    oracle profiled at another batch instead of refusing it. ``known`` holds
    times already mapped onto the model (:meth:`of`); :meth:`times` returns them.
    """

    path: str | None
    default_time: float | None = None
    rescale_batch: bool = False
    known: Mapping[str, float] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, times: Mapping[str, float]) -> "OracleSpec":
        """Op times already in memory (op name → seconds for every op)."""
        return cls("<in memory>", known=times)

    @property
    def given(self) -> bool:
        return self.path is not None

    def times(self, graph: Graph) -> dict[str, float]:
        """Every op of ``graph`` mapped to its time (:func:`dlsched.profiling.oracle_times.load_times`)."""
        if self.known is not None:
            return dict(self.known)
        from dlsched.profiling.oracle_times import load_times

        return load_times(self.path, graph, self.default_time, rescale_batch=self.rescale_batch)


@dataclass(frozen=True)
class OrderChoice:
    """Which transfer order (DESIGN §4.2–4.5): by name, or a priority file's.

    Attributes
    ----------
    algo : str
        One of :data:`dlsched.analyses.orders.ORDERS` (``order`` takes
        :data:`~dlsched.analyses.orders.ALGORITHMS`).
    priorities : str, optional
        A priority file (from ``dlsched order``) whose order is enforced instead.
    seed : int
        Seeds ``random`` orders, the unordered baseline and (in ``simulate``) the jitter.
    time_limit : float, optional
        Seconds the ``exact`` search may take (then any size is accepted).
    """

    algo: str = "unordered"
    priorities: str | None = None
    seed: int = 0
    time_limit: float | None = None


def load_timed_model(model: ModelSpec, oracle: OracleSpec) -> tuple[Graph, dict[str, float]]:
    """MODEL and its oracle's times: the one way every answer loads them (both must be given)."""
    graph = model.load()
    return graph, oracle.times(graph)
