"""``python -m lookuplinear``."""

import sys

from .cli import main

sys.exit(main())
