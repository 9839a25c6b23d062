"""``python -m rljob_operator [options]``."""

import sys

from rljob_operator.main import main

sys.exit(main())
