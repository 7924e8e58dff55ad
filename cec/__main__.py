"""``python -m cec``: the `cec` command line, the same program as the console script.

This is a program entry, not a library module (nothing imports it), so it may start
the top layer; tests/test_layers.py names it as the one exception.
"""

import sys

from cli.app import main

sys.exit(main())
