"""`python -m replaylab.train`: the entry point lives in `replaylab.cli.train`."""

from replaylab.cli.train import main

if __name__ == "__main__":
    main()
