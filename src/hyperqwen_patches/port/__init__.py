"""``port``: triage every row against another release (``triage``, ``pristinediff``), the report's data
(``model``) and its rendering (``report``), the new fork branch (``rebase``), ``port()`` tying them
together (``run``), and invariant 8, retirements verified against their pin (``retirements``).

May import: every stage below it (``engine`` … ``fork``) and the shared ground (``layers.py``).
"""
