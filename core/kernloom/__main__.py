"""``python -m kernloom`` is the ``kernloom`` command."""

import sys

from kernloom.cli import main

sys.exit(main())
