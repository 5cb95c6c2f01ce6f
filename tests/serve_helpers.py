"""A uvicorn server in a thread for the serve tests: started on a free port, ready when
``started`` (no fixed sleep), stopped and joined on exit."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

WAIT = 60  # seconds: an upper bound on waiting for readiness


@contextmanager
def serving(app):
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(WAIT)


def wait_until(check, what: str, timeout: float = WAIT) -> None:
    """Poll ``check()`` until it is true (AssertionError naming ``what`` after ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)
