"""One escaping function per output context, for every text that comes from
the model (tensor names, the model's file or graph name, the summary that
lists them) and reaches a generated file.

A model is untrusted input: a tensor named `x */ int evil(void) { ... } /*`
must stay a name in every file we write (C comments and strings, Markdown,
YAML/JSON, Make/CMake/INI comments, Kconfig help, Rust), never become code or
markup. Templates print such values only through one of these filters (a
test scans the integration templates for unfiltered ones); Python code that
builds file contents calls the same functions.

All of them start from `visible`: one line, non-printable characters
(control characters, line and paragraph separators, bidi overrides) written
as escapes, so no value can break out of a line-based context. Then each
context adds what its own syntax needs.

Not a target itself (no NAME), so `targets()` skips it.
"""
from __future__ import annotations

import html
import json

from ..codegen.carray import c_comment, c_string

__all__ = ["visible", "c_comment", "c_string", "mp_error_text", "md_code", "md_cell", "hash_comment", "html_text",
           "kconfig_help", "yaml_str", "json_str", "rust_str", "rust_doc",
           "FILTERS"]


def visible(s) -> str:
    """s on one line: printable characters kept (non-ASCII letters too),
    every other character as \\n, \\t, \\r or \\xNN / \\uNNNN / \\UNNNNNNNN."""
    out = []
    for ch in str(s):
        if ch.isprintable():
            out.append(ch)
        elif ch in "\n\t\r":
            out.append({"\n": "\\n", "\t": "\\t", "\r": "\\r"}[ch])
        elif ord(ch) < 0x100:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    return "".join(out)


def mp_error_text(s) -> str:
    """Inside the format string of MicroPython's MP_ERROR_TEXT("..."): its
    build scans these literals (and may compress them), so only printable
    ASCII without quotes, backslashes or '?' (trigraphs) is kept, anything
    else becomes '_'; '%' is doubled (the text is a printf format)."""
    return "".join(ch if " " <= ch <= "~" and ch not in '"\\?' else "_" for ch in visible(s)).replace("%", "%%")


def md_code(s) -> str:
    """A Markdown inline code span showing s (outside tables): a backtick
    fence longer than any run of backticks inside, padded when s starts or
    ends with a backtick (CommonMark strips one space each side)."""
    v = visible(s)
    run = longest = 0
    for ch in v:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    fence = "`" * (longest + 1)
    pad = " " if v[:1] in ("`", " ") or v[-1:] in ("`", " ") else ""
    return f"{fence}{pad}{v}{pad}{fence}" if v else "` `"


def md_cell(s) -> str:
    """An inline code span inside a GitHub-flavoured Markdown table cell:
    as md_code, with '|' escaped (GFM splits cells on '|' even inside code
    spans; '\\|' there shows a plain '|')."""
    return md_code(s).replace("|", "\\|")


def hash_comment(s) -> str:
    """Text inside a '#' (or INI ';') line comment of YAML, TOML, CMake, Make,
    Kconfig or platformio.ini: one line (visible), and no trailing backslash,
    which make reads as a continuation of the comment onto the next line."""
    v = visible(s)
    return v + " " if v.endswith("\\") else v


def html_text(s) -> str:
    """HTML text content or a double-quoted attribute value: visible, then
    &, <, >, " and ' as character references (no tag, entity or attribute
    can start inside it)."""
    return html.escape(visible(s), quote=True)


def kconfig_help(s) -> str:
    """A word inside a Kconfig help text: help ends at the first line indented
    less than its first line, so the value must stay on its line (help text
    is not macro-expanded)."""
    return visible(s)


def json_str(s) -> str:
    """A JSON string, quotes included (ASCII-only output)."""
    return json.dumps(str(s), ensure_ascii=True)


def yaml_str(s) -> str:
    """A YAML double-quoted scalar: JSON's string syntax is a subset of it."""
    return json_str(s)


def rust_str(s) -> str:
    """A Rust string literal, quotes included: '"', '\\' and everything
    outside printable ASCII as \\u{...}."""
    out = []
    for ch in str(s):
        if ch in '"\\' or not (0x20 <= ord(ch) < 0x7F):
            out.append(f"\\u{{{ord(ch):x}}}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def rust_doc(s) -> str:
    """Text inside a Rust `///` or `//!` doc comment line: s as rust_str
    spells it (one line, printable ASCII), backticks as \\u{60} too so it
    cannot open or close Markdown code in rustdoc."""
    return rust_str(s)[1:-1].replace("`", "\\u{60}")


# Jinja filter name -> function (installed by _pkg.env()).
FILTERS = {f.__name__: f for f in (visible, c_comment, c_string, mp_error_text, md_code, md_cell, hash_comment,
                                   html_text, kconfig_help, yaml_str, json_str, rust_str, rust_doc)}
