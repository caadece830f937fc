"""``python -m pgoutput_arrow.cli``: the same as ``pgoutput-dump``."""

import sys

from .main import main

sys.exit(main())
