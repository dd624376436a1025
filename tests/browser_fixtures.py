"""Headless Debian Chromium for the browser tests, and a guard that keeps every request on 127.0.0.1.

Test modules import :func:`browser` (a fixture) and :func:`block_outside` from here
(``pythonpath = ["tests"]`` in pyproject.toml puts this folder on ``sys.path``).
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            user_data_dir=str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
        )
        yield context
        context.close()


def block_outside(context: Any) -> list[str]:
    """Abort every request of ``context`` that is not for 127.0.0.1; the returned list collects their URLs."""
    outside: list[str] = []

    def only_local(route: Any) -> None:
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    context.route("**/*", only_local)
    return outside


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serve_folder(directory: Path) -> Iterator[str]:
    """Serve ``directory`` on 127.0.0.1 while the block runs; yield its URL (ending in ``/``)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


def viewer_frame(page: Any, timeout_s: float) -> Any:
    """The first embedded viewer's frame, once its script API is up and its first drawing is done."""
    page.wait_for_selector(".gradexport-viewer iframe")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for frame in page.frames[1:]:
            try:
                if frame.evaluate("Boolean(window.gradexportViewer)"):
                    frame.evaluate("window.gradexportViewer.ready")
                    return frame
            except Exception:  # noqa: BLE001 - a frame still loading
                pass
        page.wait_for_timeout(100)
    raise AssertionError("no embedded viewer started")
