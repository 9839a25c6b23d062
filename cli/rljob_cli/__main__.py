"""``python -m rljob_cli`` = the ``rljob`` command."""

import sys

from rljob_cli.main import main

sys.exit(main())
