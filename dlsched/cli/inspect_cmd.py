"""``dlsched inspect MODEL``: what the DAG holds."""
from __future__ import annotations

import click

from .common import console, emit_json, fmt_bytes, key_value_table, model_options


@click.command()
@model_options
@click.option("--save", type=click.Path(dir_okay=False), help="Also write the DAG to this .dag.json file.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def inspect(model, save, as_json):
    """Summarise MODEL: ops by type, parameters, transfers, roots and leaves.

    MODEL is an .onnx file, a TF GraphDef (.pb/.pbtxt), a SavedModel folder, a
    .dag.json, or a PyTorch factory file.py:fn returning (module, example_inputs).
    """
    from dlsched.answers.inspect import inspect as answer

    found = answer(model, save)
    graph, summary = found.graph, found.summary
    if as_json:
        emit_json(summary)
        return
    from rich.table import Table

    rows = [("ops", f"{summary['ops']:,}"),
            ("compute ops", f"{summary['compute_ops']:,}"),
            ("recv ops (parameters)", f"{summary['recv_ops']:,}"),
            ("send ops (gradients)", f"{summary['send_ops']:,}"),
            ("parameters", f"{summary['param_count']:,}"),
            ("parameter bytes", f"{fmt_bytes(summary['param_bytes'])}  ({summary['param_bytes']:,} B)"),
            ("roots / leaves", f"{summary['roots']:,} / {summary['leaves']:,}"),
            ("longest path (ops)", f"{summary['longest_path']:,}"),
            ("parameter servers", str(summary["parameter_servers"])),
            ("fingerprint", summary["fingerprint"])]
    if summary["capture"]:
        rows.append(("captured with", summary["capture"]))
    if "exporter_folded" in summary:  # the figures are for the model the exporter optimised
        folded = summary["exporter_folded"]
        rows.append(("folded by the exporter", f"{folded['parameters']:,} parameters ("
                     + ", ".join(f"{rule} ×{n}" for rule, n in folded["rules"].items()) + ")"))
    t = key_value_table(f"{graph.name} ({graph.mode})", rows)
    console.print(t)
    types = Table(title="compute ops by type", title_justify="left")
    types.add_column("op type")
    types.add_column("count", justify="right")
    for name, n in summary["op_types"].items():
        types.add_row(name, f"{n:,}")
    console.print(types)
    if save:
        console.print(f"saved DAG to [bold]{save}[/]")
