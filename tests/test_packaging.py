"""`pip install .` must give a working cuvil-mcu: templates/ and boards/ live
at the top of the repository but have to ship inside the wheel."""
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_ships_every_template_and_board(tmp_path):
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    wheel = next(tmp_path.glob("cuvil_mcu-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    templates = sorted(p.relative_to(ROOT / "templates").as_posix() for p in (ROOT / "templates").rglob("*.j2"))
    boards = sorted(p.name for p in (ROOT / "boards").glob("*.toml"))
    assert templates and boards
    firmware = sorted(p.relative_to(ROOT / "firmware_examples" / "baremetal").as_posix()
                      for p in (ROOT / "firmware_examples" / "baremetal").glob("*.[ch]"))
    assert firmware
    missing = [t for t in templates if f"cuvil_mcu/_templates/{t}" not in names]
    missing += [f for f in firmware if f"cuvil_mcu/_firmware/baremetal/{f}" not in names]
    missing += [b for b in boards if f"cuvil_mcu/_boards/{b}" not in names]
    assert not missing, f"not in the wheel: {missing}"
    assert any(n.endswith("entry_points.txt") for n in names)
