"""`python -m devicebench` runs the command-line tool."""

import sys


def main() -> None:
    """Start the CLI. Ctrl-C while it is still importing (torch takes seconds) ends with one line and 130, not with a
    traceback: nothing has started yet, so nothing is lost. (The package's own __init__ runs before this module; it
    must stay light for this to cover the whole start-up.)"""
    try:
        from devicebench.cli import app
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted while starting; nothing was done\n")
        sys.exit(130)
    app(prog_name="devicebench")


if __name__ == "__main__":
    main()
