"""The release plus the series, file by file, for a manifest's series: computed once, then cached.

``engine/expected.py`` does the work on bytes; this module opens the manifest's pristine source and
keeps the result in the tool's result cache (``resultcache``), keyed by the series' parsed patches and
the release's bytes of every file they name, so a second ``status`` on the same series and release
reads a few kilobytes instead of applying the series again.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hyperqwen_patches.engine.applying import Policy
from hyperqwen_patches.engine.expected import VERSION, Expected, digest, expected_states
from hyperqwen_patches.engine.patchmodel import Patch
from hyperqwen_patches.errors import HqpError
from hyperqwen_patches.records import record

CACHE_NAME = "expected-states"


@record(frozen=True, slots=True)
class Reference:
    """What a tree is compared with: the expected states, or why there are none (said, not hidden)."""

    expected: Expected | None
    unavailable: str | None = None


def named_paths(patches: Sequence[Patch]) -> list[bytes]:
    paths = {p for patch in patches for fp in patch.files for p in (fp.old_path, fp.new_path) if p}
    return sorted(paths)


def reference_for(repo: Path, patches: Sequence[Patch], policy: Policy) -> Reference:
    """The expected states of ``patches`` on the release the manifest in ``repo`` names.

    A release that cannot be opened (no network for a PyPI source, a moved directory) is not an error
    of the tree: the comparison is skipped and the reason returned for the caller to print."""
    from hyperqwen_patches import resultcache
    from hyperqwen_patches.series.manifest import load_manifest
    from hyperqwen_patches.sources.pristine import open_pristine

    manifest = load_manifest(repo)
    try:
        tree = open_pristine(manifest.source, package=manifest.package, version=manifest.pin)
    except HqpError as exc:
        return Reference(None, f"the release ({manifest.source}) could not be read: {exc.message}")
    except OSError as exc:
        return Reference(None, f"the release ({manifest.source}) could not be read: {exc}")
    with tree:
        pristine: dict[bytes, bytes | None] = {p: tree.read(p) for p in named_paths(patches)}

        def read(path: bytes) -> bytes | None:
            if path not in pristine:
                pristine[path] = tree.read(path)
            return pristine[path]

        parts: list[bytes | str] = [repr(policy.max_offset), repr(policy.exact)]
        for patch in patches:
            parts += [patch.name, repr(patch.files)]
        for path, data in pristine.items():
            parts += [path, digest(data) or "-"]
        value = resultcache.cached(
            CACHE_NAME, VERSION, parts, lambda: expected_states(patches, read, policy).to_json()
        )
    return Reference(Expected.from_json(value))
