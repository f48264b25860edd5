"""The README's supported-op table and the op registry must not drift apart."""
import re
from pathlib import Path

from cuvil_mcu import ops

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def _table_ops() -> set[str]:
    section = README.split("## Supported ops", 1)[1].split("\n## ", 1)[0]
    names = set()
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and not set(cells[0]) <= {"-"} and cells[0] != "family":
            names.update(n.strip() for n in cells[1].split(",") if n.strip())
    return names


def test_every_registered_op_is_in_the_readme_table():
    public = {t for t in ops.registry() if not t.startswith("cuvil.")}
    table = _table_ops()
    missing = sorted(public - table)
    assert not missing, f"registered but not in README's op table: {missing}"
    extra = sorted(t for t in table - public if re.fullmatch(r"[A-Za-z.]+", t))
    assert not extra, f"in README's op table but not registered: {extra}"
