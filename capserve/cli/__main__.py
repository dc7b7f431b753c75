"""``python -m capserve.cli``: the ``capserve`` command without its console script (used by the runtime)."""

import sys

from capserve.cli import main

sys.exit(main())
