"""``python -m updatescope`` (and ``torchrun -m updatescope``): the command-line interface."""
import sys

from updatescope.cli import main

sys.exit(main())
