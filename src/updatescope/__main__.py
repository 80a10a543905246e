"""``python -m updatescope`` (and ``torchrun -m updatescope``): the command-line interface."""

from updatescope.cli import entry

entry()
