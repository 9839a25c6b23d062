"""``python -m rljob_trainer --config /etc/rljob/rljob.yaml``: what the operator's pods run."""

import sys

from rljob_trainer.run.main import main

if __name__ == "__main__":
    sys.exit(main())
