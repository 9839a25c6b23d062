"""``python -m rljob`` = the ``rljob`` command."""

import sys

from rljob.cli import main

sys.exit(main())
