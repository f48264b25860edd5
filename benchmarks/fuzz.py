"""Long fuzz run of `cuvil-mcu gen` (issue 11; tests/fuzzing.py says what a
case is and what counts as a failure). Prints the numbers and every failure.

    python benchmarks/fuzz.py [--seed 1] [--cases 3000] [--full] [--sanitize] [--jobs 2]
    python benchmarks/fuzz.py --seed S --only N     # replay one case, keep its folder

--full adds the larger shared models and the example MobileNetV2 to the
bases; --sanitize builds every successful header with ASan/UBSan.
"""
import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]
os.environ.setdefault("CUVIL_CACHE", tempfile.mkdtemp(prefix="cuvil-fuzz-cache-"))
import fuzzing  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", type=int, default=3000)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--only", type=int, help="run this one case and keep its folder")
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--sanitize", action="store_true")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--no-ort", dest="ort", action="store_false")
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="cuvil-fuzz-"))
    work.mkdir(parents=True, exist_ok=True)
    fz = fuzzing.Fuzzer(args.seed, work, timeout=args.timeout, sanitize=args.sanitize, full=args.full,
                        ort=args.ort)
    if args.only is not None:
        o = fz.run(args.only)
        print(o.line(args.seed))
        print(f"folder: {work}")
        return int(o.failed)
    t0 = time.monotonic()
    for i in range(args.start, args.start + args.cases):
        o = fz.run(i)
        if o.failed:
            print(o.line(args.seed), flush=True)
        if (i + 1 - args.start) % 200 == 0:
            print(f"... {i + 1 - args.start} cases, {time.monotonic() - t0:.0f} s: "
                  f"{json.dumps(fuzzing.summary(fz.outcomes))}", flush=True)
    s = fuzzing.summary(fz.outcomes)
    s["seconds"] = round(time.monotonic() - t0, 1)
    s["seed"] = args.seed
    s["bases"] = sorted(fz.bases)
    print(json.dumps(s, indent=1))
    return int(bool(s["failures"]))


if __name__ == "__main__":
    sys.exit(main())
