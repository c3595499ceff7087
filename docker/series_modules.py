"""Print the Python modules the series copies in: one ``<path>\t<module>`` line per ``.py`` file of
every active module-file row of patches/manifest.yaml (paths relative to site-packages).

Run with the Python that has hyperqwen-patches installed, from anywhere:
``python docker/series_modules.py REPO``. docker/install.sh imports these modules in its smoke step;
scripts/docker-ci deletes one to check that ``apply --check-applied`` notices.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hyperqwen_patches.series.manifest import load_manifest


def main() -> int:
    repo = Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    manifest = load_manifest(repo)
    for row in manifest.active_rows:
        if row.files is None:
            continue
        base = repo / row.files
        for file in sorted(base.rglob("*.py")):
            rel = file.relative_to(base)
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            print(f"{rel.as_posix()}\t{'.'.join(parts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
