"""The file names in a patch's headers: ``-p`` stripping, git's C-style quoting, the two names of a
``diff --git`` line, and the rule that a patched path stays inside the tree.

Pure functions on bytes; a name that cannot be read raises ``PatchParseError`` naming patch and line.
"""

from __future__ import annotations

from hyperqwen_patches.display import show
from hyperqwen_patches.engine.patchmodel import PatchParseError

DEV_NULL = b"/dev/null"


def strip_path(raw: bytes, strip: int, *, patch: str, line: int) -> bytes | None:
    """Apply ``-p<strip>`` to a header name; None for ``/dev/null``. Refuses names escaping the tree."""
    name = raw.split(b"\t", 1)[0].rstrip(b"\r\n")
    if name.startswith(b'"'):
        name = unquote_c(name, patch=patch, line=line)
    elif name.endswith(b" ") and b"\t" not in raw:
        name = name.rstrip(b" ")
    if name == DEV_NULL:
        return None
    if not name:
        raise PatchParseError(patch, line, "empty file name in header")
    rest = name
    for _ in range(strip):
        slash = rest.find(b"/")
        if slash < 0:
            raise PatchParseError(
                patch,
                line,
                f"file name {show(name)} has fewer than {strip} leading directories to strip (-p{strip})",
                hint="check the series' path convention (-p level)",
            )
        rest = rest[slash + 1 :].lstrip(b"/")
    check_relative_path(rest, patch=patch, line=line)
    return rest


def check_relative_path(path: bytes, *, patch: str, line: int | None) -> None:
    """A patched path must stay inside the tree: not absolute, no ``..`` component, not empty."""
    if not path or path.startswith(b"/"):
        raise PatchParseError(
            patch, line, f"file name {show(path)} is absolute or empty: it would escape the tree"
        )
    parts = path.split(b"/")
    if any(part == b".." for part in parts):
        raise PatchParseError(
            patch, line, f"file name {show(path)} contains '..': it would escape the tree"
        )
    if b"\0" in path:
        raise PatchParseError(patch, line, f"file name {show(path)} contains a NUL byte")


_ESCAPES = {
    ord("a"): 7,
    ord("b"): 8,
    ord("t"): 9,
    ord("n"): 10,
    ord("v"): 11,
    ord("f"): 12,
    ord("r"): 13,
    ord('"'): 34,
    ord("\\"): 92,
}


def unquote_c(name: bytes, *, patch: str, line: int) -> bytes:
    """Undo git's C-style quoting of a path (``"a/caf\\303\\251.py"``), byte for byte."""
    end = name.rfind(b'"')
    if end <= 0:
        raise PatchParseError(patch, line, f"unterminated quoted file name {show(name)}")
    body = name[1:end]
    out = bytearray()
    i = 0
    while i < len(body):
        byte = body[i]
        if byte != 0x5C:
            out.append(byte)
            i += 1
            continue
        nxt = body[i + 1 : i + 2]
        if not nxt:
            raise PatchParseError(patch, line, f"bad escape in quoted file name {show(name)}")
        if nxt in b"01234567":
            octal = body[i + 1 : i + 4]
            out.append(int(octal, 8) & 0xFF)
            i += 4
        elif nxt[0] in _ESCAPES:
            out.append(_ESCAPES[nxt[0]])
            i += 2
        else:
            raise PatchParseError(patch, line, f"bad escape in quoted file name {show(name)}")
    return bytes(out)


def git_names(line: bytes) -> tuple[bytes, bytes] | None:
    """The two names of a ``diff --git a/x b/x`` line (None when they cannot be split unambiguously)."""
    rest = line[len(b"diff --git ") :].rstrip(b"\r\n")
    if rest.startswith(b'"'):
        close = rest.find(b'" ', 1)
        if close < 0:
            return None
        return rest[: close + 1], rest[close + 2 :]
    if rest.endswith(b'"'):
        open_ = rest.rfind(b' "')
        if open_ < 0:
            return None
        return rest[:open_], rest[open_ + 1 :]
    # Unquoted: the two names are equal in the common case, so split at the middle space.
    half = len(rest) // 2
    if len(rest) % 2 == 1 and rest[half : half + 1] == b" ":
        left, right = rest[:half], rest[half + 1 :]
        if left.split(b"/", 1)[-1] == right.split(b"/", 1)[-1]:
            return left, right
    parts = rest.split(b" ")
    if len(parts) == 2:
        return parts[0], parts[1]
    return None


def strip_git_name(raw: bytes, strip: int, *, patch: str, line: int) -> bytes:
    """Names in ``rename from`` lines have no ``a/`` prefix: strip one level fewer."""
    name = unquote_c(raw, patch=patch, line=line) if raw.startswith(b'"') else raw
    rest = name
    for _ in range(max(strip - 1, 0)):
        slash = rest.find(b"/")
        if slash < 0:
            raise PatchParseError(patch, line, f"file name {show(name)} too short for -p{strip}")
        rest = rest[slash + 1 :]
    check_relative_path(rest, patch=patch, line=line)
    return rest
