"""The series as data: the YAML manifest (typed, errors with file, line and field), each row as an engine
patch, PATCHES.md and ``patches/series`` rendered from the manifest, and the range-diff of two series
revisions.

May import: ``engine``, ``sources`` and the shared ground (``layers.py``).
"""
