"""The ``inspect`` answer: what MODEL's DAG holds (:func:`dlsched.analyses.summary.summarize`), saved on request.

Examples
--------
>>> from dlsched.synthetic import random_dag
>>> g, _ = random_dag(6, 2, training=True, seed=1)
>>> answer = inspect(ModelSpec.of(g))
>>> answer.summary["recv_ops"], answer.graph is g
(2, True)
"""
from __future__ import annotations

from dataclasses import dataclass

from dlsched.dag import Graph

from .options import ModelSpec


@dataclass(frozen=True)
class Inspection:
    """The model and its summary (the keys of :func:`~dlsched.analyses.summary.summarize`)."""

    graph: Graph
    summary: dict


def inspect(model: ModelSpec, save: str | None = None) -> Inspection:
    """Load ``model`` and summarise it; with ``save``, also write its DAG there (``.dag.json``)."""
    from dlsched.analyses.summary import summarize

    graph = model.load()
    summary = summarize(graph)
    if save:
        from dlsched.formats.dag_json import save_dag

        save_dag(graph, save)
    return Inspection(graph, summary)
