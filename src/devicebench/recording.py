"""Storing a session as it runs: the reporter that hands each event of `runner.run` to the results store.

It sits above both what it joins, devicebench.events (what a run tells) and devicebench.results.store (where it is
kept), so that neither imports the other.

    devicebench run mnist-cnn2 --devices cpu --data synthetic --epochs 2 --max-steps 5 && devicebench history
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from devicebench.events import RunReporter
from devicebench.results.schema import EpochRecord, Result, RunRecord
from devicebench.results.store import Store
from devicebench.results.store_errors import StoreError


class StoreReporter(RunReporter):
    """Stores a session as `runner.run` reports it: the session, each run at its start and end, each epoch.

    A write that fails (a full disk, another process holding the lock too long) is kept in `failure` and ends the
    storing, never the training: the run's tables and JSON still hold every number.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.result_id: str | None = None
        self.failure: StoreError | None = None

    def session_started(self, result: Result) -> None:
        self.result_id = result.result_id
        self._write(self.store.add_session, result)

    def run_started(self, record: RunRecord) -> None:
        self._write(self.store.start_run, self.result_id, record)

    def epoch_finished(self, record: RunRecord, epoch: EpochRecord) -> None:
        self._write(self.store.add_epoch, record.run_id, epoch)

    def run_finished(self, record: RunRecord) -> None:
        self._write(self.store.finish_run, record)

    def confirm(self) -> None:
        """At the end: that the database file still holds what was written (check_still_there), else `failure`."""
        self._write(self.store.check_still_there)

    def _write(self, write: Callable[..., None], *arguments: Any) -> None:
        if self.failure is not None:
            return  # later writes would only add to a record already incomplete
        try:
            write(*arguments)
        except StoreError as error:  # what failed and why, with every earlier write intact
            self.failure = error
