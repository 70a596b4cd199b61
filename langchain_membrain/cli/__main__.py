"""``python -m langchain_membrain.cli``: the ``membrain`` command."""

import sys

from . import main

sys.exit(main())
