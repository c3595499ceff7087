"""One member of a zip read where the member table says it lies: its local header checked, its bytes
inflated, their hash compared with the wheel's RECORD. No central directory is parsed (the point of
the table: ~30 ms for vLLM's wheel, on every run)."""

from __future__ import annotations

import hashlib
import os
import struct
import zlib
from base64 import urlsafe_b64encode
from typing import TYPE_CHECKING

from hyperqwen_patches.display import show

if TYPE_CHECKING:
    from hyperqwen_patches.sources.wheelmembers import Member


def record_hash(data: bytes) -> str:
    """A RECORD file's hash of ``data``: ``sha256=<urlsafe base64, unpadded>``."""
    return "sha256=" + urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


class BadMember(Exception):
    """A member that cannot be read from where the index says it is (or reads to other bytes)."""


_LOCAL_HEADER = b"PK\x03\x04"
_LOCAL_HEADER_SIZE = 30


def read_member(fd: int, path: bytes, member: Member) -> bytes:
    """The bytes of ``path``, the member at ``member.header`` of the zip open as ``fd``; raises
    :class:`BadMember` naming the path when they are not there or not the bytes RECORD hashed."""
    head = os.pread(fd, _LOCAL_HEADER_SIZE + len(path), member.header)
    if len(head) != _LOCAL_HEADER_SIZE + len(path) or not head.startswith(_LOCAL_HEADER):
        raise BadMember(f"{show(path)}: no local file header at offset {member.header}")
    name_len, extra_len = struct.unpack_from("<HH", head, 26)
    # The member at that offset must be the one asked for: a damaged table (two rows' offsets
    # swapped) would otherwise hand one file's bytes, matching their own hash, out as another's.
    if head[_LOCAL_HEADER_SIZE:] != path or name_len != len(path):
        raise BadMember(f"{show(path)}: the member at offset {member.header} is another file")
    start = member.header + _LOCAL_HEADER_SIZE + name_len + extra_len
    raw = os.pread(fd, member.size, start)
    if len(raw) != member.size:
        raise BadMember(f"{show(path)}: truncated ({len(raw)} of {member.size} bytes)")
    if member.method == 0:  # stored
        data = raw
    elif member.method == 8:  # deflated, a raw stream
        data = zlib.decompress(raw, -15)
    else:
        raise BadMember(f"{show(path)}: compression method {member.method}")
    if record_hash(data) != member.hash:
        raise BadMember(f"{show(path)}: hash differs from the wheel's RECORD")
    return data
