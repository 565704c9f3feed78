"""The `devicebench` command: flags become a config, one library call does the work, tables show it.

One module per command; each registers itself on `app` when imported, and is imported only when its command runs
(app.COMMANDS): most import torch, which takes seconds, and `--help`, `history` or `compare` should answer at once.
What the commands share is made in modules of its own and named here, where every command imports it from: the
group and its error boundary (app), the consoles (output), the exit statuses and the lines that end a command (exits),
and the shared options and checks (options).

    devicebench --help
"""

from __future__ import annotations

from devicebench.cli.app import COMMANDS, app
from devicebench.cli.exits import (
    DEBUG_VARIABLE,
    EXIT_FAILED_RUN,
    EXIT_HUNG_UP,
    EXIT_INTERRUPTED,
    EXIT_OUTPUT_CUT,
    EXIT_OUTPUT_LOST,
    EXIT_TERMINATED,
    EXIT_USAGE,
    fail,
    stopped,
)
from devicebench.cli.options import (
    BaselineOption,
    DatabaseOption,
    LastFilter,
    LocalDevicesOption,
    MachineFilter,
    PoolInterruptedOption,
    PriceOption,
    WorkloadFilter,
    check_folder,
    check_output_file,
    check_outputs_or_fail,
    confirmed,
    input_is_terminal,
    local_devices_or_fail,
    open_store,
    prices_from,
)
from devicebench.cli.output import WIDTH_WHEN_PIPED, console, errors

__all__ = [
    "COMMANDS",
    "DEBUG_VARIABLE",
    "EXIT_FAILED_RUN",
    "EXIT_HUNG_UP",
    "EXIT_INTERRUPTED",
    "EXIT_OUTPUT_CUT",
    "EXIT_OUTPUT_LOST",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "WIDTH_WHEN_PIPED",
    "BaselineOption",
    "DatabaseOption",
    "LastFilter",
    "LocalDevicesOption",
    "MachineFilter",
    "PoolInterruptedOption",
    "PriceOption",
    "WorkloadFilter",
    "app",
    "check_folder",
    "check_output_file",
    "check_outputs_or_fail",
    "confirmed",
    "console",
    "errors",
    "fail",
    "input_is_terminal",
    "local_devices_or_fail",
    "open_store",
    "prices_from",
    "stopped",
]
