"""The harness's debug UART, from a board's [uart] table: the register values
(baud divisors, pin select) computed here and printed into cuvil_board.h;
firmware_examples/baremetal/uart.c drives the UART kinds below with them.

Kinds (the register layout uart.c knows):
  stm32-usart-sr   STM32F1/F2/F4 USART: SR +0x00 (TXE bit 7), DR +0x04, BRR +0x08, CR1 +0x0C (UE bit 13, TE bit 3)
  stm32-usart-isr  STM32F7/L4/H7/U5 USART: CR1 +0x00 (UE bit 0, TE bit 3), BRR +0x0C, ISR +0x1C (TXE bit 7), TDR +0x28
  stm32-lpuart     the same layout, BRR = 256 x clock / baud
  nrf52-uart       nRF52 UART0 (legacy, no DMA): TASKS_STARTTX +0x008, EVENTS_TXDRDY +0x11C, ENABLE +0x500,
                   PSEL.TXD +0x50C, TXD +0x51C, BAUDRATE +0x524
  pl011            Arm PL011 (RP2040): DR +0x00, FR +0x18 (TXFF bit 5), IBRD +0x24, FBRD +0x28, LCR_H +0x2C, CR +0x30
  imxrt-lpuart     NXP LPUART (i.MX RT): BAUD +0x10, STAT +0x14 (TDRE bit 23), CTRL +0x18 (TE bit 19), DATA +0x1C

`setup` (board file): register operations run before the UART is touched,
in order: ["set", addr, mask, value] (read-modify-write), ["write", addr,
value], ["wait", addr, mask, value] (poll until reg & mask == value).
"""
from __future__ import annotations

from ..errors import BoardError

KINDS = ("stm32-usart-sr", "stm32-usart-isr", "stm32-lpuart", "nrf52-uart", "pl011", "imxrt-lpuart")
OPS = {"set": 0, "write": 1, "wait": 2}
# nRF52 BAUDRATE register values (product specification, UART BAUDRATE table)
NRF52_BAUD = {9600: 0x00275000, 19200: 0x004EA000, 38400: 0x009D5000, 57600: 0x00EBF000, 115200: 0x01D7E000,
              230400: 0x03AFB000, 460800: 0x075F7000, 921600: 0x0EBED000, 1000000: 0x10000000}


def _need(board, key):
    u = board.uart
    if key not in u:
        raise BoardError(f"boards/{board.id}.toml: [uart] needs '{key}'")
    return u[key]


def divisors(board) -> dict[str, int]:
    """{macro: value} for the kind's baud-rate registers."""
    kind, clk, baud = _need(board, "kind"), int(_need(board, "clock_hz")), int(_need(board, "baud"))
    if kind not in KINDS:
        raise BoardError(f"boards/{board.id}.toml: [uart] kind '{kind}' unknown; known: {', '.join(KINDS)}")
    if kind in ("stm32-usart-sr", "stm32-usart-isr"):
        brr = round(clk / baud)  # oversampling by 16: BRR = USARTDIV (mantissa << 4 | fraction)
        if not 16 <= brr <= 0xFFFF:
            raise BoardError(f"boards/{board.id}.toml: {baud} baud from {clk} Hz needs BRR {brr}, outside 16..65535")
        return {"CUVIL_UART_BRR": brr}
    if kind == "stm32-lpuart":
        brr = round(256 * clk / baud)
        if not 0x300 <= brr < 1 << 20:
            raise BoardError(f"boards/{board.id}.toml: LPUART {baud} baud from {clk} Hz needs BRR {brr:#x}, "
                             f"outside 0x300..0xFFFFF")
        return {"CUVIL_UART_BRR": brr}
    if kind == "nrf52-uart":
        if baud not in NRF52_BAUD:
            raise BoardError(f"boards/{board.id}.toml: nRF52 UART has no {baud} baud setting; "
                             f"choose one of {sorted(NRF52_BAUD)}")
        return {"CUVIL_UART_BAUDRATE": NRF52_BAUD[baud], "CUVIL_UART_PSEL": int(_need(board, "tx_psel"))}
    if kind == "pl011":
        div = 8 * clk // baud  # 1/128ths of the 16x divisor
        ibrd, fbrd = div >> 7, ((div & 0x7F) + 1) // 2
        if not 1 <= ibrd <= 0xFFFF:
            raise BoardError(f"boards/{board.id}.toml: PL011 {baud} baud from {clk} Hz is out of range")
        return {"CUVIL_UART_IBRD": ibrd, "CUVIL_UART_FBRD": fbrd}
    # imxrt-lpuart: the oversampling ratio (8..32) and SBR with the smallest baud error
    best = min(((abs(clk / (osr * max(1, round(clk / (osr * baud)))) - baud), osr, max(1, round(clk / (osr * baud))))
                for osr in range(8, 33)), key=lambda t: (t[0], -t[1]))
    _, osr, sbr = best
    if sbr > 0x1FFF:
        raise BoardError(f"boards/{board.id}.toml: LPUART {baud} baud from {clk} Hz is out of range")
    return {"CUVIL_UART_BAUD": ((osr - 1) << 24) | sbr}


def setup_ops(board) -> list[tuple[int, int, int, int, str]]:
    """[(op, addr, mask, value, text)] from [uart] setup."""
    out = []
    for i, op in enumerate(board.uart.get("setup", [])):
        if not isinstance(op, list) or not op or op[0] not in OPS:
            raise BoardError(f"boards/{board.id}.toml: [uart] setup[{i}] must be [\"set\"|\"write\"|\"wait\", ...]")
        want = 3 if op[0] == "write" else 4
        if len(op) != want or not all(isinstance(v, int) and 0 <= v <= 0xFFFFFFFF for v in op[1:]):
            raise BoardError(f"boards/{board.id}.toml: [uart] setup[{i}] {op!r}: expected {want - 1} 32-bit numbers")
        addr, mask, value = (op[1], 0xFFFFFFFF, op[2]) if op[0] == "write" else op[1:]
        out.append((OPS[op[0]], addr, mask, value, op[0]))
    return out
