"""`python -m replaylab.plan`: the entry point lives in `replaylab.cli.plan`."""

from replaylab.cli.plan import main

if __name__ == "__main__":
    main()
