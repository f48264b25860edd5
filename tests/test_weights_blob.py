"""--weights separate: <name>.weights.bin and <name>_bind_weights.

On the host through lib<name>.so (ctypes calls the C function directly, so
every status is the C code's own), and on an emulated Cortex-M4 (QEMU
mps2-an386) whose firmware finds the blob in its own flash region: the
linker script gives the weights a separate address and QEMU's loader
device writes the blob there, apart from the firmware ELF, as an
over-the-air update would. Every corruption case is refused with its own
status, and the int8 KWS outputs with the good blob equal TFLM's."""
from __future__ import annotations

import ctypes
import re
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import cuvil_mcu
import cuvil_mcu.runtime
from cuvil_mcu.codegen import blob as blobfmt
from deploy_helpers import ROOT, cli, fails_cleanly, gen, kws_int8


def statuses(header: str, prefix: str) -> dict[str, int]:
    """NAME -> code, in the order of the header's X-macro status list."""
    body = header.split(f"#define {prefix.upper()}_STATUS_LIST(X)", 1)[1].split("#define", 1)[0]
    names = re.findall(rf"X\({prefix.upper()}_(\w+),", body)
    return {n: i for i, n in enumerate(names)}


def refix_crc(b: bytearray) -> bytearray:
    struct.pack_into("<I", b, blobfmt.CRC_AT, zlib.crc32(bytes(b[blobfmt.CRC_AT + 4:]),
                                                          zlib.crc32(bytes(b[:blobfmt.CRC_AT]))))
    return b


def corruptions(good: bytes, other: bytes) -> list[tuple[str, bytes, int | None, str]]:
    """(case, blob bytes, size passed to bind (None = len), expected status)."""
    n = len(good)
    cases = []
    b = bytearray(good); b[0] ^= 0x20
    cases.append(("bad magic", bytes(b), None, "ERR_WEIGHTS_MAGIC"))
    b = bytearray(good); struct.pack_into("<I", b, 4, blobfmt.FORMAT + 1); refix_crc(b)
    cases.append(("format version + 1", bytes(b), None, "ERR_WEIGHTS_VERSION"))
    cases.append(("another model's blob", other, None, "ERR_WEIGHTS_MODEL"))
    b = bytearray(good); b[8] ^= 1; refix_crc(b)
    cases.append(("graph hash changed", bytes(b), None, "ERR_WEIGHTS_MODEL"))
    b = bytearray(good); struct.pack_into("<I", b, 28, n - 64 + 16); refix_crc(b)
    cases.append(("payload size changed", bytes(b), None, "ERR_WEIGHTS_MODEL"))
    cases.append(("truncated by one byte", good, n - 1, "ERR_WEIGHTS_TRUNCATED"))
    cases.append(("header only", good, 64, "ERR_WEIGHTS_TRUNCATED"))
    cases.append(("half a header", good, 32, "ERR_WEIGHTS_TRUNCATED"))
    cases.append(("empty", good, 0, "ERR_WEIGHTS_TRUNCATED"))
    b = bytearray(good); b[n // 2] ^= 0x01
    cases.append(("one payload bit flipped", bytes(b), None, "ERR_WEIGHTS_CRC"))
    b = bytearray(good); b[n - 1] ^= 0x80
    cases.append(("last byte flipped", bytes(b), None, "ERR_WEIGHTS_CRC"))
    b = bytearray(good); b[50] = 7
    cases.append(("reserved header byte set", bytes(b), None, "ERR_WEIGHTS_CRC"))
    b = bytearray(good); b[blobfmt.CRC_AT] ^= 0xFF
    cases.append(("CRC field changed", bytes(b), None, "ERR_WEIGHTS_CRC"))
    return cases


@pytest.fixture(scope="module")
def kws_separate(tmp_path_factory):
    model, x, expected = kws_int8()
    out = tmp_path_factory.mktemp("kws_sep")
    gen(model, "--weights", "separate", "--emit", "so", "--name", "kws", "-o", out)
    other = tmp_path_factory.mktemp("kws_other")
    gen(model, "--weights", "separate", "--requant", "float", "--name", "kws", "-o", other)
    return out, (other / "kws.weights.bin").read_bytes(), x, expected


def test_blob_layout(kws_separate):
    out, _, _, _ = kws_separate
    data = (out / "kws.weights.bin").read_bytes()
    h = blobfmt.parse(data)
    assert h["magic"] == b"CUVW" and h["format"] == blobfmt.FORMAT and h["header"] == 64
    assert h["payload"] == len(data) - 64 and h["align"] == 16 and h["count"] > 10
    assert h["crc"] == zlib.crc32(data[44:], zlib.crc32(data[:40]))
    header = (out / "kws.h").read_text()
    assert f"#define KWS_WEIGHTS_BYTES   {len(data)}u" in header
    offs = [int(o) for o in re.findall(r"\(kws__weights \+ (\d+)u\)\)", header)]
    assert len(offs) == h["count"] and all(o % 16 == 0 and 64 <= o < len(data) for o in offs)
    hash_c = re.search(r"kws__graph_hash\[16\] = \{ ([^}]*) \}", header).group(1)
    assert bytes(int(v, 16) for v in hash_c.split(", ")).hex() == h["graph_hash"]
    assert "static const int8_t" not in header and "static const union" not in header   # no weights left in the code


def test_host_bind_every_case(kws_separate):
    out, other, x, expected = kws_separate
    good = (out / "kws.weights.bin").read_bytes()
    st = statuses((out / "kws.h").read_text(), "kws")
    m = cuvil_mcu.load(out / "libkws.so")
    with pytest.raises(cuvil_mcu.runtime.ToolError, match="no weights bound"):
        m.run(x[0])
    bind = m._fn("bind_weights", ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t)
    buf = np.zeros(len(good) + 64, np.uint8)
    base = (-buf.ctypes.data) % 16

    def try_bind(data: bytes, size=None, shift=0):
        at = base + shift
        buf[:] = 0
        buf[at:at + len(data)] = np.frombuffer(data, np.uint8)
        return bind(buf.ctypes.data + at, len(data) if size is None else size)

    assert bind(None, len(good)) == st["ERR_NULL"]
    for case, data, size, want in corruptions(good, other):
        assert try_bind(data, size) == st[want], case
        with pytest.raises(cuvil_mcu.runtime.ToolError, match="no weights bound"):
            m.run(x[0])   # nothing was bound by a refused blob
    assert try_bind(good, shift=4) == st["ERR_WEIGHTS_ALIGN"]
    assert try_bind(good, size=len(good) + 7) == st["OK"]   # a flash slot larger than the blob is fine
    m.bind_weights(good)
    np.testing.assert_array_equal(m.run(x).reshape(expected.shape), expected)
    with pytest.raises(cuvil_mcu.runtime.WeightsError, match="CRC"):
        m.bind_weights(corruptions(good, other)[9][1])
    # the refused blob left the good one bound
    np.testing.assert_array_equal(m.run(x).reshape(expected.shape), expected)


def test_hot_update_new_weights_same_code(tmp_path):
    """Retrained weights for the same architecture: the new blob binds into
    the library built for the old one and gives what a fresh inline build of
    the new model gives."""
    src = onnx.load(ROOT / "examples" / "kws_float.onnx")
    rng = np.random.default_rng(15)
    for init in src.graph.initializer:
        a = numpy_helper.to_array(init)
        if a.dtype == np.float32 and a.size > 16:
            init.CopyFrom(numpy_helper.from_array((a * rng.uniform(0.8, 1.2, a.shape)).astype(np.float32), init.name))
    onnx.save(src, tmp_path / "v2.onnx")
    gen(ROOT / "examples" / "kws_float.onnx", "--weights", "separate", "--emit", "so", "-o", tmp_path / "v1")
    gen(tmp_path / "v2.onnx", "--weights", "separate", "-o", tmp_path / "v2")
    assert (tmp_path / "v1" / "model.h").read_text().replace("kws_float.onnx", "v2.onnx") == \
        (tmp_path / "v2" / "model.h").read_text()
    v2_blob = (tmp_path / "v2" / "model.weights.bin").read_bytes()
    assert v2_blob != (tmp_path / "v1" / "model.weights.bin").read_bytes()
    x = np.load(ROOT / "examples" / "kws_input.npy")
    m = cuvil_mcu.load(tmp_path / "v1" / "libmodel.so", weights=tmp_path / "v1" / "model.weights.bin")
    y1 = m.run(x)
    m.bind_weights(v2_blob)
    y2 = m.run(x)
    r = cli("run", tmp_path / "v2.onnx", "--input", ROOT / "examples" / "kws_input.npy", "-o", tmp_path / "y.npy")
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(y2, np.load(tmp_path / "y.npy"))
    assert not np.array_equal(y1, y2)


def test_blob_deterministic_and_bad_option(tmp_path):
    model = ROOT / "examples" / "kws_float.onnx"
    gen(model, "--weights", "separate", "-o", tmp_path / "a", "--no-cache")
    gen(model, "--weights", "separate", "-o", tmp_path / "b", "--no-cache")
    for name in ("model.h", "model.weights.bin"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    r = cli("gen", model, "--weights", "elsewhere", "-o", tmp_path / "c")
    assert r.returncode != 0 and "--weights" in r.stderr and not (tmp_path / "c").exists()


# --- on a QEMU board ---------------------------------------------------------

# The test firmware: bind the blob from the weights slot, then the usual harness.
# Slot layout (what an updater would write): u32 blob size, 12 bytes zero, the blob.
FW_MAIN = r"""
#define main cuvil_harness_main
#include "harness_main.c"
#undef main

extern const unsigned char cuvil_weights_slot[];

int main(void)
{
    const unsigned char *slot = cuvil_weights_slot;
    size_t size = (size_t)slot[0] | ((size_t)slot[1] << 8) | ((size_t)slot[2] << 16) | ((size_t)slot[3] << 24);
    int st = kws_bind_weights(slot + 16, size);
    cuvil_print("W ");
    cuvil_print(kws_status_str(st));
    cuvil_print("\n");
    if (st != KWS_OK) cuvil_exit(32 + st);
    return cuvil_harness_main();
}
"""
WEIGHTS_ORIGIN = 0x00300000   # the last MB of the an386's 4 MB code memory


def build_firmware(c, x, d: Path) -> Path:
    from cuvil_mcu.sim import firmware, qemu
    board = c.board
    files = firmware.files(c, board, [x], io="semihosting", machine=board)
    files["harness_main.c"] = files.pop("main.c")
    files["main.c"] = FW_MAIN
    ld = files["linker.ld"]
    flash = re.search(r"FLASH \(rx\)  : ORIGIN = (0x[0-9a-f]+), LENGTH = (\d+)", ld)
    assert flash and int(flash.group(1), 16) + int(flash.group(2)) > WEIGHTS_ORIGIN
    ld = ld.replace(flash.group(0), f"FLASH (rx)  : ORIGIN = {flash.group(1)}, "
                                    f"LENGTH = {WEIGHTS_ORIGIN - int(flash.group(1), 16)}\n"
                                    f"    WEIGHTS (r) : ORIGIN = 0x{WEIGHTS_ORIGIN:08x}, LENGTH = 1048576")
    assert "ENTRY(cuvil_entry)" in ld
    files["linker.ld"] = ld.replace("ENTRY(cuvil_entry)",
                                    "ENTRY(cuvil_entry)\nPROVIDE(cuvil_weights_slot = ORIGIN(WEIGHTS));")
    for name, text in files.items():
        (d / name).write_text(text)
    cmd = firmware.gcc_command(board, qemu.tool(qemu.GCC), "semihosting", "fw.elf")
    r = subprocess.run(cmd, cwd=d, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return d / "fw.elf"


def test_qemu_board_blob_at_its_own_flash_address(tmp_path, kws_separate):
    from cuvil_mcu.compiler import compile_model
    from cuvil_mcu.sim import qemu
    if not qemu.sim_boards():
        pytest.skip("qemu-system-arm / arm-none-eabi-gcc not installed")
    try:
        qemu.tool(qemu.GCC), qemu.tool(qemu.QEMU)
    except Exception as e:
        pytest.skip(str(e))
    model, x, expected = kws_int8()
    out, other, _, _ = kws_separate
    c = compile_model(str(model), board="qemu-mps2-an386", name="kws", weights="separate")
    good = c.weights_blob
    st = statuses(c.header, "kws")
    elf = build_firmware(c, x, tmp_path)
    nm = subprocess.run([qemu.tool(qemu.GCC).replace("gcc", "nm"), str(elf)], capture_output=True, text=True).stdout
    slot_sym = re.search(r"([0-9a-f]{8}) \w cuvil_weights_slot", nm)
    assert slot_sym and int(slot_sym.group(1), 16) == WEIGHTS_ORIGIN
    heads = subprocess.run([qemu.tool(qemu.GCC).replace("gcc", "objdump"), "-h", str(elf)],
                           capture_output=True, text=True).stdout
    # every section the firmware loads into code memory (by load address) ends below the weights slot
    loaded = [(int(size, 16), int(lma, 16)) for size, lma in
              re.findall(r"^\s*\d+ \S+\s+([0-9a-f]{8})\s+[0-9a-f]{8}\s+([0-9a-f]{8})", heads, re.M)]
    in_code = [(size, lma) for size, lma in loaded if lma < 0x20000000 and size]
    assert in_code and max(lma + size for size, lma in in_code) <= WEIGHTS_ORIGIN, heads
    board = c.board

    def run(data: bytes, size: int | None = None):
        slot = tmp_path / "slot.bin"
        slot.write_bytes(struct.pack("<I12x", len(data) if size is None else size) + data)
        cmd = qemu.qemu_command(board, elf) + ["-device", f"loader,file={slot},addr=0x{WEIGHTS_ORIGIN:08x}"]
        return subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)

    r = run(good)
    assert r.returncode == 0 and "W ok" in r.stdout and "CUVIL DONE" in r.stdout, r.stdout[-2000:] + r.stderr
    outs, _ = qemu.parse_output(r.stdout, c.out_specs, len(x))
    np.testing.assert_array_equal(outs[0].reshape(expected.shape), expected)
    for case, data, size, want in corruptions(good, other):
        r = run(data, size)
        assert r.returncode == 32 + st[want], f"{case}: exit {r.returncode}, log {r.stdout[-500:]}"
        assert "CUVIL DONE" not in r.stdout
