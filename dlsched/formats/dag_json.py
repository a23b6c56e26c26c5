"""The ``*.dag.json`` format: a saved :class:`dlsched.dag.Graph` with its fingerprint.

Any importer's output can be saved once and analysed later without the
framework installed. This module is the format's one home, the writer and
the reader: :func:`dlsched.importers.loader.load_model` reads a ``.dag.json`` MODEL
through :func:`load_dag`. The document's fields are
:meth:`dlsched.dag.Graph.to_dict` / :meth:`~dlsched.dag.Graph.from_dict`;
this module adds the file I/O, atomic writes and error messages naming the file.
"""
from __future__ import annotations

import json
from pathlib import Path

from dlsched.dag import Graph
from dlsched.errors import GraphError, ImportFailure

from dlsched.atomic import atomic_write_text


def save_dag(graph: Graph, path: str | Path) -> None:
    """Write ``graph`` to ``path`` atomically."""
    atomic_write_text(path, graph.to_json() + "\n")


def load_dag(path: str | Path) -> Graph:
    """Read a ``*.dag.json`` file.

    Raises
    ------
    ImportFailure
        The file is missing, not JSON, or not a valid DAG file.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ImportFailure(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ImportFailure(f"{path}: is a directory, not a .dag.json file") from None
    except OSError as e:
        raise ImportFailure(f"{path}: cannot read the DAG file ({e.strerror or e})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ImportFailure(f"{path}: not a valid DAG file, the JSON does not parse ({e})") from None
    if not isinstance(data, dict):
        raise ImportFailure(f"{path}: not a valid DAG file (expected a JSON object, got {type(data).__name__})")
    try:
        return Graph.from_dict(data)
    except GraphError as e:
        raise ImportFailure(f"{path}: {e}") from None
    except (KeyError, TypeError, ValueError) as e:
        raise ImportFailure(f"{path}: not a valid DAG file (bad or missing field: {e})") from None
