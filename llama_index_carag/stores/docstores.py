"""Choosing the docstore of an index: LlamaIndex's in-memory ``SimpleDocumentStore``, DuckDB (embedded) or Redis.

The docstore holds the passages' text and metadata (the FAISS and simple vector stores keep only vectors).
LlamaIndex's ``SimpleDocumentStore`` is a dict in memory saved as one JSON file: ``persist`` rewrites every
passage.  The key-value docstores of the ecosystem write each node when it is added:

* ``"duckdb"``: ``DuckDBDocumentStore`` (``llama-index-storage-docstore-duckdb``, extra ``[duckdb]``) in a
  file beside the index (``docstore.duckdb``) or at ``duckdb:PATH``; one process opens it at a time.
* ``"redis://HOST:PORT[/DB][?namespace=NAME]"``: ``RedisDocumentStore`` (``llama-index-storage-docstore-redis``,
  extra ``[redis]``) on a Redis server, which several processes can open: one of them edits, the others read
  (each keeps its own vectors; docs/GUIDE.md, "Several processes").  Every edit made through the package moves
  the namespace's generation (:func:`docstore_generation`, checked and moved in one atomic step by
  :func:`advance_docstore_generation`), so a process can tell that another one edited the passages since it
  loaded them.

:func:`open_docstore` is the one door: a spec string, or any LlamaIndex ``BaseDocumentStore`` (returned as is).
A DuckDB or Redis store opened here is wrapped in a :class:`BatchingDocumentStore`, so that an insert writes
its nodes in one call rather than one per node, and reads many nodes in one query.  It remembers its spec:
``ContextAwareRetriever.persist(..., persist_index=True)`` writes it to ``carag_docstore.json``
(:func:`write_spec`, no credentials) and reloading opens the same store again (:func:`open_persisted_docstore`,
then the vector store's own ``load_index`` with it).

The vector side is saved by ``persist``; the docstore is written at every edit.  After a crash the two can
differ: :func:`reconcile_ids` says which nodes only one side knows, and
``ContextAwareRetriever.from_persist_dir`` brings the vector side (and the fitted context) in line with the
docstore, which is the record of what was inserted or deleted.
"""

from __future__ import annotations

import json
import logging
import os
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.storage.docstore.utils import json_to_doc

from llama_index_carag.stores.batching_docstore import BatchingDocumentStore, docstore_batch, docstore_replay

if TYPE_CHECKING:  # pragma: no cover
    pass

logger = logging.getLogger(__name__)

__all__ = [
    "SPEC_NAME",
    "DUCKDB_FILE",
    "DEFAULT_NAMESPACE",
    "DocstoreHandle",
    "BatchingDocumentStore",
    "docstore_batch",
    "docstore_replay",
    "open_docstore",
    "docstore_kind",
    "docstore_spec",
    "docstore_node_ids",
    "clear_docstore",
    "write_spec",
    "read_spec",
    "open_persisted_docstore",
    "reconcile_ids",
    "docstore_generation",
    "advance_docstore_generation",
    "GENERATION_SUFFIX",
]

#: The file in a persist dir that names its docstore (absent: the docstore is ``docstore.json``).
SPEC_NAME = "carag_docstore.json"
#: The DuckDB database file of ``"duckdb"`` in a persist dir.
DUCKDB_FILE = "docstore.duckdb"
#: The namespace (key prefix) the package gives the nodes in a key-value docstore.
DEFAULT_NAMESPACE = "carag"
#: The key, after ``<namespace>/``, of a Redis docstore's edit generation (:func:`docstore_generation`).
GENERATION_SUFFIX = "carag_generation"


@dataclass
class DocstoreHandle:
    """What the package knows of a docstore it opened: how to reopen it, list its node ids and clear it.

    Attributes:
        kind: ``"duckdb"`` or ``"redis"``.
        spec: JSON-safe description written to :data:`SPEC_NAME` (paths relative to the persist dir
            where they lie inside it; no password).
        node_ids: lists the ids of the stored nodes (keys only; no node is parsed).
        clear: deletes every node, hash and ref-doc entry of the namespace.
        generation: reads the namespace's edit generation (Redis; ``None`` where one process opens the store).
        advance: ``advance(expected)`` moves the generation from ``expected`` to ``expected + 1`` atomically;
            returns ``(True, new)``, or ``(False, current)`` when another writer moved it first.
    """

    kind: str
    spec: dict[str, Any]
    node_ids: Callable[[], set[str]] = field(repr=False)
    clear: Callable[[], None] = field(repr=False)
    generation: Callable[[], int] | None = field(default=None, repr=False)
    advance: Callable[[int], tuple[bool, int]] | None = field(default=None, repr=False)


_HANDLES: weakref.WeakKeyDictionary[Any, DocstoreHandle] = weakref.WeakKeyDictionary()


def _collections(namespace: str) -> tuple[str, ...]:
    # The collections of LlamaIndex's DuckDB/Redis docstores: nodes under "<ns>/doc" (their own suffix, kept
    # apart from an index store's "<ns>/data"), hashes under "<ns>/metadata", documents under "<ns>/ref_doc_info".
    return f"{namespace}/doc", f"{namespace}/metadata", f"{namespace}/ref_doc_info"


def _duckdb_connection(path: Path) -> Any:
    """A DuckDB connection to ``path`` on which the kvstore's ``INSTALL json`` needs no download.

    ``DuckDBKVStore`` runs ``INSTALL json`` on its connection, which downloads the extension even though the
    duckdb wheel has it built in (and then fails offline).  Where JSON is built in, the connection's extension
    folder (a cache folder of the package) holds an empty marker file, so that ``INSTALL`` is a no-op and
    ``LOAD`` finds the built-in extension loaded; elsewhere ``INSTALL`` downloads it as usual.
    """
    import duckdb

    probe = duckdb.connect()
    try:
        query = "SELECT loaded FROM duckdb_extensions() WHERE extension_name = 'json'"
        built_in = probe.execute(query).fetchone() == (True,)
        platform = probe.execute("SELECT platform FROM pragma_platform()").fetchone()
    finally:
        probe.close()
    config: dict[str, Any] = {}
    if built_in and platform:
        folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "llama_index_carag" / "duckdb"
        marker = folder / f"v{duckdb.__version__}" / str(platform[0]) / "json.duckdb_extension"
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
            config["extension_directory"] = str(folder)
        except OSError as exc:  # a read-only home: INSTALL downloads (or fails offline, saying why)
            logger.warning("Cannot write the DuckDB extension marker %s (%s).", marker, exc)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        return duckdb.connect(str(path), config=config)
    except duckdb.IOException as exc:
        if "lock" not in str(exc).lower():
            raise
        from llama_index_carag.core.writer_lock import IndexBusyError

        first = (str(exc).splitlines() or [""])[0]
        raise IndexBusyError(
            f"The DuckDB docstore {path} is open in another process ({first}). DuckDB lets one process open it, "
            "readers included: serve or edit it from that process, or use a Redis docstore where several "
            "processes read one index (docs/GUIDE.md, Several processes)."
        ) from None


def _open_duckdb(path: Path, namespace: str, persist_dir: Path | None) -> BaseDocumentStore:
    try:
        from llama_index.storage.docstore.duckdb import DuckDBDocumentStore
        from llama_index.storage.kvstore.duckdb import DuckDBKVStore
    except ImportError:
        raise ImportError(
            "The DuckDB docstore needs llama-index-storage-docstore-duckdb: pip install 'llama-index-carag[duckdb]'."
        ) from None
    path = path.resolve()
    conn = _duckdb_connection(path)
    kvstore = DuckDBKVStore(database_name=path.name, persist_dir=str(path.parent), client=conn)
    nodes, *_ = collections = _collections(namespace)
    table = kvstore.table_name

    def get_many(ids: list[str]) -> dict[str, BaseNode]:
        # the ids as an Arrow table joined in SQL (a list parameter costs DuckDB a type probe per element)
        import pyarrow

        conn = kvstore.client
        conn.register("carag_wanted_ids", pyarrow.table({"key": pyarrow.array(ids, type=pyarrow.string())}))
        try:
            query = (
                f"SELECT t.key, t.value FROM {table} AS t JOIN carag_wanted_ids AS w ON t.key = w.key "
                "WHERE t.collection = ?"
            )
            rows = conn.execute(query, [nodes]).fetchall()
        finally:
            conn.unregister("carag_wanted_ids")
        return {str(key): json_to_doc(json.loads(value)) for key, value in rows}

    store = BatchingDocumentStore(DuckDBDocumentStore(kvstore, namespace=namespace), get_many)

    def node_ids() -> set[str]:
        rows = kvstore.client.execute(f"SELECT key FROM {table} WHERE collection = ?", [nodes]).fetchall()
        return {str(r[0]) for r in rows}

    def clear() -> None:
        marks = ", ".join("?" for _ in collections)
        kvstore.client.execute(f"DELETE FROM {table} WHERE collection IN ({marks})", list(collections))

    where = path
    if persist_dir is not None and path.is_relative_to(persist_dir.resolve()):
        where = path.relative_to(persist_dir.resolve())
    spec = {"kind": "duckdb", "path": str(where), "namespace": namespace}
    _HANDLES[store] = DocstoreHandle("duckdb", spec, node_ids, clear)
    logger.info("DuckDB docstore %s (namespace %r)", path, namespace)
    return store


#: Moves ``KEYS[1]`` from ``ARGV[1]`` to ``ARGV[1] + 1`` in one step: the new value, or ``-1 - current`` when it
#: is not ``ARGV[1]`` (another writer edited first).
_ADVANCE_SCRIPT = """
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if current ~= tonumber(ARGV[1]) then return -1 - current end
return redis.call('INCR', KEYS[1])
"""


def _redis_generation(client: Any, key: str) -> tuple[Callable[[], int], Callable[[int], tuple[bool, int]]]:
    """The namespace's edit generation: a counter every package edit moves by one, checked and moved atomically."""

    def generation() -> int:
        value = client.get(key)
        return int(value) if value is not None else 0

    def advance(expected: int) -> tuple[bool, int]:
        result = int(client.eval(_ADVANCE_SCRIPT, 1, key, int(expected)))
        return (True, result) if result >= 0 else (False, -1 - result)

    return generation, advance


def _open_redis(url: str, namespace: str) -> BaseDocumentStore:
    try:
        from llama_index.storage.docstore.redis import RedisDocumentStore
        from llama_index.storage.kvstore.redis import RedisKVStore
        from redis import Redis
        from redis.asyncio import Redis as AsyncRedis
    except ImportError:
        raise ImportError(
            "The Redis docstore needs llama-index-storage-docstore-redis: pip install 'llama-index-carag[redis]'."
        ) from None
    client = Redis.from_url(url)
    kvstore = RedisKVStore(redis_client=client, async_redis_client=AsyncRedis.from_url(url))
    collections = _collections(namespace)

    def get_many(ids: list[str]) -> dict[str, BaseNode]:
        values: list[Any] = client.hmget(collections[0], ids) if ids else []  # type: ignore[assignment]
        return {i: json_to_doc(json.loads(v)) for i, v in zip(ids, values) if v is not None}

    store = BatchingDocumentStore(RedisDocumentStore(kvstore, namespace=namespace), get_many, write_batch_size=1000)

    def node_ids() -> set[str]:
        keys: list[Any] = client.hkeys(collections[0])  # type: ignore[assignment]  # the sync client's list
        return {k.decode() if isinstance(k, bytes) else str(k) for k in keys}

    generation_key = f"{namespace}/{GENERATION_SUFFIX}"
    generation, advance = _redis_generation(client, generation_key)

    def clear() -> None:
        client.delete(*collections)
        client.incr(generation_key)  # never reset: a process that loaded the old corpus must see a change

    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host  # no user name or password in the saved spec
    spec = {"kind": "redis", "url": urlunsplit((parts.scheme, netloc, parts.path, "", "")), "namespace": namespace}
    _HANDLES[store] = DocstoreHandle("redis", spec, node_ids, clear, generation, advance)
    logger.info("Redis docstore %s (namespace %r)", spec["url"], namespace)
    return store


def open_docstore(
    docstore: str | BaseDocumentStore | None = None,
    persist_dir: str | os.PathLike[str] | None = None,
    *,
    namespace: str | None = None,
) -> BaseDocumentStore:
    """Open the docstore an index is built or loaded with.

    Args:
        docstore: ``None`` or ``"simple"`` (a new ``SimpleDocumentStore``), ``"duckdb"`` (``docstore.duckdb``
            in ``persist_dir``), ``"duckdb:PATH"``, ``"redis://HOST:PORT[/DB][?namespace=NAME]"`` (also
            ``rediss://``), or a LlamaIndex ``BaseDocumentStore`` (returned as is).
        persist_dir: the index folder (needed by ``"duckdb"``; a relative ``duckdb:PATH`` is taken from it).
        namespace: key prefix in a key-value docstore (default the URL's ``namespace``, else ``"carag"``).

    Raises:
        ValueError: an unknown spec, or ``"duckdb"`` without ``persist_dir``.
        ImportError: the store's package is not installed (extras ``[duckdb]``, ``[redis]``).
    """
    from llama_index.core.storage.docstore.simple_docstore import SimpleDocumentStore

    if isinstance(docstore, BaseDocumentStore):
        return docstore
    spec = (docstore or "simple").strip()
    folder = Path(persist_dir) if persist_dir is not None else None
    if spec == "simple":
        return SimpleDocumentStore()
    if spec == "duckdb" or spec.startswith("duckdb:"):
        raw = spec.partition(":")[2]
        if not raw and folder is None:
            raise ValueError("The 'duckdb' docstore lies in the index folder; give persist_dir (or 'duckdb:PATH').")
        path = Path(raw) if raw else Path(DUCKDB_FILE)
        if not path.is_absolute() and folder is not None:
            path = folder / path
        return _open_duckdb(path, namespace or DEFAULT_NAMESPACE, folder)
    if spec.startswith(("redis://", "rediss://", "unix://")):
        query = parse_qs(urlsplit(spec).query)
        ns = namespace or (query.get("namespace") or [DEFAULT_NAMESPACE])[0]
        parts = urlsplit(spec)
        url = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
        return _open_redis(url, ns)
    raise ValueError(
        f"Unknown docstore {docstore!r}: use 'simple', 'duckdb', 'duckdb:PATH', 'redis://HOST:PORT[/DB]' "
        "or a LlamaIndex BaseDocumentStore."
    )


def docstore_generation(docstore: BaseDocumentStore) -> int | None:
    """The edit generation of a docstore several processes can write (Redis: every edit made through the package
    moves it by one); ``None`` for the others (in memory, or DuckDB, which one process opens at a time)."""
    handle = _HANDLES.get(docstore)
    return None if handle is None or handle.generation is None else handle.generation()


def advance_docstore_generation(docstore: BaseDocumentStore, expected: int) -> tuple[bool, int] | None:
    """Claim the next edit of a shared docstore: ``(True, expected + 1)`` when its generation was ``expected``
    (moved in one atomic step), ``(False, current)`` when another writer edited it since; ``None`` for a store
    without a generation (:func:`docstore_generation`)."""
    handle = _HANDLES.get(docstore)
    return None if handle is None or handle.advance is None else handle.advance(expected)


def docstore_kind(docstore: BaseDocumentStore) -> str:
    """``"simple"``, ``"duckdb"``, ``"redis"`` (opened by :func:`open_docstore`) or the store's class name."""
    from llama_index.core.storage.docstore.simple_docstore import SimpleDocumentStore

    handle = _HANDLES.get(docstore)
    if handle is not None:
        return handle.kind
    return "simple" if type(docstore) is SimpleDocumentStore else type(docstore).__name__


def docstore_spec(docstore: BaseDocumentStore) -> dict[str, Any] | None:
    """The spec :func:`write_spec` saves for a store opened by :func:`open_docstore`; ``None`` for others."""
    handle = _HANDLES.get(docstore)
    return None if handle is None else dict(handle.spec)


def docstore_node_ids(docstore: BaseDocumentStore) -> set[str]:
    """The ids of the nodes a docstore holds: read from the keys for DuckDB and Redis (no node is parsed),
    from ``docs`` for any other store."""
    handle = _HANDLES.get(docstore)
    if handle is not None:
        return handle.node_ids()
    return set(docstore.docs)


def clear_docstore(docstore: BaseDocumentStore) -> None:
    """Delete every node of a docstore (its namespace only, for DuckDB and Redis)."""
    handle = _HANDLES.get(docstore)
    if handle is not None:
        handle.clear()
        return
    for node_id in list(docstore.docs):
        docstore.delete_document(node_id, raise_error=False)


def write_spec(persist_dir: str | os.PathLike[str], docstore: BaseDocumentStore) -> Path | None:
    """Record in ``persist_dir`` the docstore an index was saved with (nothing, and no spec left, for
    ``SimpleDocumentStore``, which ``persist`` saves as ``docstore.json``).

    Raises:
        ValueError: a docstore this module did not open and that is not a ``SimpleDocumentStore`` (reload such an
            index with ``load_persisted_index(..., docstore=...)`` and pass it as ``index=``).
    """
    from llama_index_carag.core.atomic import atomic_write_bytes

    folder = Path(persist_dir)
    spec = docstore_spec(docstore)
    if spec is None:
        (folder / SPEC_NAME).unlink(missing_ok=True)  # a spec left from an earlier build would name another store
        if docstore_kind(docstore) != "simple":
            logger.warning(
                "The %s docstore is not recorded in %s; reload with load_persisted_index(..., docstore=...).",
                type(docstore).__name__,
                folder,
            )
        return None
    target = folder / SPEC_NAME
    atomic_write_bytes(target, json.dumps(spec, indent=1, sort_keys=True).encode("utf-8"))
    return target


def read_spec(persist_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The docstore spec saved in ``persist_dir``; ``None`` when it has none (a ``docstore.json`` index)."""
    path = Path(persist_dir) / SPEC_NAME
    if not path.is_file():
        return None
    spec = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(spec, dict) or "kind" not in spec:
        raise ValueError(f"{path} does not name a docstore.")
    return spec


def open_persisted_docstore(persist_dir: str | os.PathLike[str]) -> BaseDocumentStore | None:
    """Open the docstore recorded in ``persist_dir`` (``None`` when it has none).

    Raises:
        ValueError: an unknown kind in the spec.
    """
    spec = read_spec(persist_dir)
    if spec is None:
        return None
    kind, namespace = spec["kind"], str(spec.get("namespace") or DEFAULT_NAMESPACE)
    if kind == "duckdb":
        return open_docstore(f"duckdb:{spec['path']}", persist_dir, namespace=namespace)
    if kind == "redis":
        return open_docstore(str(spec["url"]), persist_dir, namespace=namespace)
    raise ValueError(f"{Path(persist_dir) / SPEC_NAME} names an unknown docstore kind {kind!r}.")


def reconcile_ids(vector_ids: set[str], docstore: BaseDocumentStore) -> tuple[list[str], list[str]]:
    """``(only in the docstore, only on the vector side)``, each sorted: the nodes a crash left on one side."""
    stored = docstore_node_ids(docstore)
    return sorted(stored - vector_ids), sorted(vector_ids - stored)
