"""``check``'s frame: the :class:`~checks.context.CheckContext` and :class:`~checks.context.Finding` every
check shares, the core invariants (pin, series ⇔ files ⇔ rows, fuzz-0 apply, rendered files), and the
runner that runs the checks it is given and builds the report. The pipeline itself, with the checks of
the later stages (statics, fork, port), is composed above them all in ``checklist.py``.

May import: ``engine``, ``sources``, ``series`` and the shared ground (``layers.py``).
"""
