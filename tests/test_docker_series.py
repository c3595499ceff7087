"""What the image build does with the series, on bad input: a site-packages that already carries part
of it, a module-file row whose file is missing from the installed tree, a module directory missing
from the repository. The build (docker/install.sh) runs ``apply`` then ``apply --check-applied``; these
run the same commands, through the CLI, on a site-packages made from the real vLLM 0.29.0 wheel.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hyperqwen_patches.series.manifest import load_manifest
from hyperqwen_patches.series.rows import default_series
from hyperqwen_patches.sources.pristine import open_pristine

REPO = Path(__file__).resolve().parent.parent
MODULE_ROW = """  - name: docker-test-module
    files: extra/files
    kind: own
    what: "A module-file row added by tests/test_docker_series.py."
    cut_against: "{pin}"
    retires_when: "never; test only"
"""


def hqp(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hyperqwen_patches", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A copy of this repository's series with one extra module-file row at the end."""
    root = tmp_path / "repo"
    shutil.copytree(REPO / "patches", root / "patches")
    for row in load_manifest(REPO).rows:
        source = row.patch or row.files
        assert source is not None
        if not (root / source).exists():
            target = root / source
            target.parent.mkdir(parents=True, exist_ok=True)
            if (REPO / source).is_dir():
                shutil.copytree(REPO / source, target)
            else:
                shutil.copy2(REPO / source, target)
    module = root / "extra" / "files" / "vllm" / "hqp_docker_test"
    module.mkdir(parents=True)
    (module / "__init__.py").write_bytes(b"")
    (module / "knob.py").write_bytes(b"VALUE = 1\n")
    manifest = root / "patches" / "manifest.yaml"
    text = manifest.read_text()
    pin = load_manifest(REPO).pin
    text = text.replace("rows: []\n", "rows:\n").replace(
        "\nretirements:", "\n" + MODULE_ROW.format(pin=pin) + "retirements:", 1
    )
    manifest.write_text(text)
    assert load_manifest(root).rows[-1].name == "docker-test-module"
    return root


@pytest.fixture
def site_packages(tmp_path: Path) -> Path:
    """The files the shipped series touches, pristine from the vLLM wheel, laid out as site-packages."""
    pin = load_manifest(REPO).pin
    out = tmp_path / "site-packages"
    with open_pristine(f"pypi:vllm=={pin}", version=pin) as tree:
        for patch in default_series(REPO):
            for file in patch.files:
                if file.old_path is None:
                    continue
                data = tree.read(file.old_path)
                assert data is not None, file.old_path
                target = out / file.old_path.decode()
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
    return out


def patch_rows(repo: Path) -> list[str]:
    return [r.name for r in load_manifest(repo).active_rows if r.patch is not None]


@pytest.mark.network
def test_a_tree_carrying_part_of_the_series_is_reported_row_by_row(
    repo: Path, site_packages: Path
) -> None:
    rows = load_manifest(repo).active_rows
    assert len(rows) >= 2, "the shipped series has fewer than two rows"
    first = rows[0]
    assert first.patch is not None
    done = hqp("apply", site_packages, "--patch", repo / first.patch, cwd=repo)
    assert done.returncode == 0, done.stdout + done.stderr
    before = {
        p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in site_packages.rglob("*") if p.is_file()
    }

    result = hqp("apply", site_packages, "--json", cwd=repo)
    assert result.returncode == 0, result.stdout + result.stderr
    payload = json.loads(result.stdout)
    statuses = {p["name"]: p["status"] for p in payload["patches"]}
    assert statuses[first.name] == "already-applied"
    assert all(statuses[r.name] == "applied" for r in rows[1:]), statuses
    # Nothing of the first row was written again.
    first_files = {
        f["path"] for p in payload["patches"] if p["name"] == first.name for f in p["files"]
    }
    assert not first_files & set(payload["written"])
    for path, stamp in before.items():
        rel = path.relative_to(site_packages).as_posix()
        if rel in first_files:
            assert (path.stat().st_ino, path.stat().st_mtime_ns) == stamp, rel

    again = hqp("apply", site_packages, "--json", cwd=repo)
    assert again.returncode == 0
    payload = json.loads(again.stdout)
    assert {p["status"] for p in payload["patches"]} == {"already-applied"}
    assert payload["written"] == []
    assert hqp("apply", site_packages, "--check-applied", cwd=repo).returncode == 0


@pytest.mark.network
def test_a_module_file_missing_from_the_installed_tree_fails_the_verify_step(
    repo: Path, site_packages: Path
) -> None:
    assert hqp("apply", site_packages, cwd=repo).returncode == 0
    victim = site_packages / "vllm" / "hqp_docker_test" / "knob.py"
    assert victim.read_bytes() == b"VALUE = 1\n"
    victim.unlink()

    result = hqp("apply", site_packages, "--check-applied", "--json", cwd=repo)
    assert result.returncode == 1, result.stdout + result.stderr
    payload = json.loads(result.stdout)
    row = next(p for p in payload["patches"] if p["name"] == "docker-test-module")
    assert row["status"] != "present"
    missing = [f["path"] for f in row["files"] if not f["present"]]
    assert missing == ["vllm/hqp_docker_test/knob.py"]
    others = [p["status"] for p in payload["patches"] if p["name"] != "docker-test-module"]
    assert set(others) == {"present"}

    # Re-running the build's apply step does not paper over it: a row half present is refused, by
    # name, and nothing is written (rebuild from the pip layer instead).
    again = hqp("apply", site_packages, "--json", cwd=repo)
    assert again.returncode == 1, again.stdout + again.stderr
    payload = json.loads(again.stdout)
    row = next(p for p in payload["patches"] if p["name"] == "docker-test-module")
    assert row["status"] == "failed"
    assert row["error"] == "partly in the tree"
    assert "row docker-test-module is partly in the tree" in payload["refused"]
    assert payload["written"] == []
    assert not victim.exists()


@pytest.mark.network
def test_a_module_directory_missing_from_the_repository_stops_the_build_untouched(
    repo: Path, site_packages: Path
) -> None:
    shutil.rmtree(repo / "extra")
    before = {p: p.read_bytes() for p in site_packages.rglob("*") if p.is_file()}
    result = hqp("apply", site_packages, cwd=repo)
    assert result.returncode == 2
    assert "docker-test-module" in result.stderr and "extra/files" in result.stderr
    after = {p: p.read_bytes() for p in site_packages.rglob("*") if p.is_file()}
    assert after == before
