"""``check``'s frame: the :class:`~checks.context.CheckContext` and :class:`~checks.context.Finding` every
check shares, the core invariants (pin, series ⇔ files ⇔ rows, fuzz-0 apply, rendered files), and the
pipeline that runs every check and builds the report. Checks of the later stages (statics, fork, port)
join the pipeline by name.

May import: ``engine``, ``sources``, ``series`` and the shared ground (``layers.py``).
"""
