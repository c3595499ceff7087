"""The validated manifest in the result cache: the model as JSON, keyed by the manifest's bytes and the
source of the modules that make the model, so a warm run never imports PyYAML or validates."""

from __future__ import annotations

from pathlib import Path

from hyperqwen_patches import records
from hyperqwen_patches.series.manifestmodel import (
    AcceptedName,
    ExportPoint,
    Manifest,
    Retirement,
    Row,
    RuntimeKnob,
)

TYPE_CHECKING = False  # not typing's: a plain run never imports typing (a few ms of every start)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

CACHE_NAME = "manifest"
# The modules whose code the model depends on: a change to any of them is a different key.
_SOURCES = ("manifestmodel.py", "validation.py", "manifestcache.py")


def cache_key(data: bytes) -> str | None:
    """The key of a manifest's model: its bytes and the source of the modules that make the model (a
    change to the validator or to the model's classes is a different key, so an entry never outlives
    the code that made it)."""
    import sys

    from hyperqwen_patches import resultcache

    if not resultcache.enabled():
        return None
    try:
        here = Path(__file__).parent
        code = b"".join((here / name).read_bytes() for name in _SOURCES)
    except OSError:
        return None
    return resultcache.key(CACHE_NAME, sys.version, [code, data])


def encode(value: Any) -> Any:
    """The model as JSON: a record as ``{"$": class, field: ...}``; ``path`` and ``root`` are left
    out (they are where the bytes were read, not what they say) and put back on reading."""
    if isinstance(value, tuple):
        return [encode(v) for v in value]
    if hasattr(value, "__record_fields__"):
        fields = {k: getattr(value, k) for k in records.fields(value) if k not in ("path", "root")}
        return {"$": type(value).__name__, **{k: encode(v) for k, v in fields.items()}}
    return value


def decode(value: Any) -> Any:
    """The model back from :func:`encode`'s JSON; None where the entry is not one (it is recomputed).
    Only the model's own classes are built, from their own fields."""
    classes = {
        c.__name__: c for c in (Manifest, Row, ExportPoint, Retirement, AcceptedName, RuntimeKnob)
    }
    try:
        return _build(value, classes)
    except (TypeError, KeyError, AttributeError):
        return None


def _build(value: Any, classes: Mapping[str, type]) -> Any:
    if isinstance(value, list):
        return tuple(_build(v, classes) for v in value)
    if isinstance(value, dict):
        cls = classes[value["$"]]
        kwargs = {k: _build(v, classes) for k, v in value.items() if k != "$"}
        if cls is Manifest:
            kwargs.update(path=Path(), root=Path())
        return cls(**kwargs)
    return value
