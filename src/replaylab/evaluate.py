"""`python -m replaylab.evaluate`: the entry point lives in `replaylab.cli.evaluate`."""

from replaylab.cli.evaluate import main

if __name__ == "__main__":
    main()
