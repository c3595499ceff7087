"""hyperqwen-patches: carry a patch series on a pinned upstream release."""

__version__ = "0.1.0"
