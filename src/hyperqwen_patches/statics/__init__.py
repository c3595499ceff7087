"""Static checks of what the rows add: the patched tree, in memory, no install, no GPU.

Applying at fuzz 0 proves the hunks land; these prove more of the result still works. One module per
check (``compiles``, ``knobs``, ``names``, ``signatures``, ``whitespace``, ``gitapply``), each with a
``check_*`` function for ``checklist.PIPELINE``; ``provenance`` says which row introduced which line,
``analysis`` holds what the checks share (the traced series, parsed modules), ``symbols`` the symbol
tables the name and signature checks read. docs/static-checks.md describes every rule.

May import: ``engine``, ``sources``, ``series``, ``checks`` and the shared ground (``layers.py``).
"""
