"""Test isolation: no test reads the user's git config, HOME or caches (b4's settestdefaults).

Every test gets a private HOME, XDG dirs and an empty global git config, and a committer identity, so a
developer's ``diff.noprefix`` or ``core.abbrev`` can never make a test pass here and fail in CI. The
pristine-tree cache is the exception: it points at the real user cache (``HQP_CACHE`` if set) so the
316 MB wheel is downloaded once per machine, not once per test.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REAL_CACHE = Path(
    os.environ.get("HQP_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hyperqwen-patches"
)
REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def isolated_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("HQP_CACHE", str(REAL_CACHE))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.delenv("GIT_DIR", raising=False)
    monkeypatch.delenv("GIT_WORK_TREE", raising=False)
    for var, value in {
        "GIT_AUTHOR_NAME": "Test Author",
        "GIT_AUTHOR_EMAIL": "author@example.invalid",
        "GIT_COMMITTER_NAME": "Test Committer",
        "GIT_COMMITTER_EMAIL": "committer@example.invalid",
        "TZ": "UTC",
        "LC_ALL": "C.UTF-8",
    }.items():
        monkeypatch.setenv(var, value)
    return home


def require_gnu_patch() -> str:
    """Path of GNU patch; the differential tests fail loudly (not skip) without it."""
    path = shutil.which("patch")
    if path is None:
        pytest.fail("GNU patch is required for the differential tests (apt-get install patch)")
    return path
