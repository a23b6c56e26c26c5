"""Turn a MODEL argument into a :class:`~dlsched.dag.Graph`.

MODEL is a path to ``.onnx``, a TF GraphDef ``.pb``/``.pbtxt``, a SavedModel
folder, a ``.dag.json``, or a PyTorch factory ``path/to/file.py:fn`` /
``package.module:fn`` where ``fn()`` returns ``(module, example_inputs)``.
Frameworks are imported only by the importer that needs them.

A ``.dag.json`` is read by :func:`dlsched.formats.dag_json.load_dag`, the
format's one home: it sits beside ``save_dag``, so the file a run writes and
the file a later run reads are defined in one module, and there is no second
reader here to drift from it. The import points down: :mod:`dlsched.formats`
builds on the core only, and the importers' layer sits above it. The document's schema itself is
:meth:`dlsched.dag.Graph.to_dict` / :meth:`~dlsched.dag.Graph.from_dict`;
``load_dag`` adds only file I/O and error messages naming the file.
"""
from __future__ import annotations

import re
from pathlib import Path

from dlsched.formats.dag_json import load_dag

from dlsched.dag import MODES, Graph
from dlsched.errors import ImportFailure

_FACTORY = re.compile(r"^(?P<target>.+?):(?P<fn>[A-Za-z_][A-Za-z0-9_]*)$")


def detect_format(model: str) -> str:
    """Return one of ``onnx``, ``graphdef``, ``savedmodel``, ``dag``, ``torch``.

    Raises
    ------
    ImportFailure
        For a missing path or an unknown suffix.
    """
    p = Path(model)
    if model.endswith(".dag.json"):
        return "dag"
    if p.suffix == ".onnx":
        return "onnx"
    if p.suffix in (".pb", ".pbtxt"):
        return "graphdef"
    if p.is_dir():
        return "savedmodel"
    m = _FACTORY.match(model)
    if m and (m["target"].endswith(".py") or re.fullmatch(r"[A-Za-z_][\w.]*", m["target"])):
        return "torch"
    if not p.exists():
        raise ImportFailure(
            f"{model}: no such file, and not a PyTorch factory of the form file.py:fn or package.module:fn")
    raise ImportFailure(
        f"{model}: unknown model format {p.suffix or '(no suffix)'!r}; expected .onnx, .pb, .pbtxt, "
        f".dag.json, a SavedModel folder, or a PyTorch factory file.py:fn")


def load_model(model: str, mode: str | None = None, batch: int | None = None, ps: int | None = None,
               ps_strategy: str | None = None, buffers: bool = False,
               frozen_consts: bool = True) -> Graph:
    """Import ``model`` into the common DAG and assign its parameter servers.

    Parameters
    ----------
    model : str
        See the module docstring.
    mode : {"inference", "training"}, optional
        Default ``inference``. A ``.dag.json`` keeps the mode it was saved
        with: asking it for another is an error, not silently ignored.
    batch : int, optional
        Overrides a symbolic (or the example's) batch dimension. Not for a
        ``.dag.json``, whose shapes were fixed when it was captured (its own
        recorded batch is accepted).
    ps, ps_strategy : int, str, optional
        Parameter-server count (default 1) and assignment (``round-robin``,
        the default, or ``greedy``). A saved ``.dag.json`` keeps its own
        assignment unless these are given.
    buffers : bool
        Also turn non-trainable floating-point state into recv ops: torch
        buffers (BatchNorm running statistics), and for ONNX the initializers
        feeding BatchNormalization's mean/variance inputs. Decided at import,
        so not for a ``.dag.json``.
    frozen_consts : bool
        TF only: treat floating-point ``Const`` tensors of rank ≥ 1 in frozen
        graphs as parameters.

    Raises
    ------
    ImportFailure, GraphError
    """
    if mode is not None and mode not in MODES:
        raise ImportFailure(f"unknown mode {mode!r}; expected inference or training")
    if batch is not None and batch < 1:
        raise ImportFailure(f"--batch must be at least 1, got {batch}")
    fmt = detect_format(model)
    mode = mode or ("inference" if fmt != "dag" else None)
    if fmt == "dag":
        graph = load_dag(model)
        _check_saved_options(model, graph, mode, batch, buffers)
    elif fmt == "onnx":
        from .onnx_importer import import_onnx
        graph = import_onnx(model, mode=mode, batch=batch, buffers=buffers)
    elif fmt == "graphdef":
        from .tf_importer import import_graphdef
        graph = import_graphdef(model, mode=mode, batch=batch, frozen_consts=frozen_consts)
    elif fmt == "savedmodel":
        from .tf_importer import import_saved_model
        graph = import_saved_model(model, mode=mode, batch=batch)
    else:
        from .torch_importer import import_factory
        graph = import_factory(model, mode=mode, batch=batch, buffers=buffers)
    graph.validate()
    if fmt != "dag" or ps is not None or ps_strategy is not None:
        graph.assign_ps(ps or graph.ps_count if fmt == "dag" else ps or 1,
                        ps_strategy or (graph.ps_strategy if fmt == "dag" else "round-robin"))
    return graph


def _check_saved_options(path: str, graph: Graph, mode: str | None, batch: int | None, buffers: bool) -> None:
    """Refuse import options that a saved DAG cannot honour, instead of ignoring them."""
    fixed = []
    if mode is not None and mode != graph.mode:
        fixed.append(f"it holds the {graph.mode} graph, and the {mode} graph is needed (--mode {mode}), which it "
                     "cannot become")
    recorded = (graph.source or {}).get("batch")
    if batch is not None and batch != recorded:
        at = f"at batch {recorded}" if recorded is not None else "when it was captured"
        fixed.append(f"its shapes were fixed {at}, so --batch {batch} cannot apply")
    if buffers:
        fixed.append("its transfers were chosen when it was captured, so --buffers cannot apply")
    if fixed:
        raise ImportFailure(f"{path} is a saved DAG: {'; '.join(fixed)}. Drop the option(s), or import the "
                            "original model again with them (dlsched inspect MODEL ... --save FILE.dag.json).")
