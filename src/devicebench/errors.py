"""The base of the errors devicebench raises for a request it refuses (a bad flag, a file it will not use, a missing
optional package), so that the command line has one error boundary for all of them instead of a try/except around
each call: it prints the message as one line and exits with the error's `exit_status`.

    class ConfigError(DevicebenchError, ValueError): ...
"""

from __future__ import annotations


class DevicebenchError(Exception):
    """A request devicebench refuses; the message says what is wrong and what to do instead."""

    exit_status = 2  # the request itself was wrong: the command line's EXIT_USAGE (devicebench.cli) is this number
