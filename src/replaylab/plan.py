"""`python -m replaylab.plan`: the entry point lives in `replaylab.cli.plan`."""

import sys

from replaylab.cli.plan import main

if __name__ == "__main__":
    sys.exit(main())
