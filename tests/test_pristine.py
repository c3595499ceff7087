"""The pristine tree: sources, the PyPI cache (cold, warm, offline, corrupt, concurrent, interrupted).

The cache mechanics run real ``pip download`` against a local package index: a small wheel built here,
served by ``--find-links`` from a directory or from a local HTTP server (slowed down where a test needs
two processes to overlap). No pip, zip or network call is mocked. The tests marked ``network`` use the
real vLLM 0.29.0 wheel from PyPI (through the shared cache, so it is downloaded once per machine).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.server
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hyperqwen_patches.cachedir import cache_dir
from hyperqwen_patches.errors import EnvironmentProblem, UsageError
from hyperqwen_patches.sources.pristine import open_pristine
from hyperqwen_patches.sources.pristinetree import Quiet
from hyperqwen_patches.sources.pypicache import PypiCache
from hyperqwen_patches.sources.spec import SourceSpec, SourceSpecError, parse_source
from hyperqwen_patches.sources.wheeltree import WheelTree

PKG = "hqpfake"
ELF = b"\x7fELF\x02\x01\x01\x00" + b"\x00" * 64
MARKER = b"MARKER-0123456789-THIS-LINE-IS-STORED-UNCOMPRESSED\n"


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(directory: Path, version: str = "1.0", *, extra: bytes = b"") -> Path:
    """A minimal, valid wheel of PKG: two text files, a .so, and a stored (uncompressed) text file."""
    directory.mkdir(parents=True, exist_ok=True)
    dist = f"{PKG}-{version}.dist-info"
    members: dict[str, bytes] = {
        f"{PKG}/__init__.py": b"VERSION = '" + version.encode() + b"'\n" + extra,
        f"{PKG}/sub/mod,with,commas.py": b"def f():\n    return 1\n",
        f"{PKG}/_C.abi3.so": ELF,
        f"{PKG}/stored.txt": MARKER * 4,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {PKG}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(
        f'"{name}",{record_hash(data)},{len(data)}\n'
        if "," in name
        else f"{name},{record_hash(data)},{len(data)}\n"
        for name, data in members.items()
    )
    record += f"{dist}/RECORD,,\n"
    path = directory / f"{PKG}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            method = zipfile.ZIP_STORED if name.endswith("stored.txt") else zipfile.ZIP_DEFLATED
            zf.writestr(name, data, compress_type=method)
        zf.writestr(f"{dist}/RECORD", record)
    return path


@pytest.fixture
def local_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache and a find-links directory as the only package index."""
    links = tmp_path / "links"
    build_wheel(links)
    monkeypatch.setenv("HQP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    return links


def pip_runs(caplog: pytest.LogCaptureFixture) -> int:
    return sum(
        1
        for r in caplog.records
        if r.getMessage().startswith("running ") and " pip download " in r.getMessage()
    )


def test_parse_source_forms() -> None:
    assert parse_source("pypi:vllm==0.29.0") == SourceSpec("pypi", package="vllm", version="0.29.0")
    assert parse_source("pypi:vllm==0.29.0#sdist").sdist
    assert parse_source("pypi") == SourceSpec("pypi")
    assert parse_source("git:../a@b@v0.29.0") == SourceSpec("git", path="../a@b", ref="v0.29.0")
    assert parse_source("dir:/x/site-packages") == SourceSpec("dir", path="/x/site-packages")
    for bad in ("pypi:vllm", "pypi:vllm==1#wheel", "git:nowhere", "dir:", "http://x", ""):
        with pytest.raises(SourceSpecError):
            parse_source(bad)


def test_cache_dir_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HQP_CACHE", str(tmp_path / "a"))
    assert cache_dir() == tmp_path / "a"
    monkeypatch.delenv("HQP_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "x/hyperqwen-patches"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == Path.home() / ".cache/hyperqwen-patches"


def test_cold_then_warm_and_offline(
    local_index: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="hyperqwen_patches.sources")
    with open_pristine(f"pypi:{PKG}==1.0", package=PKG, version="1.0") as tree:
        assert tree.label == f"pypi:{PKG}==1.0"
        assert tree.paths() == [
            b"hqpfake/__init__.py",
            b"hqpfake/stored.txt",
            b"hqpfake/sub/mod,with,commas.py",
        ]
        assert tree.binaries() == [b"hqpfake/_C.abi3.so"]
        assert tree.read(b"hqpfake/sub/mod,with,commas.py") == b"def f():\n    return 1\n"
        assert tree.read(b"hqpfake/_C.abi3.so") is None  # binaries are left out of the tree
        assert tree.read(b"hqpfake/missing.py") is None
    assert pip_runs(caplog) == 1
    entry = tmp_path / "cache/pypi/hqpfake-1.0.0-wheel"
    assert sorted(p.name for p in entry.iterdir()) == [
        "hqpfake-1.0-py3-none-any.whl",
        "index.json",
        "members.sqlite",
    ]
    assert not list((tmp_path / "cache/pypi").glob(".tmp-*"))
    # Offline: the index is gone; the warm cache needs no registry at all.
    for wheel in local_index.iterdir():
        wheel.unlink()
    with open_pristine("pypi", package=PKG, version="1.0") as tree:
        assert tree.read(b"hqpfake/__init__.py") == b"VERSION = '1.0'\n"
    assert pip_runs(caplog) == 1


def test_version_not_on_the_index_is_one_line(local_index: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        open_pristine(f"pypi:{PKG}==9.9", package=PKG, version="9.9")
    assert info.value.message.startswith(f"{PKG}==9.9 has no wheel on the package index (")
    assert "\n" not in info.value.message
    assert not (tmp_path / "cache/pypi/hqpfake-9.9.0-wheel").exists()
    assert not list((tmp_path / "cache/pypi").glob(".tmp-*"))


def test_no_cache_and_no_registry_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HQP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(
        "PIP_INDEX_URL", "http://127.0.0.1:9/simple"
    )  # discard port: refused at once
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    with pytest.raises(EnvironmentProblem) as info:
        open_pristine("pypi:vllm==0.29.0", version="0.29.0")
    assert info.value.message == (
        f"pypi:vllm==0.29.0 is not in the cache ({tmp_path / 'cache'}) and the package index cannot be reached"
    )
    assert "--source dir:PATH" in (info.value.hint or "")


def test_changed_wheel_is_refetched(
    local_index: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A truncated cached wheel (size differs from the verified one) is not trusted: fetched again."""
    caplog.set_level(logging.DEBUG, logger="hyperqwen_patches.sources")
    open_pristine(f"pypi:{PKG}==1.0", package=PKG, version="1.0").close()
    wheel = tmp_path / "cache/pypi/hqpfake-1.0.0-wheel/hqpfake-1.0-py3-none-any.whl"
    data = wheel.read_bytes()
    wheel.write_bytes(data[: len(data) // 2])
    with open_pristine(f"pypi:{PKG}==1.0", package=PKG, version="1.0") as tree:
        assert tree.read(b"hqpfake/__init__.py") == b"VERSION = '1.0'\n"
    assert pip_runs(caplog) == 2
    assert wheel.read_bytes() == data
    assert any("changed since it was verified" in r.getMessage() for r in caplog.records)


def test_silently_corrupted_member_is_detected_on_read_and_refetched(
    local_index: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Bit rot: same size, same mtime, one byte flipped inside a member. The read's CRC/RECORD check sees it."""
    caplog.set_level(logging.DEBUG, logger="hyperqwen_patches.sources")
    open_pristine(f"pypi:{PKG}==1.0", package=PKG, version="1.0").close()
    wheel = tmp_path / "cache/pypi/hqpfake-1.0.0-wheel/hqpfake-1.0-py3-none-any.whl"
    st = wheel.stat()
    data = bytearray(wheel.read_bytes())
    at = data.index(MARKER)
    data[at] ^= 0x01
    wheel.write_bytes(bytes(data))
    os.utime(wheel, ns=(st.st_atime_ns, st.st_mtime_ns))
    with open_pristine(f"pypi:{PKG}==1.0", package=PKG, version="1.0") as tree:
        assert (
            tree.read(b"hqpfake/__init__.py") == b"VERSION = '1.0'\n"
        )  # intact member: no refetch
        assert pip_runs(caplog) == 1
        assert tree.read(b"hqpfake/stored.txt") == MARKER * 4
    assert pip_runs(caplog) == 2
    assert any("is corrupt" in r.getMessage() for r in caplog.records)


def test_a_format_1_entry_is_upgraded_in_place_without_a_download(
    local_index: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Entries written before the member table (every hash in index.json, format 1) stay usable
    offline: the table is built once from the index and the wheel's central directory, and the
    reads are the same bytes."""
    caplog.set_level(logging.DEBUG, logger="hyperqwen_patches.sources")
    with open_pristine(f"pypi:{PKG}==1.0", package=PKG, version="1.0") as tree:
        before = {p: tree.read(p) for p in tree.paths()}
    entry = tmp_path / "cache/pypi/hqpfake-1.0.0-wheel"
    index = json.loads((entry / "index.json").read_bytes())
    assert index["format"] == 2 and "text" not in index  # per-member data is in the table only
    old = {
        **index,
        "format": 1,
        "text": {p.decode(): record_hash(data) for p, data in before.items() if data is not None},
    }
    (entry / "index.json").write_text(json.dumps(old))
    (entry / "members.sqlite").unlink()
    for wheel in local_index.iterdir():  # offline: a download would fail
        wheel.unlink()
    with open_pristine(f"pypi:{PKG}==1.0", package=PKG, version="1.0") as tree:
        assert tree.paths() == sorted(before)
        assert {p: tree.read(p) for p in tree.paths()} == before
    assert pip_runs(caplog) == 1
    assert json.loads((entry / "index.json").read_bytes()) == index
    assert sorted(p.name for p in entry.iterdir()) == [
        "hqpfake-1.0-py3-none-any.whl",
        "index.json",
        "members.sqlite",
    ]


@pytest.mark.parametrize("where", ["another member", "past the end", "inside a member"])
def test_a_wrong_offset_in_the_member_table_is_caught_and_refetched(
    local_index: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, where: str
) -> None:
    """The table is trusted for where a member lies, never for what it holds: a read that lands on
    another member, past the end or on no header at all is a corrupt entry, fetched again."""
    caplog.set_level(logging.DEBUG, logger="hyperqwen_patches.sources")
    open_pristine(f"pypi:{PKG}==1.0", package=PKG, version="1.0").close()
    entry = tmp_path / "cache/pypi/hqpfake-1.0.0-wheel"
    size = next(entry.glob("*.whl")).stat().st_size
    con = sqlite3.connect(entry / "members.sqlite")
    (other,) = con.execute(
        "SELECT header FROM members WHERE path = ?", (b"hqpfake/__init__.py",)
    ).fetchone()
    (mine,) = con.execute(
        "SELECT header FROM members WHERE path = ?", (b"hqpfake/stored.txt",)
    ).fetchone()
    wrong = {"another member": other, "past the end": size + 10, "inside a member": mine + 7}[where]
    con.execute("UPDATE members SET header = ? WHERE path = ?", (wrong, b"hqpfake/stored.txt"))
    con.commit()
    con.close()
    with open_pristine(f"pypi:{PKG}==1.0", package=PKG, version="1.0") as tree:
        assert tree.read(b"hqpfake/stored.txt") == MARKER * 4
    assert pip_runs(caplog) == 2
    assert any("is corrupt" in r.getMessage() for r in caplog.records)


def test_a_missing_member_table_means_a_fresh_fetch(
    local_index: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="hyperqwen_patches.sources")
    open_pristine(f"pypi:{PKG}==1.0", package=PKG, version="1.0").close()
    (tmp_path / "cache/pypi/hqpfake-1.0.0-wheel/members.sqlite").unlink()
    with open_pristine(f"pypi:{PKG}==1.0", package=PKG, version="1.0") as tree:
        assert tree.read(b"hqpfake/__init__.py") == b"VERSION = '1.0'\n"
    assert pip_runs(caplog) == 2


def test_a_wheel_failing_its_record_is_never_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    links = tmp_path / "links"
    wheel = build_wheel(links)
    # Rewrite one member after RECORD was computed: the download itself is corrupt.
    with zipfile.ZipFile(wheel) as zf:
        members = {i.filename: zf.read(i) for i in zf.infolist()}
    members[f"{PKG}/__init__.py"] = b"tampered\n"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    monkeypatch.setenv("HQP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    with pytest.raises(EnvironmentProblem, match="does not match the wheel's RECORD"):
        open_pristine(f"pypi:{PKG}==1.0", package=PKG, version="1.0")
    assert not (tmp_path / "cache/pypi/hqpfake-1.0.0-wheel").exists()
    assert not list((tmp_path / "cache/pypi").glob(".tmp-*"))


class _SlowHandler(http.server.SimpleHTTPRequestHandler):
    delay = 0.0

    def do_GET(self) -> None:
        if self.path.endswith(".whl"):
            time.sleep(self.delay)
        super().do_GET()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def slow_index(tmp_path: Path) -> Iterator[tuple[str, type[_SlowHandler]]]:
    links = tmp_path / "links"
    build_wheel(links, extra=b"# " + b"x" * 2_000_000 + b"\n")
    handler = type("Handler", (_SlowHandler,), {})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a: handler(*a, directory=str(links))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", handler
    finally:
        server.shutdown()


OPEN_AND_READ = (
    "import logging, sys; logging.basicConfig(level=logging.DEBUG, stream=sys.stderr);"
    "from hyperqwen_patches.sources.pristine import open_pristine;"
    f"t = open_pristine('pypi:{PKG}==1.0', package='{PKG}', version='1.0');"
    f"sys.stdout.write(str(len(t.read(b'{PKG}/__init__.py'))))"
)


def _env(tmp_path: Path, url: str) -> dict[str, str]:
    return {
        **os.environ,
        "HQP_CACHE": str(tmp_path / "cache"),
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": url,
    }


def test_two_processes_at_once_download_once(
    tmp_path: Path, slow_index: tuple[str, type[_SlowHandler]]
) -> None:
    url, handler = slow_index
    handler.delay = 1.5  # long enough for the second process to find the lock taken
    env = _env(tmp_path, url)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPEN_AND_READ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1].decode()[-2000:] for o in outs]
    assert outs[0][0] == outs[1][0] == str(len(b"VERSION = '1.0'\n") + 2_000_003).encode()
    downloads = sum(o[1].count(b"pip download") for o in outs)
    assert downloads == 1, [o[1].decode()[-2000:] for o in outs]


def test_an_interrupted_fill_leaves_nothing_trusted(
    tmp_path: Path, slow_index: tuple[str, type[_SlowHandler]]
) -> None:
    url, handler = slow_index
    handler.delay = 30.0
    env = _env(tmp_path, url)
    proc = subprocess.Popen(
        [sys.executable, "-c", OPEN_AND_READ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    pypi = tmp_path / "cache/pypi"
    deadline = time.monotonic() + 30
    while not list(pypi.glob(".tmp-*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(pypi.glob(".tmp-*")), "the fill never started"
    os.killpg(proc.pid, signal.SIGKILL)  # the process and its pip child, mid-download
    proc.wait()
    assert not (pypi / "hqpfake-1.0.0-wheel").exists()
    handler.delay = 0.0
    out = subprocess.run(
        [sys.executable, "-c", OPEN_AND_READ], env=env, capture_output=True, timeout=120
    )
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    assert not list(pypi.glob(".tmp-*"))  # the debris was cleared by the next fill


def test_dir_source(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    (site / "vllm/sub").mkdir(parents=True)
    (site / "vllm/__init__.py").write_bytes(b"x = 1\r\n")
    (site / "vllm/sub/a.py").write_bytes(b"\xe9t\xe9\n")  # Latin-1: text all the same
    (site / "vllm/_C.so").write_bytes(ELF)
    (site / "vllm/__pycache__").mkdir()
    (site / "vllm/__pycache__/x.pyc").write_bytes(b"\x00")
    tree = open_pristine(f"dir:{site}", version="0.29.0")
    assert tree.paths() == [b"vllm/__init__.py", b"vllm/sub/a.py"]
    assert tree.binaries() == [b"vllm/_C.so"]
    assert tree.read(b"vllm/__init__.py") == b"x = 1\r\n"
    assert tree.read(b"vllm/_C.so") is None and tree.read(b"vllm/nope.py") is None
    assert tree.read(b"vllm/../../etc/passwd") is None
    with pytest.raises(UsageError, match="no vllm/ directory") as info:
        open_pristine(f"dir:{site / 'vllm'}", version="0.29.0")
    assert info.value.hint == f"give the directory that holds vllm/: dir:{site}"


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def test_git_source(tmp_path: Path) -> None:
    repo = tmp_path / "vllm-src"
    (repo / "vllm").mkdir(parents=True)
    (repo / "vllm/envs.py").write_bytes(b"A = 1\n")
    (repo / "vllm/logo.bin").write_bytes(ELF)
    (repo / "setup.py").write_bytes(b"setup()\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "v0.29.0")
    _git(repo, "tag", "v0.29.0")
    (repo / "vllm/envs.py").write_bytes(b"A = 2\n")  # the working tree is not the tag
    _git(repo, "commit", "-qam", "later")
    tree = open_pristine(f"git:{repo}@v0.29.0", version="0.29.0")
    assert tree.read(b"vllm/envs.py") == b"A = 1\n"
    assert tree.paths() == [b"vllm/envs.py"] and tree.binaries() == [b"vllm/logo.bin"]
    assert tree.read(b"setup.py") is None  # only the package subtree
    assert tree.read(b"vllm/logo.bin") is None
    with pytest.raises(UsageError, match="'v9' is not a commit"):
        open_pristine(f"git:{repo}@v9", version="0.29.0")


def test_git_source_is_read_in_isolation_and_keeps_empty_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same files as a wheel of the same tree would list (empty ones included: vLLM has 116), read
    from the repository named, whatever its config or the environment say."""
    repo = tmp_path / "vllm-src"
    (repo / "vllm/sub").mkdir(parents=True)
    (repo / "vllm/envs.py").write_bytes(b"A = 1\n")
    (repo / "vllm/__init__.py").write_bytes(b"")
    (repo / "vllm/sub/__init__.py").write_bytes(b"")
    (repo / "vllm/logo.bin").write_bytes(ELF)
    _git(repo, "init", "-q")
    _git(repo, "config", "color.ui", "always")
    _git(repo, "config", "grep.lineNumber", "true")
    _git(repo, "config", "core.quotePath", "false")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "v0.29.0")
    other = tmp_path / "other"
    other.mkdir()
    _git(other, "init", "-q")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))  # must not make it read another repository
    tree = open_pristine(f"git:{repo}@HEAD", version="0.29.0")
    assert tree.paths() == [b"vllm/__init__.py", b"vllm/envs.py", b"vllm/sub/__init__.py"]
    assert tree.binaries() == [b"vllm/logo.bin"]
    assert tree.read(b"vllm/sub/__init__.py") == b""
    assert tree.read(b"vllm/envs.py") == b"A = 1\n"


@pytest.mark.network
def test_real_vllm_wheel() -> None:
    """The real 0.29.0 wheel through the shared cache (downloaded once per machine)."""
    with open_pristine("pypi:vllm==0.29.0", version="0.29.0") as tree:
        paths = tree.paths()
        binaries = tree.binaries()
        envs = tree.read(b"vllm/envs.py")
    assert envs is not None and b"VLLM_" in envs
    assert len(paths) == 4885 and len(binaries) == 19
    assert b"vllm/vllm-rs" in binaries  # an executable without a suffix: found by content, not name
    assert all(
        b.endswith(b".so")
        or b in (b"vllm/vllm-rs", b"vllm/distributed/kv_transfer/disagg_prefill_workflow.jpg")
        for b in binaries
    )
    # A fused-MoE config: its RECORD line is quoted (the name holds commas).
    assert (
        b"vllm/model_executor/layers/fused_moe/configs/E=1,N=14336,device_name=NVIDIA_A100-SXM4-80GB,dtype=int8_w8a16.json"
        in paths
    )


@pytest.mark.network
def test_offset_reads_agree_with_zipfile_on_the_real_wheel() -> None:
    """Differential: every text member of the real 0.29.0 wheel, read at its indexed offset, is the
    bytes Python's zipfile reads through the central directory."""
    with open_pristine("pypi:vllm==0.29.0", version="0.29.0") as tree:
        assert isinstance(tree, WheelTree)
        with zipfile.ZipFile(tree.entry / tree.index["file"]) as zf:
            paths = tree.paths()
            assert len(paths) == 4885
            for path in paths:
                assert tree.read(path) == zf.read(path.decode()), path


@pytest.mark.network
@pytest.mark.slow
def test_real_vllm_sdist_agrees_with_the_wheel() -> None:
    with (
        open_pristine("pypi:vllm==0.29.0#sdist", version="0.29.0") as sdist,
        open_pristine("pypi:vllm==0.29.0", version="0.29.0") as wheel,
    ):
        assert sdist.label == "pypi:vllm==0.29.0#sdist"
        assert sdist.read(b"vllm/envs.py") == wheel.read(b"vllm/envs.py")
        assert set(sdist.paths()) <= set(wheel.paths())


@pytest.mark.network
def test_version_missing_from_pypi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HQP_CACHE", str(tmp_path / "cache"))
    with pytest.raises(UsageError) as info:
        open_pristine("pypi:vllm==0.0.999", version="0.0.999")
    assert info.value.message.startswith("vllm==0.0.999 has no wheel on the package index (")
    assert "\n" not in info.value.message


def test_quiet_progress_is_silent(capfd: pytest.CaptureFixture[str]) -> None:
    store = PypiCache(Path("/nonexistent"), Quiet())
    with store.progress.waiting("a lock"):
        pass
    with store.progress.download("x") as update:
        update(1, 2)
        update(2, 2)
    assert capfd.readouterr() == ("", "")


def test_indexing_streams_members_and_leaves_binaries_unhashed(tmp_path: Path) -> None:
    """A 64 MB binary member (vLLM ships 308 MB .so files) is listed from its first bytes and never
    held in memory; it is not hashed (no command reads it), so its RECORD line does not matter, while
    a text member is still checked against RECORD."""
    import tracemalloc

    from hyperqwen_patches.sources import pypicache

    big = ELF + b"\0" * (64 << 20)
    text = b"x = 1\n" * 300_000  # 1.8 MB of text, streamed and hashed
    dist = f"{PKG}-1.0.dist-info"
    record = (
        f"{PKG}/_big.so,{record_hash(b'not these bytes')},{len(big)}\n"
        f"{PKG}/big.py,{record_hash(text)},{len(text)}\n{dist}/RECORD,,\n"
    )
    wheel = tmp_path / f"{PKG}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{PKG}/_big.so", big)
        zf.writestr(f"{PKG}/big.py", text)
        zf.writestr(f"{dist}/RECORD", record)
    del big
    staged = tmp_path / "staged"
    staged.mkdir()
    tracemalloc.start()
    try:
        index = pypicache._index_wheel(wheel, PKG, "test", staged)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert index["binaries"] == [f"{PKG}/_big.so"]
    # A behaviour, not a speed figure: the 64 MB member is never held whole (tracemalloc is exact).
    assert peak < (64 << 20) // 4, f"indexing held {peak >> 20} MB at its peak"
    with zipfile.ZipFile(wheel, "a") as zf:  # a text member failing RECORD still fails
        zf.writestr(f"{PKG}/bad.py", b"y = 2\n")
    with pytest.raises(EnvironmentProblem, match=r"bad\.py does not match the wheel's RECORD"):
        pypicache._index_wheel(wheel, PKG, "test", tmp_path / "staged2")


def test_a_member_table_with_swapped_rows_is_caught_and_refetched(
    local_index: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two rows' offsets and hashes swapped: each offset then holds a member whose bytes match the hash
    beside it, so only the member's own name in its local header tells them apart."""
    import sqlite3

    caplog.set_level(logging.DEBUG, logger="hyperqwen_patches.sources")
    open_pristine(f"pypi:{PKG}==1.0", package=PKG, version="1.0").close()
    table = tmp_path / "cache/pypi/hqpfake-1.0.0-wheel/members.sqlite"
    a, b = b"hqpfake/__init__.py", b"hqpfake/stored.txt"
    con = sqlite3.connect(table)
    rows = {
        bytes(r[0]): r[1:]
        for r in con.execute("SELECT path, hash, header, size, method FROM members")
    }
    con.execute("DELETE FROM members WHERE path IN (?, ?)", (a, b))
    con.execute("INSERT INTO members VALUES (?, ?, ?, ?, ?)", (a, *rows[b]))
    con.execute("INSERT INTO members VALUES (?, ?, ?, ?, ?)", (b, *rows[a]))
    con.commit()
    con.close()
    with open_pristine(f"pypi:{PKG}==1.0", package=PKG, version="1.0") as tree:
        assert tree.read(a) == b"VERSION = '1.0'\n"
        assert tree.read(b) == MARKER * 4
    assert pip_runs(caplog) == 2
    assert any("is another file" in r.getMessage() for r in caplog.records)


def test_a_damaged_member_table_is_refetched_not_a_traceback(
    local_index: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="hyperqwen_patches.sources")
    open_pristine(f"pypi:{PKG}==1.0", package=PKG, version="1.0").close()
    table = tmp_path / "cache/pypi/hqpfake-1.0.0-wheel/members.sqlite"
    for junk in (b"", b"not a database at all" * 100):
        table.write_bytes(junk)
        with open_pristine(f"pypi:{PKG}==1.0", package=PKG, version="1.0") as tree:
            assert b"hqpfake/__init__.py" in tree.paths()
            assert tree.read(b"hqpfake/__init__.py") == b"VERSION = '1.0'\n"


def test_a_release_spelt_two_ways_is_one_cache_entry(
    local_index: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``1.0`` and ``1.0.0`` are one version (PEP 440 pads with zeros): one download, one entry."""
    caplog.set_level(logging.DEBUG, logger="hyperqwen_patches.sources")
    with open_pristine(f"pypi:{PKG}==1.0", package=PKG, version="1.0") as tree:
        first = tree.read(b"hqpfake/__init__.py")
    with open_pristine(f"pypi:{PKG}==1.0.0", package=PKG, version="1.0.0") as tree:
        assert tree.read(b"hqpfake/__init__.py") == first
    assert pip_runs(caplog) == 1
    assert [p.name for p in (tmp_path / "cache/pypi").iterdir()] == ["hqpfake-1.0.0-wheel"]


def test_a_corrupt_member_read_from_many_threads_is_fetched_again_once(
    local_index: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """check reads the pristine tree from two threads; a corrupt member seen by several at once
    must not race the refetch into a traceback (it did in 8 of 9 runs)."""
    from concurrent.futures import ThreadPoolExecutor

    caplog.set_level(logging.DEBUG, logger="hyperqwen_patches.sources")
    open_pristine(f"pypi:{PKG}==1.0", package=PKG, version="1.0").close()
    wheel = tmp_path / "cache/pypi/hqpfake-1.0.0-wheel/hqpfake-1.0-py3-none-any.whl"
    st = wheel.stat()
    data = bytearray(wheel.read_bytes())
    data[data.index(MARKER)] ^= 0x01
    wheel.write_bytes(bytes(data))
    os.utime(wheel, ns=(st.st_atime_ns, st.st_mtime_ns))
    paths = [b"hqpfake/stored.txt", b"hqpfake/__init__.py", b"hqpfake/sub/mod,with,commas.py"] * 16
    with (
        open_pristine(f"pypi:{PKG}==1.0", package=PKG, version="1.0") as tree,
        ThreadPoolExecutor(max_workers=8) as pool,
    ):
        got = list(pool.map(tree.read, paths))
    assert got[0] == MARKER * 4 and got[1] == b"VERSION = '1.0'\n"
    assert pip_runs(caplog) == 2  # the first fill, and one refetch


class _Recorder:
    """A Progress that keeps every download update (done, total)."""

    def __init__(self) -> None:
        self.updates: list[tuple[int, int | None]] = []

    def waiting(self, label: str) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def download(self, label: str) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext(lambda done, total: self.updates.append((done, total)))


def test_the_download_progress_never_passes_the_size_pip_announces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip downloads into its TMPDIR and then copies into -d: counting both made the bar run to
    twice the size. A wheel of about 3 MB over HTTP: every update stays within the size pip
    announces (rounded by pip to 0.1 MB) and the last one is the whole file."""
    import secrets

    links = tmp_path / "links"
    wheel = build_wheel(
        links, extra=b"# " + base64.b64encode(secrets.token_bytes(2_300_000)) + b"\n"
    )
    handler = type("Handler", (_SlowHandler,), {"delay": 0.5})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a: handler(*a, directory=str(links))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("PIP_NO_INDEX", "1")
        monkeypatch.setenv("PIP_FIND_LINKS", f"http://127.0.0.1:{server.server_address[1]}/")
        rec = _Recorder()
        tree = open_pristine(
            f"pypi:{PKG}==1.0", package=PKG, version="1.0", cache=tmp_path / "cache", progress=rec
        )
        tree.close()
    finally:
        server.shutdown()
    size = wheel.stat().st_size
    assert rec.updates[-1] == (size, size)  # the bar ends full, at the file's real size
    announced = {t for _, t in rec.updates[:-1]} - {None}
    assert all(abs(t - size) <= 0.05 * size for t in announced), (announced, size)
    assert all(t is None or done <= t for done, t in rec.updates), rec.updates


def _delete_row(table: Path, path: bytes) -> None:
    con = sqlite3.connect(table)
    con.execute("DELETE FROM members WHERE path = ?", (path,))
    con.commit()
    con.close()


def test_a_deleted_member_table_row_is_caught_on_read_and_refetched(
    local_index: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A row lost from the table made a release file "not exist" (exit 1, nothing about the cache):
    a miss is checked against the wheel's RECORD, and a file RECORD lists is a damaged entry, named."""
    caplog.set_level(logging.DEBUG, logger="hyperqwen_patches.sources")
    open_pristine(f"pypi:{PKG}==1.0", package=PKG, version="1.0").close()
    entry = tmp_path / "cache/pypi/hqpfake-1.0.0-wheel"
    _delete_row(entry / "members.sqlite", b"hqpfake/stored.txt")
    with open_pristine(f"pypi:{PKG}==1.0", package=PKG, version="1.0") as tree:
        assert tree.read(b"hqpfake/absent.py") is None  # a file RECORD does not list: just absent
        assert pip_runs(caplog) == 1
        assert tree.read(b"hqpfake/stored.txt") == MARKER * 4
    assert pip_runs(caplog) == 2
    (warning,) = [r.getMessage() for r in caplog.records if "is corrupt" in r.getMessage()]
    assert str(entry) in warning and "missing from the member table" in warning
    assert "hqpfake/stored.txt" in warning


def test_a_deleted_member_table_row_never_reaches_the_listing(
    local_index: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """paths() builds the cached base commit: a table short of a RECORD file is refetched first,
    so no base commit is built (and cached) without that file."""
    caplog.set_level(logging.DEBUG, logger="hyperqwen_patches.sources")
    with open_pristine(f"pypi:{PKG}==1.0", package=PKG, version="1.0") as tree:
        before = tree.paths()
    entry = tmp_path / "cache/pypi/hqpfake-1.0.0-wheel"
    _delete_row(entry / "members.sqlite", b"hqpfake/sub/mod,with,commas.py")
    with open_pristine(f"pypi:{PKG}==1.0", package=PKG, version="1.0") as tree:
        assert tree.paths() == before
    assert pip_runs(caplog) == 2
    assert any(
        "1 RECORD file(s) missing from it (first: hqpfake/sub/mod,with,commas.py)" in r.getMessage()
        for r in caplog.records
    )


def test_a_base_commit_built_while_a_row_is_lost_still_has_the_file(
    local_index: Path, tmp_path: Path
) -> None:
    """The cold ``check``'s cached base commit is built from the listing: with a row lost it lacked
    the file and stayed cached that way. Now the listing is checked first: the file is there."""
    from hyperqwen_patches.sources import basecommit

    open_pristine(f"pypi:{PKG}==1.0", package=PKG, version="1.0").close()
    _delete_row(tmp_path / "cache/pypi/hqpfake-1.0.0-wheel/members.sqlite", b"hqpfake/stored.txt")
    with open_pristine(f"pypi:{PKG}==1.0", package=PKG, version="1.0") as tree:
        got = basecommit.cached_base(
            tmp_path / "cache", f"pypi:{PKG}==1.0", tree, package=PKG, version="1.0"
        )
    assert got is not None
    listed = subprocess.run(
        ["git", "--git-dir", str(got[0]), "ls-tree", "-r", "--name-only", got[1]],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert "hqpfake/stored.txt" in listed and "hqpfake/__init__.py" in listed
