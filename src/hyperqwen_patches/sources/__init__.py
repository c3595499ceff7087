"""Sources: where the bytes come from. A pristine release (PyPI wheel read in place, sdist, git
checkout, directory) and its cached member table; the deterministic base commit built from it; a
directory tree on disk (path safety, the all-or-nothing write).

May import: ``engine`` and the shared ground (``layers.py``).
"""
