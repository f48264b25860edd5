"""Write docs/onnx_backend_results.md from a run of tests/test_onnx_backend.py.

    python -m pytest -q -p no:cacheprovider tests/test_onnx_backend.py -n 2 --junitxml=/tmp/backend.xml
    python tests/onnx_backend_report.py /tmp/backend.xml > docs/onnx_backend_results.md

Counts come from the run's JUnit XML (passed / failed / skipped = excluded);
the op each case tests and the reason of each exclusion from the test
module itself (SELECTED, EXCLUDED), so the page and the suite cannot drift.
"""
from __future__ import annotations

import collections
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import onnx  # noqa: E402

import test_onnx_backend as tob  # noqa: E402


def outcomes(junit: str) -> dict[str, str]:
    """case name (without _cpu) -> passed / failed / skipped, node cases only"""
    out = {}
    for tc in ET.parse(junit).iter("testcase"):
        name = tc.get("name", "")
        if "OnnxBackend" not in tc.get("classname", "") or not name.endswith("_cpu"):
            continue
        status = "passed"
        for child in tc:
            if child.tag == "skipped":
                status = "skipped"
            elif child.tag in ("failure", "error"):
                status = "failed"
        out[name[: -len("_cpu")]] = status
    return out


def main(junit: str) -> str:
    res = outcomes(junit)
    missing = sorted(set(tob.SELECTED) - set(res))
    if missing:
        raise SystemExit(f"{junit}: {len(missing)} selected cases did not run (e.g. {missing[0]}); run the whole file")
    per_op: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for name, op in tob.SELECTED.items():
        per_op[op][res[name]] += 1
    total = collections.Counter(res[n] for n in tob.SELECTED)
    gcc = subprocess.run(["gcc", "-dumpfullversion"], capture_output=True, text=True).stdout.strip() or "?"
    reasons = collections.Counter(tob.EXCLUDED.values())
    lines = [
        "# ONNX backend node tests: results",
        "",
        "`tests/test_onnx_backend.py` runs the node test suite shipped in the `onnx`",
        "package through `cuvil_mcu.backend.CuvilBackend`: every case is compiled to",
        "C, built with the host compiler and executed; outputs are compared with",
        "ONNX's expected outputs (rtol 1e-3, atol 1e-7).",
        "",
        f"Run recorded here: onnx {onnx.__version__}, gcc {gcc}, `python -m pytest -q -p no:cacheprovider",
        f"tests/test_onnx_backend.py -n 2`: **{total['passed']} passed, {total['failed']} failed, "
        f"{total['skipped']} excluded**",
        f"({len(tob.SELECTED)} selected cases). Written by `tests/onnx_backend_report.py` from that run's",
        "JUnit XML; re-run both for current numbers (the terminal summary of the test run prints an",
        "`ONNX node test suite: ...` line).",
        "",
        "Selection: the cases whose names test a claimed op, plus the cases of other",
        "ops whose expanded function body only uses claimed ops (\"composite\").",
        "Weights, shapes and bounds that the node tests feed as graph inputs (Conv W,",
        "Reshape shape, Clip min/max, Slice starts ...) are bound as initializers by",
        "the backend, as a deployed model holds them.",
        "",
        "| op | passed | failed | excluded |",
        "|---|---:|---:|---:|",
    ]
    for op in sorted(per_op, key=lambda o: (o == "composite", o.lower())):
        c = per_op[op]
        lines.append(f"| {op} | {c['passed']} | {c['failed']} | {c['skipped']} |")
    lines += [f"| **total** | **{total['passed']}** | **{total['failed']}** | **{total['skipped']}** |", "",
              "## Exclusions (reason: cases)", "", "| reason | cases |", "|---|---:|"]
    for why, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"| {why} | {n} |")
    failed = sorted(n for n in tob.SELECTED if res[n] == "failed")
    lines += ["", "## Failures in this run", ""]
    lines += [f"- `{n}`" for n in failed] if failed else ["None."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    sys.stdout.write(main(sys.argv[1]))
