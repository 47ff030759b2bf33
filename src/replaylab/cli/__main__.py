"""`python -m replaylab.cli ...` is the `replaylab` command."""

import sys

from replaylab.cli.main import main

sys.exit(main())
