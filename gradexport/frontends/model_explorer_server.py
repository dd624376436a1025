"""Open a backward graph in Model Explorer's local web app, from Python, the command line or a notebook.

`serve_model_explorer` writes the graph as
`gradexport.formats.model_explorer` maps it, starts Model Explorer's own
server with it through Model Explorer's config API
(``model_explorer.config().add_model_from_path(...)`` and
``visualize_from_config``), bound to ``127.0.0.1``, and opens the browser
(or only prints the address). A graph comes with every node data it can
give (see `gradexport.formats.model_explorer.node_data_for`):
gradient norms from `gradexport.record_gradients`, the non-finite
marks of `gradexport.find_nonfinite`, saved bytes, execution order,
so the node data panel colours the graph at once.
`serve_model_explorer_diff` opens the two sides of a
`gradexport.diff` side by side, coloured by what changed.
`show_model_explorer` shows it inside a notebook: as Model Explorer
does itself in Colab, and as an inline frame on the local server in Jupyter.

Nothing leaves the machine: the web app is served from the installed
package, gradexport switches off the server's check for a newer Model
Explorer release (which would ask the package index and GitHub), and the
page is served without the web fonts it names (the browser draws with a
local font) and with a Content-Security-Policy that lets it load nothing but
from its own server.

Only the graph can be read. Model Explorer's own server answers
``/api/v1/read_text_file?path=...`` with any file the user can read, and
any ``Host``, so that a page on another site whose name is re-pointed at
127.0.0.1 (DNS rebinding) could read the user's files. gradexport's server
(`_Guard`, installed in Model Explorer's Flask app) refuses, with 403, a
request whose ``Host`` is not the server's own address, and
``read_text_file`` of any file but the graphs it serves; it refuses uploads
and adapter commands (``send_command``), which gradexport's graphs never need.

Examples:
    >>> from gradexport.frontends.model_explorer_server import free_port
    >>> 0 < free_port() < 65536
    True
"""

from __future__ import annotations

import atexit
import json
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
from urllib.parse import quote, unquote

import networkx as nx

from ..api.diff import Diffable, diff, load_graph
from ..core import temporaries
from ..core.collector import gc_paused
from ..core.errors import ArgumentValueError, MissingFileError, ServerError
from ..core.options import DiagramOptions
from ..core.source import GraphSource
from ..formats.model_explorer import EXTENSION, diff_panes, node_data_for, write_model_explorer
from ..formats.model_explorer.graph import model_explorer_package, node_namespace

__all__ = ["DIFF_GRAPH_IDS", "OPEN_LAYERS", "free_port", "serve_model_explorer", "serve_model_explorer_diff", "show_model_explorer"]

#: Graph ids of the two panes of `serve_model_explorer_diff` (Model Explorer needs them distinct).
DIFF_GRAPH_IDS = ("a", "b")

#: How long `serve_model_explorer` waits for a server it starts in the background.
START_TIMEOUT_S = 60

#: Characters that the web app would not escape in the query string it reads a file with.
_UNSAFE_IN_QUERY = re.compile(r"[&#%+?;]")

#: Model Explorer's answer to its version check when there is nothing to report.
_NO_NEW_VERSION = {"version": "", "runningVersion": "", "releaseUrl": "", "desktopAppUrl": ""}


def _temporary_folder() -> str:
    """A new temporary folder, removed by the command line's SIGINT and SIGTERM handler too."""
    with temporaries.lock():
        folder = tempfile.mkdtemp(prefix="gradexport-model-explorer-")
        temporaries.track(folder, folder=True)
    return folder


def _remove(folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    temporaries.untrack(folder)


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


#: The routes of Model Explorer's server that read or run what the request names; the graphs gradexport serves need none.
_REFUSED_ROUTES = ("/apipost/v1/upload", "/api/v1/send_command", "/apipost/v1/send_command", "/apipost/v1/update_config")
#: The routes that name a file in their ``path``: let through for the graphs only.
_FILE_ROUTES = ("/api/v1/read_text_file", "/api/v1/notify_user_provided_model_path")
# The @font-face rules and preconnect links of the web app's page that name a font on the internet.
_WEB_FONT = re.compile(r"@font-face\s*\{[^}]*https?://[^}]*\}|<link[^>]*https?://[^>]*>", re.IGNORECASE)
#: The page may load from its own server only ('unsafe-inline'/'unsafe-eval': the web app's own inline styles and its wasm).
CONTENT_SECURITY_POLICY = (
    "default-src 'self' 'unsafe-inline' 'unsafe-eval' data: blob:; connect-src 'self'; font-src 'self' data:; "
    "img-src 'self' data: blob:; worker-src 'self' blob:"  # no frame-ancestors: notebooks (Jupyter, VS Code) embed it
)


class _Guard:
    """What one server lets through: its own ``Host``, ``read_text_file`` of its graphs, the page without web fonts."""

    _current = threading.local()

    def __init__(self, host: str, port: int, graphs: list[str]):
        names = {host, "127.0.0.1", "localhost", "[::1]"} if host in ("127.0.0.1", "localhost", "::1") else {host}
        self.hosts = {f"{name}:{port}" for name in names}
        self.graphs = set(graphs)

    def check(self) -> Any:
        import flask

        request = flask.request
        if request.host not in self.hosts:
            return flask.Response(f"gradexport: refused: Host {request.host!r} is not this server's address\n", 403)
        if request.path in _REFUSED_ROUTES:
            return flask.Response("gradexport: refused: this server serves only its graphs\n", 403)
        if request.path in _FILE_ROUTES and request.args.get("path") not in self.graphs:
            return flask.Response("gradexport: refused: only the graphs this server was started with can be read\n", 403)
        if request.path in ("/", "/index.html"):
            page = model_explorer_package().server.OSS_WEB_APP_DIR
            text = _WEB_FONT.sub("", (Path(page) / "index.html").read_text(encoding="utf-8"))
            return flask.Response(text, 200, mimetype="text/html")
        return None

    @staticmethod
    def headers(response: Any) -> Any:
        response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
        return response


def _install_guard(model_explorer: Any) -> None:
    """Make Model Explorer's server build its Flask app with `_Guard` checks, for the servers gradexport starts.

    ``model_explorer.server.start`` builds ``flask.Flask(__name__)`` in the
    thread that calls it: that thread's `_Guard` (if any) is installed in it.
    """
    server = model_explorer.server
    if getattr(server.flask, "_gradexport_guarded", False):
        return
    import types

    import flask

    class GuardedFlask(flask.Flask):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            guard = getattr(_Guard._current, "guard", None)
            if guard is not None:
                self.before_request(guard.check)
                self.after_request(guard.headers)

    guarded = types.ModuleType("flask")
    guarded.__dict__.update(flask.__dict__)
    guarded.Flask = GuardedFlask  # type: ignore[attr-defined]
    guarded._gradexport_guarded = True  # type: ignore[attr-defined]
    server.flask = guarded


def _visualize_guarded(model_explorer: Any, guard: _Guard, arguments: Mapping[str, Any]) -> None:
    _Guard._current.guard = guard
    try:
        model_explorer.visualize_from_config(**arguments)
    finally:
        _Guard._current.guard = None


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
            to share the server (it serves only its graphs, and only to requests
            whose ``Host`` is its own address, but anyone who can reach it can read them).
        port: The port; ``None`` picks a free one.
        open_browser: Open the page in the default browser; otherwise only
            print its address.
        block: Serve until Ctrl+C, as Model Explorer's own ``visualize``
            does (the command line). ``False`` serves from a background
            thread for the rest of the Python process and returns once the
            server answers (a notebook).
        node_data: Node data to offer, by name (``ModelNodeData`` objects,
            their JSON text); by default every one the graph can give
            (`gradexport.formats.model_explorer.node_data_for`: gradient
            norms, non-finite marks, saved bytes, execution order, diff
            states), the most telling showing (not for a stream, which can be
            read only once).
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
    model_explorer = model_explorer_package()
    folder: str | None = None
    if isinstance(graph, (str, os.PathLike)):
        path = Path(graph).expanduser().resolve()
        if not path.is_file():
            raise MissingFileError(f"no Model Explorer graph file at {str(path)!r}")
        if path.suffix != ".json":
            raise ArgumentValueError(f"Model Explorer reads graphs from files ending in .json (as {EXTENSION}), not {path.name!r}")
        if _UNSAFE_IN_QUERY.search(str(path)):
            # The page asks the server for the file with its path in a query string, unescaped.
            folder = _temporary_folder()
            (Path(folder) / f"graph{EXTENSION}").symlink_to(path)
            path = Path(folder) / f"graph{EXTENSION}"
    else:
        folder = _temporary_folder()
        path = Path(folder) / f"graph{EXTENSION}"
        with gc_paused():
            write_model_explorer(graph, path, options, label=label)
        if node_data is None and isinstance(graph, nx.Graph):
            node_data = node_data_for(graph)
    port = _port(host, port)
    config = model_explorer.config().add_model_from_path(str(path))
    for name, data in (node_data or {}).items():
        config.add_node_data(name, data)
    return _serve(model_explorer, config, folder, host, port, open_browser, block, visualize)


def _port(host: str, port: int | None) -> int:
    if port is None:
        return free_port(host)
    if _port_in_use(host, port):
        raise ServerError(f"port {port} on {host} is in use: choose another, or port=None for a free one")
    return port


def _serve(model_explorer: Any, config: Any, folder: str | None, host: str, port: int, open_browser: bool, block: bool, visualize: Mapping[str, Any]) -> str:
    """Serve ``config`` as `serve_model_explorer` documents it; ``folder`` is removed when the server stops."""
    _offline(model_explorer)
    _install_guard(model_explorer)
    guard = _Guard(host, port, [source["url"] for source in config.model_sources])
    url = f"http://{host}:{port}/?data={config.to_url_param_value()}"
    arguments = dict(visualize, config=config, host=host, port=port, no_open_in_browser=not open_browser)
    if block and not _in_colab():
        try:
            _visualize_guarded(model_explorer, guard, arguments)
        finally:
            if folder is not None:
                _remove(folder)
        return url
    if folder is not None:  # the server reads it for as long as the process lives
        atexit.register(_remove, folder)
    if block:  # Colab: Model Explorer serves in the background and embeds its page in the cell
        model_explorer.visualize_from_config(**arguments)
        return url
    threading.Thread(target=_visualize_guarded, args=(model_explorer, guard, arguments), daemon=True).start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _answers(f"http://{host}:{port}/check_health"):
        if time.monotonic() > deadline:
            raise ServerError(f"Model Explorer's server did not answer on {host}:{port} within {START_TIMEOUT_S} s")
        time.sleep(0.1)
    return url


def serve_model_explorer_diff(
    a: Diffable,
    b: Diffable,
    *,
    labels: tuple[str, str] = ("a", "b"),
    merged: nx.MultiDiGraph | None = None,
    sync: bool = True,
    host: str = "127.0.0.1",
    port: int | None = None,
    open_browser: bool = True,
    block: bool = True,
    options: DiagramOptions | None = None,
    **visualize: Any,
) -> str:
    """Open two backward graphs side by side in Model Explorer, each coloured by what `gradexport.diff` found.

    Both graphs are written (as
    `gradexport.formats.model_explorer.diff_panes` makes them: each
    graph as it is, its nodes renamed to the diff's ids and marked) and the
    page opens in Model Explorer's split view: ``a`` on the left with its
    same, changed and removed nodes, ``b`` on the right with its same,
    changed and added ones. Each pane offers the node data of its graph
    (`gradexport.formats.model_explorer.node_data_for`), the
    ``diff`` states showing: grey same, orange changed, green added, red
    removed; the layers that hold changes open (at most
    `OPEN_LAYERS` in each pane). A matched node has the same id in both panes, and with
    ``sync`` Model Explorer's navigation sync ("match node id") selects and
    reveals a node's counterpart in the other pane.

    Args:
        a: The graph before: anything `gradexport.diff` takes (a
            graph, the path of a JSON file gradexport wrote, roots).
        b: The graph after.
        labels: The two collections' labels in Model Explorer's graph selector.
        merged: `gradexport.diff(a, b)`, when the caller has it already (it is not computed again).
        sync: Turn on navigation sync by node id.
        host: As for `serve_model_explorer`.
        port: As for `serve_model_explorer`.
        open_browser: As for `serve_model_explorer`.
        block: As for `serve_model_explorer`.
        options: Passed to the writer (only ``show_none`` applies).
        **visualize: Other arguments of ``model_explorer.visualize_from_config``.

    Returns:
        The page's address; its ``data`` holds both models, their node data
        and the two pane states.

    Raises:
        ModelExplorerNotInstalledError: Model Explorer is not installed.
        ValueError: the two labels are the same.
        OSError: ``port`` is in use.
        TimeoutError: with ``block=False``, the server did not answer in time.
    """
    model_explorer = model_explorer_package()
    if labels[0] == labels[1]:
        raise ArgumentValueError(f"the two panes need different labels, got {labels[0]!r} twice")
    graph_a, graph_b = load_graph(a, "a"), load_graph(b, "b")
    port = _port(host, port)
    panes = diff_panes(diff(graph_a, graph_b) if merged is None else merged, graph_a, graph_b)
    folder = _temporary_folder()
    config = _split_view_config(model_explorer, sync)
    try:
        for pane, label, graph_id in zip(panes, labels, DIFF_GRAPH_IDS):
            path = Path(folder) / f"{graph_id}{EXTENSION}"
            with gc_paused():
                write_model_explorer(pane, path, options, label=label, graph_id=graph_id)
            config.add_model_from_path(str(path))
            config.panes.append(_pane_state(label, graph_id, _changed_layers(pane)))
            for name, data in node_data_for(pane, graph_id=graph_id).items():
                config.add_node_data(f"{name} ({label})", data, model_name=label)
    except BaseException:
        _remove(folder)
        raise
    return _serve(model_explorer, config, folder, host, port, open_browser, block, visualize)


#: At most this many layers open in each pane of a diff (each is laid out when the page opens).
OPEN_LAYERS = 32


def _changed_layers(pane: nx.MultiDiGraph) -> list[str]:
    """Model Explorer's ids of the deepest layers holding a changed, added or removed node (at most `OPEN_LAYERS`)."""
    namespaces = {node_namespace(data) for _, data in pane.nodes(data=True) if data.get("diff", "same") != "same"}
    namespaces.discard("")
    deepest = sorted(name for name in namespaces if not any(other.startswith(name + "/") for other in namespaces))
    return [f"{name}___group___" for name in deepest[:OPEN_LAYERS]]


def _pane_state(label: str, graph_id: str, expanded: list[str]) -> dict[str, Any]:
    """One pane of Model Explorer's ``uiState`` (as its web app writes it into the page's address)."""
    return {
        "deepestExpandedGroupNodeIds": expanded,
        "selectedNodeId": "",
        "selectedGraphId": graph_id,
        "selectedCollectionLabel": label,
        "widthFraction": 0.5,
    }


def _split_view_config(model_explorer: Any, sync: bool) -> Any:
    """Model Explorer's config, with pane states (``config.panes``) and navigation sync in the page address it makes.

    The web app reads ``uiState.paneStates`` (two: the split view) and
    ``sync.mode`` from the ``data`` parameter, as in the addresses it writes
    itself; the Python config has no call for them, so its one method that
    makes the parameter (which ``visualize_from_config`` calls) adds them.
    """
    config = model_explorer.config()
    models_and_node_data = config.to_url_param_value
    config.panes = []

    def to_url_param_value() -> str:
        data = json.loads(unquote(models_and_node_data()))
        data["uiState"] = {"paneStates": config.panes}
        if sync:
            data["sync"] = {"mode": "match_node_id"}
        return quote(json.dumps(data))

    config.to_url_param_value = to_url_param_value
    return config


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
