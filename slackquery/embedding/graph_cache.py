"""Serialized ONNX graphs of the packaged models, kept on disk between processes.

Building a graph from the shipped weights (re-quantizing them to int8, writing every node
and initializer) takes ~0.28 s for e5 and ~0.13 s for MiniLM, which every new process
that embeds pays before its first vector: a cold `slackquery search` in hybrid mode, an
`ask`, each stdio MCP server, each Dask worker. The bytes depend only on what `key` names
(the weights' sha256, the engine, the onnxruntime version) and on the code that builds
them (`GRAPH_RECIPE`), so they are built once and read back after. A digest written beside
each graph is checked on every read; a graph that fails the check is rebuilt and rewritten,
and a folder that cannot be written costs only the rebuild.
"""

import hashlib
import logging
import os
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

# Raise when `onnx_bert.build_graph` or the weights it is given change in any way that
# changes the bytes: cached graphs of an older recipe are then never read again.
GRAPH_RECIPE = 1

log = logging.getLogger(__name__)


def cached_graph(folder: Path | None, key: Sequence[str], build: Callable[[], bytes]) -> bytes:
    """The graph `key` names, read from `folder` when a verified copy is there, else built
    by `build()` and stored (best effort). `folder` None: always built."""
    if folder is None:
        return build()
    name = hashlib.sha256("\0".join((str(GRAPH_RECIPE), *key)).encode()).hexdigest()[:32]
    path = folder / f"{name}.onnx"
    stored = _verified(path)
    if stored is not None:
        return stored
    graph = build()
    try:
        _store(path, graph)
    except OSError as error:
        log.debug("could not keep the built graph in %s: %s", folder, error)
    return graph


def _digest_path(path: Path) -> Path:
    return path.with_suffix(".sha256")


def _verified(path: Path) -> bytes | None:
    """The graph at `path` if its digest file names its bytes' sha256, else None."""
    try:
        graph = path.read_bytes()
        digest = _digest_path(path).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if hashlib.sha256(graph).hexdigest() != digest:
        log.debug("cached graph %s does not match its digest; rebuilding it", path)
        return None
    return graph


def _store(path: Path, graph: bytes) -> None:
    """Write the graph, then its digest, each by rename: a reader sees whole files, and a
    graph without its digest (or with another's) is rebuilt."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for target, content in (
        (path, graph),
        (_digest_path(path), hashlib.sha256(graph).hexdigest().encode("ascii")),
    ):
        temp = target.with_name(f".{target.name}.{uuid.uuid4().hex}")
        try:
            temp.write_bytes(content)
            os.replace(temp, target)
        finally:
            temp.unlink(missing_ok=True)
