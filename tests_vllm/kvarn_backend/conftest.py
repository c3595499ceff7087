"""The KVarN backend tests import the patched vLLM: see kvarn_backend_trees.py."""

import kvarn_backend_trees  # noqa: F401  (puts the patched tree first on sys.path)
