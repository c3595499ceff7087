"""Test isolation: no test reads the user's git config, HOME or caches (b4's settestdefaults).

Every test gets a private HOME, XDG dirs and an empty global git config, and a committer identity, so a
developer's ``diff.noprefix`` or ``core.abbrev`` can never make a test pass here and fail in CI.

Downloads (the 316 MB vLLM wheel, the linters' and the CUDA compiler's wheels) go to one cache the
test session makes, shared by every test of the session and removed at its end, so nothing a machine
has cached before can make a test pass: ``TEST_CACHE``. A developer who wants it kept between runs
names a directory of their own in ``HQP_TEST_CACHE`` (never the tool's user cache). Tests marked
``network`` run where pip reaches its package index and are skipped, with the reason, where it does
not. pip's own configuration is left as it is: a machine that reaches PyPI only through a mirror
needs it; ``../shared/tools/fresh-machine``-style runs use none.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

_KEEP_CACHE = bool(os.environ.get("HQP_TEST_CACHE"))
TEST_CACHE = Path(
    os.environ.get("HQP_TEST_CACHE") or tempfile.mkdtemp(prefix="hqp-test-cache-")
).resolve()
TEST_CACHE.mkdir(parents=True, exist_ok=True)
REPO_ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    # Session- and module-scoped fixtures run before any test's own isolation: they too must use the
    # session's cache, never the user's.
    os.environ["HQP_CACHE"] = str(TEST_CACHE)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _KEEP_CACHE:
        shutil.rmtree(TEST_CACHE, ignore_errors=True)


@functools.cache
def index_unreachable() -> str | None:
    """Why pip cannot reach its package index (None when it can): asked once per session."""
    probe = [
        sys.executable,
        "-m",
        "pip",
        "index",
        "versions",
        "vllm",
        "--disable-pip-version-check",
    ]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=120, check=False)
    except subprocess.TimeoutExpired:
        return "the package index did not answer `pip index versions vllm` within 120 s"
    if done.returncode == 0:
        return None
    last = (done.stderr.strip().splitlines() or ["no message"])[-1]
    return f"the package index cannot be reached (`pip index versions vllm`: {last})"


@pytest.fixture(autouse=True)
def _network_gate(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("network") is not None:
        reason = index_unreachable()
        if reason is not None:
            pytest.skip(reason)


@pytest.fixture(autouse=True)
def isolated_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("HQP_CACHE", str(TEST_CACHE))
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
