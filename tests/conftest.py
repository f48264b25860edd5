import os
import sys
import tempfile

# Test the checkout these tests live in (also in subprocesses), whatever
# copy of cuvil_mcu pip installed last.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.dirname(__file__), ROOT]
os.environ["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p])
# Compiled test binaries are cached per session run, not across runs.
os.environ.setdefault("CUVIL_CACHE", tempfile.mkdtemp(prefix="cuvil-test-cache-"))
# gen's compile cache (cuvil_mcu/cache.py) likewise: never the user's ~/.cache.
os.environ.setdefault("CUVIL_CACHE_DIR", tempfile.mkdtemp(prefix="cuvil-test-gencache-"))


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
