"""``source-selection``'s config.  Torch-free.

:class:`SelectionConfig` is defined in the shared :mod:`updatescope.experiments.configs`,
because ``smiles``'s config extends it; this module names it for the folder."""

from __future__ import annotations

from updatescope.experiments.configs import SelectionConfig

__all__ = ["SelectionConfig"]
