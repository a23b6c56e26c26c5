"""JUnit XML for ``dlsched check --junit``: one test case per metric.

CI systems (GitHub Actions test reporters, GitLab, Jenkins) display it as a
test suite; a regressed metric is a ``<failure>``.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd

from dlsched.atomic import atomic_open


def write_junit(table: pd.DataFrame, path: str | Path, suite: str, note: str | None = None) -> None:
    """Write the comparison ``table`` (see :func:`dlsched.analyses.regression.compare_metrics`)."""
    failures = int(table["regressed"].sum())
    root = ET.Element("testsuites", name="dlsched check", tests=str(len(table)), failures=str(failures))
    ts = ET.SubElement(root, "testsuite", name=suite, tests=str(len(table)), failures=str(failures),
                       errors="0", skipped="0")
    if note:
        props = ET.SubElement(ts, "properties")
        ET.SubElement(props, "property", name="note", value=note)
    for row in table.itertuples(index=False):
        tc = ET.SubElement(ts, "testcase", classname=f"dlsched.{suite}", name=row.metric, time="0")
        detail = (f"baseline={row.baseline} now={row.now} change="
                  f"{'n/a' if row.change is None or pd.isna(row.change) else f'{row.change:+.2%}'} "
                  f"tolerance={row.tolerance:.2%} verdict={row.verdict}")
        if row.regressed:
            ET.SubElement(tc, "failure", message=f"{row.metric} regressed", type="regression").text = detail
        else:
            ET.SubElement(tc, "system-out").text = detail
    ET.indent(root)
    with atomic_open(path, "w") as f:
        f.write('<?xml version="1.0" encoding="UTF-8"?>\n')
        f.write(ET.tostring(root, encoding="unicode"))
        f.write("\n")
