"""Every "DESIGN §N" that a docstring or --help cites names a section of the DESIGN.md shipped in the repository."""
from __future__ import annotations

import re

from tests.conftest import REPO

CITE = re.compile(r"DESIGN(?:\.md)? ?§ ?(\d+(?:\.\d+)?)")


def test_cited_design_sections_exist():
    design = (REPO / "DESIGN.md").read_text()
    sections = set(re.findall(r"^#+ (\d+(?:\.\d+)?)[. ]", design, flags=re.M))
    cited: dict[str, set[str]] = {}
    for folder in ("dlsched", "examples", "benchmarks"):
        for path in (REPO / folder).rglob("*.py"):
            for section in CITE.findall(path.read_text()):
                cited.setdefault(section, set()).add(str(path.relative_to(REPO)))
    assert cited, "no citations found: the pattern is wrong"
    missing = {s: sorted(p) for s, p in cited.items() if s not in sections}
    assert not missing, f"cited sections absent from DESIGN.md: {missing}"
