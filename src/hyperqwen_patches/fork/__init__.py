"""The fork: reading its commits in a scratch repository that borrows its objects, ``import`` (the fork
branch from pristine + series), ``export`` (one byte-stable patch per commit), replay identity, the
shipped bundle's cache, and the three fork checks of the pipeline.

May import: ``engine``, ``sources``, ``series``, ``checks``, ``statics`` and the shared ground
(``layers.py``).
"""
