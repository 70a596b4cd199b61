"""``bench locomo``'s ``postgresstore`` method: LangGraph's ``PostgresStore`` (pgvector, its
default index: HNSW, cosine) with the index config and embeddings ``inmemorystore`` uses, and
the server it runs against (``--postgres URL``, else one started with pgserver)."""

from __future__ import annotations

import tempfile
import warnings
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from .retriever import Retriever

#: ``--postgres`` defaults to this variable's URL.
POSTGRES_URL_VAR = "MEMBRAIN_BENCH_POSTGRES_URL"
#: postgresstore's tables lie in this schema, dropped and made afresh at the start of each run
#: and dropped at its end (so reruns are independent and a server of yours keeps nothing).
POSTGRES_SCHEMA = "membrain_bench_locomo"


class PostgresStoreRetriever(Retriever):
    """LangGraph's ``PostgresStore`` (pgvector; its default index: HNSW, cosine) with the index
    config and embeddings of :class:`InMemoryStoreRetriever`; one store (one connection) per
    conversation, in its namespace, the tables shared by the run in :data:`POSTGRES_SCHEMA`.
    :meth:`close` closes the connection. ``conv``: a ``locomo.Conversation``."""

    def __init__(self, conv: Any, embs: np.ndarray, lookup: Callable[[Sequence[str]], list[list[float]]],
                 url: str):
        from langgraph.store.postgres import PostgresStore
        from psycopg.conninfo import make_conninfo

        self.ns = ("locomo", conv.sample_id)
        self._resources = ExitStack()
        try:
            conninfo = make_conninfo(url, options=f"-c search_path={POSTGRES_SCHEMA},public")
            self.store = self._resources.enter_context(PostgresStore.from_conn_string(
                conninfo, index={"dims": embs.shape[1], "embed": lookup, "fields": ["text"]}))
            self.store.setup()  # the first conversation's makes the tables (and pgvector); later ones find them
            for t in conv.turns:
                self.store.put(self.ns, t.dia_id, {"text": t.text, "speaker": t.speaker})
        except BaseException:
            self._resources.close()
            raise

    def search(self, q: str, k: int) -> list[str]:
        return [item.key for item in self.store.search(self.ns, query=q, limit=k)]

    def close(self) -> None:
        self._resources.close()


@contextmanager
def bench_postgres(url: str | None, log: Callable[[str], None] = print) -> Iterator[str | None]:
    """The PostgreSQL URL postgresstore runs against, its schema :data:`POSTGRES_SCHEMA` fresh:
    ``url``, else a server started here with pgserver (stopped and deleted on exit). Yields
    ``None``, after logging why, when ``langgraph.store.postgres`` is missing or no server
    can be had."""
    try:
        import psycopg
        from langgraph.store.postgres import PostgresStore  # noqa: F401
    except ImportError as exc:
        log(f"postgresstore skipped: {exc} (pip install 'langchain-membrain[pgstore]')")
        yield None
        return
    with ExitStack() as resources:
        if not url:
            url = _start_pgserver(resources, log)
            if url is None:
                yield None
                return
        why = None
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
                if conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone() is None:
                    why = "the PostgreSQL server has no pgvector (the extension 'vector' is not installed there)"
                else:
                    conn.execute(f"DROP SCHEMA IF EXISTS {POSTGRES_SCHEMA} CASCADE")
                    conn.execute(f"CREATE SCHEMA {POSTGRES_SCHEMA}")
        except psycopg.Error as exc:
            why = f"could not make the schema {POSTGRES_SCHEMA} on the PostgreSQL server: {exc}"
        if why:
            log(f"postgresstore skipped: {why}")
            yield None
            return
        try:
            yield url
        finally:
            try:
                with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
                    conn.execute(f"DROP SCHEMA IF EXISTS {POSTGRES_SCHEMA} CASCADE")
            except psycopg.Error as exc:
                log(f"postgresstore: could not drop the schema {POSTGRES_SCHEMA}: {exc}")


def _start_pgserver(resources: ExitStack, log: Callable[[str], None]) -> str | None:
    """A PostgreSQL 16 server with pgvector from the ``pgserver`` wheel (the ``dev`` extra),
    its data in a new temp folder; its stop and the folder's deletion go on ``resources``."""
    try:
        with warnings.catch_warnings():  # platformdirs warns on import where XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            import pgserver
    except ImportError:
        log(f"postgresstore skipped: no PostgreSQL URL (--postgres or ${POSTGRES_URL_VAR}) and no pgserver "
            "to start one (pip install pgserver; CPython 3.12 at most)")
        return None
    import shutil

    folder = tempfile.mkdtemp(prefix="membrain-pg-")  # short: the server's socket lies in it
    resources.callback(shutil.rmtree, folder, ignore_errors=True)
    try:
        server = pgserver.get_server(Path(folder) / "data", cleanup_mode="stop")
    except Exception as exc:
        log(f"postgresstore skipped: pgserver could not start PostgreSQL: {exc!r}")
        return None
    resources.callback(server.cleanup)
    log(f"postgresstore: started PostgreSQL with pgserver in {folder}")
    return str(server.get_uri())
