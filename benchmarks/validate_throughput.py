"""Samples per second of `cuvil-mcu validate`'s host run on the shared models.

    python benchmarks/validate_throughput.py [samples]      # default 2000

The generated C for the host board (cc -O3 -march=native), one compiled
program, one process per core over contiguous slices of the dataset, inputs
and outputs as one binary file each (cuvil_mcu/tools/validate.py). Inputs:
the shared samples repeated with seeded noise. Prints the wall time of the C
run only (the reference model's time is separate), the CPU seconds its
processes used (what an idle machine's wall time would be, times the number
of processes), and the machine's load.
"""
from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]
import shared_models as sm  # noqa: E402
from cuvil_mcu.compiler import compile_model  # noqa: E402
from cuvil_mcu.tools import validate  # noqa: E402


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    n = int(argv[0]) if argv else 2000
    rng = np.random.default_rng(0)
    jobs = os.cpu_count() or 1
    print(f"{'model':24s} {'MACs':>11} {'samples':>8} {'wall s':>8} {'samples/s':>10} {'CPU s':>8} "
          f"{'samples/s if idle':>17}")
    for name in ["hello_world", "ad_fc_autoencoder", "micro_speech", "kws_dscnn", "ic_resnet8",
                 "vww_mobilenet_v1_025", "person_detect"]:
        c = compile_model(str(sm.model_path(name)))
        g = c.graph
        x = sm.samples(name)["inputs"]
        reps = np.concatenate([x] * (n // len(x) + 1))[:n].astype(np.int16)
        xs = [np.clip(reps + rng.integers(-2, 3, reps.shape), -128, 127).astype(np.int8)
              .reshape((n, *g.tensors[g.inputs[0]].shape))]
        validate._run_c(c, [x[:8] for x in xs])        # build (cached) outside the timing
        u0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        validate._run_c(c, xs)
        dt = time.monotonic() - t0
        u1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (u1.ru_utime - u0.ru_utime) + (u1.ru_stime - u0.ru_stime)
        idle = n / (cpu / min(jobs, max(1, n // 64))) if cpu else float("inf")
        print(f"{name:24s} {c.macs:11,} {n:8,} {dt:8.2f} {n / dt:10,.0f} {cpu:8.2f} {idle:17,.0f}", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
