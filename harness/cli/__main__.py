"""``python -m harness.cli``: the same as the ``lifecycle-harness`` console script."""

import sys

from harness.cli.app import main

sys.exit(main())
