"""PlatformIO library (`--emit platformio`), written to <out>/platformio/<p>/:

  library.json            manifest (name, version, description, keywords, frameworks,
                          platforms, headers, build {flags, includeDir, srcDir, srcFilter},
                          export {include})
  include/<p>.h           the model (copy of the header)
  src/<p>.c               the one file with <P>_IMPLEMENTATION
  examples/platformio.ini a project for the board's PlatformIO id using the library
                          (lib_deps = symlink://..), examples/src/main.cpp runs one inference
  README.md

Library name: "cuvil-<p>" (<p> = the lower-cased --name).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from ..errors import CuvilError
from . import _pkg
from .escape import visible

NAME = "platformio"


def library_name(prefix: str) -> str:
    return f"cuvil-{prefix}"


def check_name(name: str) -> None:
    lib = library_name(name.lower())
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", name) or len(lib) > 100:
        raise CuvilError(f"--name '{visible(name)}': the PlatformIO library name '{visible(lib)}' may hold only letters, digits, "
                         f"'-' and '_', start with a letter or digit, and be at most 100 characters long")


def platform_of(c) -> tuple[str, str | None, str | None]:
    """(platform, board, framework) of the example project."""
    b = c.board.platformio_board
    if not b:
        return "native", None, None
    if b.startswith(("nucleo_", "disco_", "genericSTM32")):
        platform = "ststm32"
    elif b in ("nrf52840_dk", "nano33ble"):
        platform = "nordicnrf52"
    elif b in ("pico", "rpipico"):
        platform = "raspberrypi"
    elif b.startswith("mimxrt"):
        platform = "nxpimxrt"
    else:
        platform = "<platform>"
    framework = "zephyr" if platform == "nxpimxrt" else "arduino"
    return platform, b, framework


def manifest(c) -> str:
    p = c.prefix
    ins, outs = _pkg.ios(c, "input"), _pkg.ios(c, "output")
    io = "; ".join(f"{t.kind} {t.dtype}{list(t.shape)}" for t in ins + outs)
    data = {
        "name": library_name(p),
        "version": _pkg.__version__,
        "description": (f"Neural network {_pkg.source_name(c)} compiled by cuvil-mcu into one C99 header "
                        f"({io}; arena {c.plan.arena_size} B RAM, constants {c.weights_bytes} B flash)"),
        "keywords": ["cuvil-mcu", "neural network", "onnx", "inference", "tinyml"],
        "license": "Apache-2.0",
        "frameworks": "*",
        "platforms": "*",
        "headers": f"{p}.h",
        "build": {
            "flags": ["-O2"],
            "includeDir": "include",
            "srcDir": "src",
            "srcFilter": ["+<*.c>"],
        },
        "export": {
            "include": ["include", "src", "examples", "library.json", "README.md"],
        },
        "examples": [{"name": "run-once", "base": "examples", "files": ["platformio.ini", "src/main.cpp"]}],
    }
    return json.dumps(data, indent=2) + "\n"


def emit(c, out: Path) -> dict:
    check_name(c.prefix)
    p = c.prefix
    base = Path(out) / "platformio" / p
    platform, board, framework = platform_of(c)
    ctx = _pkg.context(c, lib=library_name(p), platform=platform, pboard=board, framework=framework,
                       env=(board or "native").replace("/", "_"))
    files = {
        base / "library.json": manifest(c),
        base / "include" / f"{p}.h": c.header,
        base / "src" / f"{p}.c": _pkg.render("platformio/model.c.j2", ctx),
        base / "examples" / "platformio.ini": _pkg.render("platformio/platformio.ini.j2", ctx),
        base / "examples" / "src" / "main.cpp": _pkg.render("platformio/main.cpp.j2", ctx),
        base / "README.md": _pkg.render("platformio/README.md.j2", ctx),
    }
    if framework == "zephyr":
        files[base / "examples" / "zephyr" / "CMakeLists.txt"] = _pkg.render("platformio/zephyr_CMakeLists.txt.j2", ctx)
        files[base / "examples" / "zephyr" / "prj.conf"] = "CONFIG_PRINTK=y\nCONFIG_CPP=y\nCONFIG_MAIN_STACK_SIZE=4096\n"
    return files
