import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
# Compiled test binaries are cached per session run, not across runs.
os.environ.setdefault("CUVIL_CACHE", tempfile.mkdtemp(prefix="cuvil-test-cache-"))


def pytest_terminal_summary(terminalreporter):
    """One line for CI logs: how many ONNX node test cases ran and passed
    (tests/test_onnx_backend.py), also under pytest-xdist."""
    outcomes = {}
    for outcome in ("passed", "failed", "skipped", "error"):
        ids = {r.nodeid for r in terminalreporter.stats.get(outcome, [])
               if "test_onnx_backend.py::OnnxBackend" in getattr(r, "nodeid", "")}
        if ids:
            outcomes[outcome] = len(ids)
    if outcomes:
        terminalreporter.write_line("ONNX node test suite: " + ", ".join(
            f"{n} {k}" for k, n in outcomes.items()) + " (skipped = excluded; the reasons are in the short summary)")
