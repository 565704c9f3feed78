"""A loopback HTTP server in a thread, for the download tests: no network, real sockets, real HTTP.

with serving(MyHandler, state) as base_url: ...   # handlers read `state` as self.server.state
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class StatefulHTTPServer(ThreadingHTTPServer):
    """Listens on a free loopback port; its handlers find the test's state at self.server.state."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], state: object) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.state = state


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler], state: object = None) -> Iterator[str]:
    """Serve `handler` until the block ends; yields the base URL, http://127.0.0.1:PORT/."""
    server = StatefulHTTPServer(handler, state)
    # a short poll interval (seconds) makes shutdown() at the end quick
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
