"""A release's file fetched from the package index into a work directory: the wheel through ``pip
download`` (its log read for the download's size and for why it failed), the sdist through the index's
JSON simple API. The cache (``pypicache.py``) verifies and keeps what comes back."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from hyperqwen_patches.errors import EnvironmentProblem, UsageError
from hyperqwen_patches.sources.pristinetree import CorruptCacheError

if TYPE_CHECKING:
    from hyperqwen_patches.sources.pristinetree import Progress

log = logging.getLogger(__name__)

_NET_ERRORS = re.compile(
    rb"connection error|NewConnectionError|ConnectTimeout|ReadTimeout|Connection refused|Network is unreachable|"
    rb"Temporary failure in name resolution|Name or service not known|No route to host|"
    rb"ProxyError|SSLError|Max retries exceeded|Could not fetch URL"
)
_NOT_FOUND = re.compile(rb"No matching distribution found|Could not find a version that satisfies")
_SIZE_LINE = re.compile(rb"\(([0-9.]+) (kB|MB|GB)\)")


def pip_download(
    work: Path, package: str, version: str, label: str, *, progress: Progress, cache_root: Path
) -> Path:
    """Run ``pip download`` into ``work/dl``; return the downloaded file."""
    dl = work / "dl"
    piptmp = work / "piptmp"
    dl.mkdir(parents=True)
    piptmp.mkdir()
    argv = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        # -vv: an unreachable index is only logged at pip's debug level ("Could not fetch URL");
        # without it "no registry" and "no such version" print the same error.
        "-vv",
        "--progress-bar",
        "off",
        "-d",
        str(dl),
        f"{package}=={version}",
    ]
    # pip downloads into TMPDIR first: pointing it into our work dir lets us measure progress.
    env = {**os.environ, "TMPDIR": str(piptmp), "PIP_NO_INPUT": "1"}
    log.debug("running %s", " ".join(argv))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    output = bytearray()
    total: list[int | None] = [None]

    def reader() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            output.extend(line)
            m = _SIZE_LINE.search(line)
            if m and total[0] is None:
                total[0] = int(float(m[1]) * {b"kB": 1e3, b"MB": 1e6, b"GB": 1e9}[m[2]])

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    with progress.download(f"downloading {label}") as update:
        while proc.poll() is None:
            # pip writes into its TMPDIR, then copies into -d: the larger of the two is the progress
            # (their sum ran to twice the size). pip rounds the size it announces ("2.3 MB"), so
            # the count is held at it until the real size is known at the end.
            done = max(_tree_size(piptmp), _tree_size(dl))
            update(done if total[0] is None else min(done, total[0]), total[0])
            time.sleep(0.2)
        thread.join()
        size = _tree_size(dl)
        update(size, size)
        files = sorted(dl.iterdir())
        if proc.returncode == 0 and len(files) == 1:
            return files[0]
        out = bytes(output)
        tail = out.decode(errors="replace").strip().splitlines()
        # With -vv pip's last line is housekeeping ("Removed build tracker"); quote the line that says why.
        errors = [line for line in tail if line.startswith("ERROR:")]
        said = [line for line in errors if _NOT_FOUND.search(line.encode())] or errors
        last = (said or tail or [f"pip exited with {proc.returncode}"])[-1].strip()
        if _NOT_FOUND.search(out) and not _NET_ERRORS.search(out):
            raise UsageError(
                f"{package}=={version} has no wheel on the package index ({last})",
                hint="check the version (pip index versions vllm), or pass --source dir:PATH / git:PATH@REF",
            )
        if _NET_ERRORS.search(out) or _NOT_FOUND.search(out):
            raise EnvironmentProblem(
                f"{label} is not in the cache ({cache_root}) and the package index cannot be reached",
                hint="connect to the index once (or set PIP_INDEX_URL / PIP_FIND_LINKS), or pass "
                "--source dir:PATH or git:PATH@REF",
            )
        raise EnvironmentProblem(f"pip download of {package}=={version} failed: {last}")


def fetch_sdist(
    work: Path, package: str, version: str, label: str, *, progress: Progress, cache_root: Path
) -> Path:
    """Fetch the sdist through the index's JSON simple API (PEP 691), sha256-verified.

    ``pip download --no-binary`` cannot be used: pip builds an sdist's metadata before saving it,
    and vLLM's build needs torch (measured: "metadata-generation-failed", nothing saved).
    """
    import urllib.error
    import urllib.request

    index_url = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    project = re.sub(r"[-_.]+", "-", package).lower()
    request = urllib.request.Request(
        f"{index_url}/{project}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            listing = json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise EnvironmentProblem(
            f"{label} is not in the cache ({cache_root}) and the package index cannot be reached ({exc})",
            hint="connect to the index once, or pass --source dir:PATH or git:PATH@REF",
        ) from None
    wanted = {f"{package}-{version}.tar.gz", f"{project.replace('-', '_')}-{version}.tar.gz"}
    found = [f for f in listing.get("files", []) if f.get("filename") in wanted]
    if not found:
        raise UsageError(f"{package}=={version} has no source distribution on the package index")
    meta = found[0]
    target: Path = work / "dl" / meta["filename"]
    target.parent.mkdir(parents=True)
    digest = hashlib.sha256()
    with progress.download(f"downloading {label}") as update:
        try:
            with (
                urllib.request.urlopen(meta["url"], timeout=60) as resp,
                open(target, "wb") as fh,
            ):
                total = int(resp.headers.get("Content-Length") or 0) or None
                done = 0
                while chunk := resp.read(1 << 20):
                    fh.write(chunk)
                    digest.update(chunk)
                    done += len(chunk)
                    update(done, total)
        except (urllib.error.URLError, OSError) as exc:
            raise EnvironmentProblem(f"download of {meta['url']} failed: {exc}") from None
    expected = meta.get("hashes", {}).get("sha256")
    if expected and digest.hexdigest() != expected:
        raise CorruptCacheError(f"{meta['filename']}: sha256 differs from the index's")
    return target


def _tree_size(path: Path) -> int:
    from hyperqwen_patches.cachedir import tree_size

    return tree_size(path)[1]
