"""What the stand-in SDK headers (tests/fake_micropython, fake_zephyr,
fake_arduino) declare, file by file, and an include-what-you-use check of
generated sources against them.

The stand-ins are written from the real headers (same file names, names and
signatures, nothing the real header lacks). A source compiled against them
must include, directly, every stand-in header that declares an SDK name it
uses: the real headers' transitive includes are theirs to change (the real
py/objarray.h never declared BYTEARRAY_TYPECODE, which the first stand-in
did, and a module that relied on it did not build against MicroPython).
"""
from __future__ import annotations

import re
from pathlib import Path

_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_STRING = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'')
_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")


def strip_c(text: str) -> str:
    """C source without comments and string/char literals (kept as "")."""
    text = _COMMENT.sub(" ", text)
    return _STRING.sub('""', text)


def _statements(text: str) -> list[tuple[str, str]]:
    """(where, statement) pairs: where is "pp" for a preprocessor line
    (continuations joined), "file" for a file-scope piece, "enum" for an
    enumerator list; pieces end at ';', '{' or '}'. Struct members and
    function bodies are left out."""
    text = strip_c(text).replace("\\\n", " ")
    out, code = [], []
    for ln in text.splitlines():
        (out.append(("pp", ln.strip())) if ln.lstrip().startswith("#") else code.append(ln))
    stack: list[str] = []   # kind of each open brace: "enum", "extern" (extern "C") or "body"
    cur = ""
    for ch in "\n".join(code):
        if ch in ";{}":
            piece = " ".join(cur.split())
            cur = ""
            where = "file" if all(k == "extern" for k in stack) else ("enum" if stack[-1] == "enum" else None)
            if ch == "{":
                if where == "file" and piece:
                    out.append(("file", piece))
                kind = "enum" if re.search(r"\benum\b", piece) else "extern" if piece == 'extern ""' else "body"
                stack.append(kind)
            elif ch == "}":
                if where == "enum" and piece:
                    out.append(("enum", piece))
                if stack:
                    stack.pop()
            elif where and piece:
                out.append((where, piece))
        else:
            cur += ch
    if cur.strip() and not stack:
        out.append(("file", " ".join(cur.split())))
    return out


def declared(text: str) -> set[str]:
    """Names a C/C++ header declares at file scope: macros, typedef names,
    struct/class/enum tags, enumerators, functions, objects."""
    names: set[str] = set()
    for where, st in _statements(text):
        if where == "pp":
            m = re.match(r"#\s*define\s+(\w+)", st)
            if m:
                names.add(m.group(1))
            continue
        if where == "enum":
            names.update(m.group(1) for m in (re.match(r"\s*(\w+)", e) for e in st.split(",")) if m)
            continue
        names.update(re.findall(r"\b(?:struct|union|enum|class)\s+(\w+)", st))
        if st.startswith("typedef"):
            m = re.search(r"\(\s*\*\s*(\w+)\s*\)\s*\(", st) or re.search(r"(\w+)\s*(\[[^\]]*\])?\s*$", st)
            names.add(m.group(1))
            continue
        # a function: the name before the parameter list that ends the
        # declaration (attribute macros such as __printf_like(1, 2) come earlier)
        m = re.search(r"\b(\w+)\s*\((?:[^()]|\([^()]*\))*\)\s*$", st)
        if m:
            names.add(m.group(1))
            continue
        for part in st.split(","):   # objects: "extern T a, b", or the name after a typedef'd struct's '}'
            m = re.search(r"(\w+)\s*(\[[^\]]*\])?\s*(=.*)?$", part.strip())
            if m:
                names.add(m.group(1))
    return names - {"const", "int", "char", "void", "unsigned", "long", "float", "double", "bool", "size_t",
                    "public", "private", "operator", "extern", "static", "inline", "enum"}


def per_file(root: Path, pattern: str = "**/*.h") -> dict[str, set[str]]:
    """{include path relative to root: names it declares}"""
    return {p.relative_to(root).as_posix(): declared(p.read_text()) for p in sorted(root.glob(pattern))}


def includes(source: str) -> list[str]:
    return re.findall(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', source, re.M)


def uses(source: str) -> set[str]:
    return set(_IDENT.findall(strip_c(re.sub(r"^\s*#\s*include[^\n]*", "", source, flags=re.M))))


def missing_includes(source: str, decls: dict[str, set[str]], sdk_name) -> dict[str, list[str]]:
    """SDK names (sdk_name(name) is true) the source uses -> the stand-in
    headers that declare them, for each name none of whose declaring headers
    the source includes directly. A name no stand-in declares maps to []."""
    inc = set(includes(source))
    bad = {}
    for name in sorted(n for n in uses(source) if sdk_name(n)):
        where = [f for f, names in decls.items() if name in names]
        if not set(where) & inc:
            bad[name] = where
    return bad
