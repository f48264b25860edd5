"""Typed errors. Each is a user-facing problem: the CLI prints its message on
one line and exits with a non-zero status, without a traceback."""
import re

_BREAKS = re.compile("[\x00-\x1f\x7f\x85\u2028\u2029]")


def one_line(text) -> str:
    """Control characters and line breaks as escapes (\\n, \\u2028, ...): a
    message, and any model name or value it quotes, stays one line."""
    return _BREAKS.sub(lambda m: m.group().encode("unicode_escape").decode(), str(text))


class CuvilError(Exception):
    """Base of every error the CLI reports as a user mistake."""

    exit_code = 2


class ModelLoadError(CuvilError):
    """The file is missing, not ONNX, truncated or invalid."""


class UnsupportedOpError(CuvilError):
    """One or more nodes use an op (or an attribute value) we cannot compile."""

    def __init__(self, problems: list[str], unchecked: int = 0):
        self.problems = problems
        n = len(problems)
        head = "unsupported op" if n == 1 else f"{n} unsupported ops"
        tail = (f" ({unchecked} node(s) after them not checked: they read tensors whose shapes depend on "
                f"these)" if unchecked else "")
        super().__init__(f"{head}: " + "; ".join(problems) + tail)


class ShapeError(CuvilError):
    """Shapes do not line up, or a shape is not static."""


class GraphError(CuvilError):
    """The graph breaks an IR invariant (a bug in a pass, or a malformed model)."""


class BoardError(CuvilError):
    """Unknown board or malformed board file."""


class BudgetError(CuvilError):
    """The model does not fit the board's RAM or flash."""

    exit_code = 3


class InputError(CuvilError):
    """An input file (.npy/.npz) does not match the model."""


class ToolError(CuvilError):
    """A required external tool (compiler, simulator) is missing or failed.
    Lines after the first are that tool's own output (printed as it is)."""
