"""The network side of a download: redirects kept on HTTPS, the deadline that shuts a connection down when a URL
has had its time, and what a network error means, in words.

    python -c "from devicebench.data.connection import OPENER; print(OPENER.handlers)"
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

# The longest deadline a download may have: a week, far past any dataset's download and far below what a timer
# thread can wait (threading.TIMEOUT_MAX; `inf` or 1e10 s raises OverflowError in the thread, leaving no deadline)
LONGEST_DEADLINE_S = 7 * 24 * 3600.0


class Deadline:
    """The time a URL has to deliver a file, attempts included. When it passes, a timer thread (so that no clock is
    read here: only engine/timing.py reads one) marks it passed and shuts down the connection being read, whose
    read then ends at once: a server sending a byte now and then, never stalling, cannot outlive it."""

    def __init__(self, seconds: float | None) -> None:
        if seconds is not None and not 0 < seconds <= LONGEST_DEADLINE_S:  # NaN too
            raise ValueError(
                f"a download deadline of {seconds:g} s; give one above 0 and at most {LONGEST_DEADLINE_S:g} s"
            )
        self.passed = threading.Event()
        self._response: Any = None  # the response being read, whose connection the timer shuts down
        self._lock = threading.Lock()  # so the timer never shuts a connection down as it is closed (its fd reused)
        self._timer = None if seconds is None else threading.Timer(seconds, self._pass)
        if self._timer is not None:
            self._timer.daemon = True

    def __enter__(self) -> Deadline:
        if self._timer is not None:
            self._timer.start()
        return self

    def __exit__(self, *exception: object) -> None:
        if self._timer is not None:
            self._timer.cancel()

    @contextlib.contextmanager
    def watching(self, response: Any) -> Iterator[None]:
        """Shut `response`'s connection down if the deadline passes while it is read (or has passed already)."""
        with self._lock:
            self._response = response
            if self.passed.is_set():
                _shut_down(response)
        try:
            yield
        finally:
            with self._lock:
                self._response = None

    def _pass(self) -> None:
        with self._lock:
            self.passed.set()
            if self._response is not None:
                _shut_down(self._response)


def _shut_down(response: Any) -> None:
    """End the connection under `response` both ways: a read blocked on it, in another thread, returns at once."""
    # suppressed: closed already; the socket is a duplicate of the connection's file descriptor
    with (
        contextlib.suppress(OSError, ValueError),
        socket.fromfd(response.fileno(), socket.AF_INET, socket.SOCK_STREAM) as connection,
    ):
        connection.shutdown(socket.SHUT_RDWR)


class InsecureRedirect(urllib.error.URLError):
    """A server sent an HTTPS download on to a URL that is not HTTPS."""


class HttpsOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect from HTTPS only to HTTPS: the rule is HTTPS only, so that what is downloaded, and whether
    it is downloaded at all, cannot be changed on the way (the checksum guards the bytes, not the connection)."""

    def redirect_request(
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> urllib.request.Request | None:
        if urllib.parse.urlsplit(req.full_url).scheme == "https" and urllib.parse.urlsplit(newurl).scheme != "https":
            fp.close()
            raise InsecureRedirect(
                f"redirected (HTTP {code}) to {newurl}, which is not HTTPS: refused, since "
                "devicebench downloads over HTTPS only"
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


OPENER = urllib.request.build_opener(HttpsOnlyRedirects)  # urlopen's opener, with redirects kept on HTTPS


def describe_network_error(error: object, timeout_s: float) -> str:
    if isinstance(error, TimeoutError):
        return f"timed out after {timeout_s:g} s"
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, http.client.IncompleteRead):
        return f"truncated: connection closed after {len(error.partial)} bytes"
    return f"{type(error).__name__}: {error}"
