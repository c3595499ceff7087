"""A regular expression compiled on its first use, for patterns a module defines at import but a
plain run may never use (the manifest's: a warm run reads its validated model from the result cache)."""

from __future__ import annotations

import re

TYPE_CHECKING = False  # not typing's: a plain run never imports typing (a few ms of every start)
if TYPE_CHECKING:
    from typing import Any


class LazyPattern:
    """A regular expression compiled on its first use. A warm run reads the validated model from
    the result cache and never validates, yet compiling these nine at import was 1.5 ms of the
    module's 2 (every ``apply`` and ``check`` paid it). Anything else is the compiled pattern's."""

    __slots__ = ("_args", "_compiled")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self._args = (pattern, flags)
        self._compiled: re.Pattern[str] | None = None

    def __getattr__(self, name: str) -> Any:  # match, search, fullmatch, pattern, ...
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = re.compile(*self._args)
        return getattr(compiled, name)
