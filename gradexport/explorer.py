"""Open a backward graph in Model Explorer's local web app, from Python, the command line or a notebook.

`serve_model_explorer` writes the graph as
`gradexport.formats.model_explorer` maps it, starts Model Explorer's own
server with it through Model Explorer's config API
(``model_explorer.config().add_model_from_path(...)`` and
``visualize_from_config``), bound to ``127.0.0.1``, and opens the browser
(or only prints the address). A graph from `gradexport.record_gradients`
comes with its gradient node data (see
`gradexport.formats.model_explorer.gradient_node_data`), so the node
data panel can colour the graph by gradient norm at once.
`show_model_explorer` shows it inside a notebook: as Model Explorer
does itself in Colab, and as an inline frame on the local server in Jupyter.

Nothing leaves the machine: the web app is served from the installed
package, and gradexport switches off the server's check for a newer Model
Explorer release, which would ask the package index and GitHub. (The page
names a web font that the browser may try to fetch; it falls back to a local
font, and the graph's labels come with the package.)

The server reads any file the page asks for, as Model Explorer's server
does: keep it on ``127.0.0.1``.

Examples:
    >>> from gradexport.explorer import free_port
    >>> 0 < free_port() < 65536
    True
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import networkx as nx

from .options import DiagramOptions
from .formats.model_explorer import (
    EXTENSION,
    GRADIENT_METRICS,
    _model_explorer,
    _received,
    gradient_node_data,
    write_model_explorer,
)
from .formats.source import GraphSource
from .graph import gc_paused

__all__ = ["free_port", "serve_model_explorer", "show_model_explorer"]

#: How long `serve_model_explorer` waits for a server it starts in the background.
START_TIMEOUT_S = 60

#: Characters that the web app would not escape in the query string it reads a file with.
_UNSAFE_IN_QUERY = re.compile(r"[&#%+?;]")

#: Model Explorer's answer to its version check when there is nothing to report.
_NO_NEW_VERSION = {"version": "", "runningVersion": "", "releaseUrl": "", "desktopAppUrl": ""}


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` now (the system picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def _port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        return probe.connect_ex((host, port)) == 0


def _offline(model_explorer: Any) -> None:
    """Keep Model Explorer's server from asking the internet for newer releases.

    ``server._check_new_version`` is looked up at call time by the startup
    thread and by the page's ``/api/v1/check_new_version`` request.
    """
    server = model_explorer.server
    if hasattr(server, "_check_new_version"):
        server._check_new_version = lambda print_msg=True: dict(_NO_NEW_VERSION)
    # The server polls itself over HTTP with requests until it answers; a proxy
    # in the environment would receive those polls and the start would hang.
    if any(os.environ.get(name) for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY")):
        for name in ("no_proxy", "NO_PROXY"):
            entries = [entry for entry in os.environ.get(name, "").split(",") if entry]
            os.environ[name] = ",".join(entries + [host for host in ("127.0.0.1", "localhost") if host not in entries])


def _answers(url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def serve_model_explorer(
    graph: GraphSource | str | os.PathLike[str],
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    open_browser: bool = True,
    block: bool = True,
    node_data: Mapping[str, Any] | None = None,
    options: DiagramOptions | None = None,
    label: str = "gradexport",
    **visualize: Any,
) -> str:
    """Start Model Explorer's server with ``graph`` loaded; the page's address.

    Args:
        graph: A graph of `gradexport.to_networkx` (or a stream of
            one), written to a temporary ``graph.me.json`` that is removed when
            the server stops; or the path of a file written by
            `gradexport.formats.model_explorer.write_model_explorer`.
        host: The address to listen on. Keep ``127.0.0.1`` unless you mean
            to share the server: it reads any file a page asks for.
        port: The port; ``None`` picks a free one.
        open_browser: Open the page in the default browser; otherwise only
            print its address.
        block: Serve until Ctrl+C, as Model Explorer's own ``visualize``
            does (the command line). ``False`` serves from a background
            thread for the rest of the Python process and returns once the
            server answers (a notebook).
        node_data: Node data to offer, by name (``ModelNodeData`` objects,
            their JSON text); by default, for a graph with ``grad`` records,
            every metric of `gradexport.formats.model_explorer.gradient_node_data`
            (not for a stream, which can be read only once).
        options: Passed to the writer (only ``show_none`` applies).
        label: The graph collection's label in Model Explorer.
        **visualize: Other arguments of ``model_explorer.visualize_from_config``
            (``extensions``, ``colab_height``, ``watch``...).

    Returns:
        The page's address, ``http://127.0.0.1:<port>/?data=...``.

    Raises:
        ModelExplorerNotInstalledError: Model Explorer is not installed.
        FileNotFoundError: ``graph`` is a path that does not exist.
        ValueError: ``graph`` is a path whose name does not end in ``.json``.
        OSError: ``port`` is in use.
        TimeoutError: with ``block=False``, the server did not answer in time.
    """
    model_explorer = _model_explorer()
    folder: str | None = None
    if isinstance(graph, (str, os.PathLike)):
        path = Path(graph).expanduser().resolve()
        if not path.is_file():
            raise FileNotFoundError(f"no Model Explorer graph file at {str(path)!r}")
        if path.suffix != ".json":
            raise ValueError(f"Model Explorer reads graphs from files ending in .json (as {EXTENSION}), not {path.name!r}")
        if _UNSAFE_IN_QUERY.search(str(path)):
            # The page asks the server for the file with its path in a query string, unescaped.
            folder = tempfile.mkdtemp(prefix="gradexport-model-explorer-")
            (Path(folder) / f"graph{EXTENSION}").symlink_to(path)
            path = Path(folder) / f"graph{EXTENSION}"
    else:
        folder = tempfile.mkdtemp(prefix="gradexport-model-explorer-")
        path = Path(folder) / f"graph{EXTENSION}"
        with gc_paused():
            write_model_explorer(graph, path, options, label=label)
        if node_data is None and isinstance(graph, nx.Graph) and _received(graph):
            # Model Explorer colours by the last node data added: the log scale, the most telling.
            node_data = {f"gradient {metric}": gradient_node_data(graph, metric) for metric in reversed(GRADIENT_METRICS)}
    if port is None:
        port = free_port(host)
    elif _port_in_use(host, port):
        raise OSError(f"port {port} on {host} is in use: choose another, or port=None for a free one")
    config = model_explorer.config().add_model_from_path(str(path))
    for name, data in (node_data or {}).items():
        config.add_node_data(name, data)
    _offline(model_explorer)
    url = f"http://{host}:{port}/?data={config.to_url_param_value()}"
    arguments = dict(visualize, config=config, host=host, port=port, no_open_in_browser=not open_browser)
    if block and not _in_colab():
        try:
            model_explorer.visualize_from_config(**arguments)
        finally:
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
        return url
    if folder is not None:  # the server reads it for as long as the process lives
        atexit.register(shutil.rmtree, folder, True)
    if block:  # Colab: Model Explorer serves in the background and embeds its page in the cell
        model_explorer.visualize_from_config(**arguments)
        return url
    threading.Thread(target=model_explorer.visualize_from_config, kwargs=arguments, daemon=True).start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _answers(f"http://{host}:{port}/check_health"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"Model Explorer's server did not answer on {host}:{port} within {START_TIMEOUT_S} s")
        time.sleep(0.1)
    return url


def _in_colab() -> bool:
    return "google.colab" in sys.modules or bool(os.getenv("COLAB_RELEASE_TAG"))


def show_model_explorer(graph: GraphSource | str | os.PathLike[str], *, height: int = 850, **serve: Any) -> Any:
    """Show ``graph`` in Model Explorer inside a notebook cell.

    In Colab, Model Explorer embeds itself (its own ``visualize_from_config``
    does it) and this returns ``None``. Elsewhere (Jupyter, VS Code) the
    server runs in the background for the rest of the kernel's life and this
    returns an ``IPython.display.IFrame`` of its page, which the notebook
    shows; the browser must run on the same machine as the kernel.

    Args:
        graph: As for `serve_model_explorer`.
        height: The frame's height in pixels.
        **serve: Other arguments of `serve_model_explorer` (``port``, ``node_data``...).
    """
    if _in_colab():
        serve_model_explorer(graph, open_browser=False, block=True, colab_height=height, **serve)
        return None
    from IPython.display import IFrame  # a dependency of Model Explorer

    url = serve_model_explorer(graph, open_browser=False, block=False, **serve)
    return IFrame(f"{url}&show_open_in_new_tab=1", width="100%", height=height)
