"""The manifest (``patches/manifest.yaml``) read: bytes → a typed, validated model, from the result cache
when the same bytes validated before.

The manifest states the pin once and orders and describes the rows of the series. The model and its
keys: ``manifestmodel.py``; the validation, every problem located: ``validation.py``; the cache's
codec: ``manifestcache.py``; the repository it lives in: ``reporoot.py``; writing YAML into it:
``yamlwriting.py``.
"""

from __future__ import annotations

from pathlib import Path

from hyperqwen_patches.series import manifestcache
from hyperqwen_patches.series.manifestmodel import (
    MANIFEST_RELPATH,
    Manifest,
    ManifestError,
    Problem,
)
from hyperqwen_patches.series.reporoot import inside_repo


def load_manifest(root: Path) -> Manifest:
    """Read and validate ``<root>/patches/manifest.yaml``; raise :class:`ManifestError` with every problem."""
    inside_repo(root, "patches")
    path = root / MANIFEST_RELPATH
    shown = MANIFEST_RELPATH
    from hyperqwen_patches.inputfile import read_repo_file

    try:
        data = read_repo_file(path, "the manifest", shown=shown)
    except FileNotFoundError:
        raise ManifestError([Problem(shown, 0, "", f"no manifest at {path}")]) from None
    except ValueError as exc:  # a directory, a FIFO (opening it would wait forever), a device
        raise ManifestError([Problem(shown, 0, "", str(exc))]) from None
    return parse_manifest(data, path=path, root=root, shown=shown)


def parse_manifest(data: bytes, *, path: Path, root: Path, shown: str | None = None) -> Manifest:
    """Validate manifest bytes; ``shown`` is the name used in messages (default: ``path``).

    A manifest that validated before is read back from the result cache instead (the model is a pure
    function of the bytes and of the code of the modules that make it, which the key covers): a warm run never imports
    PyYAML, about a third of a 50-row ``apply``. An invalid manifest is never cached, so its problems
    are found and listed on every run.
    """
    from hyperqwen_patches.records import replace

    digest = manifestcache.cache_key(data)
    if digest is not None:
        from hyperqwen_patches import resultcache

        stored = resultcache.load(manifestcache.CACHE_NAME, digest)
        model = manifestcache.decode(stored) if stored is not None else None
        if isinstance(model, Manifest):
            return replace(model, path=path, root=root)
    # Imported here: a warm run (the model from the cache) never builds the validator's classes.
    from hyperqwen_patches.series.validation import Validator

    model = Validator(data, path=path, root=root, shown=shown or str(path)).run()
    if digest is not None:
        from hyperqwen_patches import resultcache

        resultcache.store(manifestcache.CACHE_NAME, digest, manifestcache.encode(model))
    return model
