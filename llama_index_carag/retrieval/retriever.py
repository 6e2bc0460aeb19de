"""``ContextAwareRetriever``: CARAG and CARAG-u as a LlamaIndex retriever.

For a query (a claim) the retriever

1. embeds it with the index's embed model (once) and checks and normalises the vector (once);
2. finds its thematic cluster and builds its Subset of Interest from the
   corpus embeddings stored at fit time (nothing is re-embedded per query);
3. averages the SOI items into the thematic embedding ``T``;
4. searches the index's vector store with ``alpha * q + (1 - alpha) * T`` (or, with
   ``rerank_candidates``, with ``q``, and re-ranks the candidates in
   :class:`~llama_index_carag.ranking.stage.RerankStage`);
5. returns the top-k evidence nodes, each a copy carrying
   ``metadata["carag"]`` — the provenance of its selection.

``alpha=1`` is plain RAG and returns exactly what
``index.as_retriever(similarity_top_k=k)`` returns.  An empty SOI falls back to
the claim vector and says so (``fallback=True``).

Settings are one frozen :class:`~llama_index_carag.settings.CaragSettings`; fitting
lives in :mod:`llama_index_carag.retrieval.fitting`, persistence in
:mod:`llama_index_carag.retrieval.state`, corpus edits in :mod:`llama_index_carag.retrieval.updates`.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import llama_index.core.instrumentation as instrument
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle

from llama_index_carag.core.context import ThematicContext
from llama_index_carag.core.soi import SubsetOfInterest
from llama_index_carag.core.writer_lock import reading
from llama_index_carag.datasets import CLAIM_KEY, THEME_KEY
from llama_index_carag.ranking.assembly import default_sources, settings_scorers, term_details
from llama_index_carag.ranking.sources import CandidateSource
from llama_index_carag.ranking.stage import CARAG_METADATA_KEY, RerankStage, Scorer
from llama_index_carag.retrieval import query_plan, updates
from llama_index_carag.retrieval.fitted_corpus import FittedCorpus
from llama_index_carag.retrieval.fitting import fit_corpus
from llama_index_carag.retrieval.query_plan import Found, asearch_candidates, candidate_pool, search_candidates
from llama_index_carag.retrieval.shared_index import load_stamp, shared_index_of
from llama_index_carag.settings import FIT_FIELDS, PAPER, CaragSettings, SettingsView, package_default
from llama_index_carag.stores.vector_stores import adapter_for

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core import VectorStoreIndex
    from llama_index.core.base.embeddings.base import BaseEmbedding

logger = logging.getLogger(__name__)
dispatcher = instrument.get_dispatcher(__name__)

__all__ = ["ContextAwareRetriever", "CARAG_METADATA_KEY", "STATE_SUBDIR"]

#: Sub-folder of a persist dir that holds the retriever's state.
STATE_SUBDIR = "carag"


class ContextAwareRetriever(SettingsView, BaseRetriever):
    """Context-aware evidence retriever (CARAG / CARAG-u) over a ``VectorStoreIndex``.

    Build it with :meth:`from_index` (or :meth:`from_defaults` from nodes), use
    it wherever a LlamaIndex retriever goes, and save it with :meth:`persist`.
    Every option is a field of :class:`CaragSettings` (read them as ``retriever.settings``
    or ``retriever.alpha``, …); change them with :meth:`with_settings`.

    Args:
        index: the vector index holding the evidence.
        corpus: the fitted corpus of that index (:func:`~llama_index_carag.retrieval.fitting.fit_corpus`).
        settings: the options (default: the papers').
        embed_model: embeds queries; default the index's own.
        sources: candidate sources (default: the index's dense search,
            :class:`~llama_index_carag.ranking.sources.DenseSource`).
        scorers: extra scorers (besides claim and thematic similarity and the registered re-ranking terms
            the settings switch on), each weighted by its own ``weight(settings, query)``.
    """

    def __init__(
        self,
        index: VectorStoreIndex,
        corpus: FittedCorpus,
        settings: CaragSettings | None = None,
        *,
        embed_model: BaseEmbedding | None = None,
        sources: Sequence[CandidateSource] | None = None,
        scorers: Sequence[Scorer] = (),
        callback_manager: CallbackManager | None = None,
        object_map: dict | None = None,
        verbose: bool = False,
    ) -> None:
        if not isinstance(corpus, FittedCorpus):
            raise TypeError(
                "ContextAwareRetriever needs a FittedCorpus; build it with ContextAwareRetriever.from_index(...)."
            )
        if index is not corpus.index:
            raise ValueError(
                "The corpus was fitted on another index: build it with ContextAwareRetriever.from_index(...)."
            )
        self._index = index
        self._corpus = corpus
        self._settings = settings if settings is not None else PAPER.replace(mode=corpus.context.mode)
        if self._settings.mode != corpus.context.mode:
            raise ValueError(
                f"settings.mode is {self._settings.mode!r} but the corpus was fitted {corpus.context.mode!r}."
            )
        corpus.fit_tables(self._settings)  # no-op when the tables are fitted already
        self._embed_model = embed_model or index._embed_model  # the index's model
        self._custom_sources = sources is not None
        self._sources = list(sources) if sources is not None else self._default_sources()
        self._extra_scorers = list(scorers)
        self._stage = RerankStage(self._settings, self._scorers())
        self._seen_size = updates.store_size(index)
        self._calibration_info = self._calibration_summary()
        self._shared = shared_index_of(index)  # the folder and docstore it shares with other processes
        super().__init__(callback_manager=callback_manager, object_map=object_map, verbose=verbose)

    def _default_sources(self) -> list[CandidateSource]:
        corpus, native = self._corpus, adapter_for(self._index).native_async()
        return default_sources(
            self._index, self._embed_model, corpus, corpus.tables, self._settings, native_async=native
        )

    def _calibration_summary(self) -> dict[str, Any] | None:
        """The corpus's calibration summary when this retriever runs its calibrated settings, else ``None``."""
        calibration = self._corpus.calibration
        return calibration.summary() if calibration is not None and calibration.settings == self._settings else None

    def _scorers(self) -> list[Scorer]:
        return settings_scorers(self._settings, self._corpus.tables, self._sources) + self._extra_scorers

    # -------------------------------------------------------------- settings
    @property
    def settings(self) -> CaragSettings:
        """The retriever's options (frozen)."""
        return self._settings

    def with_settings(self, settings: CaragSettings | None = None, /, **changes: Any) -> ContextAwareRetriever:
        """A retriever with other settings over the same index.

        Query options share this retriever's fitted corpus (tables the new settings need,
        such as the claim-contrast table, are fitted now); a change of a clustering
        option (``mode``, ``n_clusters``, ``random_state``, ``covariance_type``) refits.
        """
        new = CaragSettings.from_options(settings if settings is not None else self._settings, **changes)
        corpus = self._corpus
        if any(getattr(new, f) != getattr(self._settings, f) for f in FIT_FIELDS):
            corpus = updates.refit_corpus(self._index, corpus, new, self._embed_model)
        return type(self)(
            self._index,
            corpus,
            new,
            embed_model=self._embed_model,
            sources=self._sources_if_custom(),
            scorers=self._extra_scorers,
            callback_manager=self.callback_manager,
            verbose=self._verbose,
        )

    def _sources_if_custom(self) -> list[CandidateSource] | None:
        return self._sources if self._custom_sources else None

    @property
    def context(self) -> ThematicContext:
        """The fitted thematic context (clusters and SOI builder)."""
        return self._corpus.context

    @property
    def corpus(self) -> FittedCorpus:
        """The fitted corpus (context, claims, per-passage tables)."""
        return self._corpus

    @property
    def stage(self) -> RerankStage:
        """The re-ranking stage (shared with :class:`ThematicContextPostprocessor`)."""
        return self._stage

    @property
    def theme_key(self) -> str:
        return self._corpus.theme_key

    @property
    def claim_key(self) -> str:
        return self._corpus.claim_key

    @property
    def index(self) -> VectorStoreIndex:
        return self._index

    @property
    def embed_model(self) -> BaseEmbedding:
        return self._embed_model

    # --------------------------------------------------------------- building
    @classmethod
    def from_index(
        cls,
        index: VectorStoreIndex,
        settings: CaragSettings | str | None = None,
        *,
        claim_nodes: Sequence[BaseNode] | None = None,
        embed_model: BaseEmbedding | None = None,
        theme_key: str = THEME_KEY,
        claim_key: str = CLAIM_KEY,
        clusterer_params: dict[str, Any] | None = None,
        show_progress: bool = False,
        calibrate: bool = False,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
        **options: Any,
    ) -> ContextAwareRetriever:
        """Fit the thematic clustering on an index's stored embeddings.

        Args:
            index: a ``VectorStoreIndex`` of evidence nodes (FAISS, simple store or Qdrant).
            settings: a :class:`CaragSettings` or a preset name (``"default"``, ``"paper"``,
                ``"tuned"``); default :data:`~llama_index_carag.settings.DEFAULT` (the hybrid
                pool with claim contrast; without ``claim_nodes`` its claim contrast is off).
                ``"paper"`` is the papers' CARAG-u/CARAG exactly.
            claim_nodes: the corpus's claims as ``TextNode``s with the same metadata
                keys; required in supervised mode, optional (clustered with the
                evidence) in unsupervised mode.  Embedded once with the index's
                model unless they carry embeddings.  If they are also in the
                index they are never returned as evidence.
            embed_model: query/claim embed model; default the index's.
            theme_key, claim_key: metadata keys of the theme and of the claim an
                evidence passage is annotated for.
            clusterer_params: more :class:`ThematicClusterer` arguments.
            show_progress: progress bars while embedding claims and clustering.
            calibrate: choose the stage's weights for this corpus by leave-one-out over the claims
                that carry linked evidence (:mod:`~llama_index_carag.retrieval.calibration`; links from
                ``claim.metadata["evidence_ids"]`` or the evidence's ``claim_key``); the resolved
                settings are the starting point and are kept when too few claims are linked or no
                candidate gains.  Persisted, and run again by :meth:`refit`.
            **options: any :class:`CaragSettings` field (``mode``, ``alpha``, ``delta``,
                ``n_clusters``, ``rerank_candidates``, …), applied on top of ``settings``.

        Raises:
            ValueError / TypeError: invalid options, an empty index, nodes
                without embeddings, dimension mismatches, NaN vectors, or
                supervised mode with nodes lacking ``theme_key``.
        """
        resolved = CaragSettings.from_options(package_default(settings, bool(claim_nodes)), **options)
        embed_model = embed_model or index._embed_model
        corpus = fit_corpus(
            index,
            claim_nodes,
            resolved,
            embed_model=embed_model,
            theme_key=theme_key,
            claim_key=claim_key,
            clusterer_params=clusterer_params,
            show_progress=show_progress,
        )
        if calibrate:
            from llama_index_carag.retrieval.calibration import calibrate_corpus

            corpus.calibration = calibrate_corpus(
                index, corpus, resolved, claim_nodes=claim_nodes, embed_model=embed_model, show_progress=show_progress
            )
            resolved = corpus.calibration.settings
        return cls(index, corpus, resolved, embed_model=embed_model, callback_manager=callback_manager, verbose=verbose)

    @classmethod
    def from_defaults(
        cls,
        nodes: Sequence[BaseNode],
        *,
        claim_nodes: Sequence[BaseNode] | None = None,
        embed_model: str | BaseEmbedding | None = "minilm",
        id_map: bool = False,
        show_progress: bool = False,
        **kwargs: Any,
    ) -> ContextAwareRetriever:
        """Embed ``nodes`` into a new FAISS ``IndexFlatIP`` index and fit on it.

        Args:
            nodes: evidence nodes.
            claim_nodes: the claims (see :meth:`from_index`).
            embed_model: ``"minilm"`` (offline default), ``"mpnet"``, a hub id/path,
                or a :class:`BaseEmbedding`.
            id_map: use a delete-capable ``FaissMapVectorStore``.
            **kwargs: passed to :meth:`from_index` (``settings=`` and the options).
        """
        from llama_index_carag.models.resolve import resolve_embed_model
        from llama_index_carag.retrieval.indexing import build_faiss_index

        model = resolve_embed_model(embed_model)
        index = build_faiss_index(nodes, model, id_map=id_map, show_progress=show_progress)
        return cls.from_index(index, claim_nodes=claim_nodes, embed_model=model, show_progress=show_progress, **kwargs)

    # ---------------------------------------------------------------- queries
    def _plan(
        self, query_str: str, embedding: list[float], *, include_texts: bool = False
    ) -> tuple[query_plan.QueryPlan, Found | None]:
        return query_plan.plan_and_search(
            self._settings, self.context, self._sources, query_str, embedding, include_texts=include_texts
        )

    def _rank(self, found: Found, plan: query_plan.QueryPlan) -> list[NodeWithScore]:
        pool = candidate_pool(found, plan, self.context, self._corpus.nodes)
        extra: dict[str, Any] = {"reranked": plan.rerank}
        if self._calibration_info is not None:
            extra["calibration"] = dict(self._calibration_info)
        # the active terms' own provenance (BM25's raw score and rank)
        details = term_details(self._settings, self._sources, pool, plan.query, plan.n) if plan.rerank else None
        out = self._stage.rank(
            pool,
            plan.query,
            rerank=plan.rerank,
            limit=self._settings.similarity_top_k,
            dedupe=self._settings.dedupe,
            extra=extra if details is None else lambda row: {**extra, **details(row)},
        )
        if self._verbose:
            logger.info(
                "CARAG query %r: cluster %s, SOI %d items%s, %d nodes",
                plan.query.query_str[:80],
                plan.query.query_cluster,
                plan.query.soi_size,
                " (fallback to claim vector)" if plan.query.fallback else "",
                len(out),
            )
        return out

    @dispatcher.span
    def build_soi(self, query: str | QueryBundle, *, claim_id: str | None = None) -> SubsetOfInterest:
        """The Subset of Interest of a claim (embeds it with the index's model).

        Args:
            query: the claim text or a ``QueryBundle`` (its ``embedding`` is used if set).
            claim_id: mark the query as this corpus claim (else found by exact text match).
        """
        bundle = query_plan.check_bundle(QueryBundle(query_str=query) if isinstance(query, str) else query)
        q = query_plan.checked_vector(query_plan.query_embedding(self._embed_model, bundle), self.context.dim_)
        s = self._settings
        return self.context.build_soi(
            q,
            s.delta,
            claim=bundle.query_str,
            claim_id=claim_id,
            top_m=s.soi_top_m,
            min_size=s.soi_min_size,
            n_related_claims=s.soi_claims,
            include_texts=True,
        )

    @dispatcher.span
    def retrieve_with_soi(self, query_bundle: QueryBundle) -> tuple[SubsetOfInterest, list[NodeWithScore]]:
        """What :meth:`build_soi` and :meth:`retrieve` give for one claim, from ONE SOI computation."""
        query_plan.check_bundle(query_bundle)
        self._maybe_sync()
        embedding, query_str = query_plan.query_embedding(self._embed_model, query_bundle), query_bundle.query_str
        plan, found = self._plan(query_str, embedding, include_texts=True)
        nodes = self._rank(search_candidates(self._sources, plan) if found is None else found, plan)
        return query_plan.plan_soi(plan, self.context, self._settings, query_str), nodes

    @dispatcher.span
    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        query_plan.check_bundle(query_bundle)
        self._maybe_sync()
        plan, found = self._plan(query_bundle.query_str, query_plan.query_embedding(self._embed_model, query_bundle))
        return self._rank(search_candidates(self._sources, plan) if found is None else found, plan)

    @dispatcher.span
    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        query_plan.check_bundle(query_bundle)
        await asyncio.to_thread(self._maybe_sync)
        embedding = await query_plan.aquery_embedding(self._embed_model, query_bundle)
        plan, found = await asyncio.to_thread(self._plan, query_bundle.query_str, embedding)
        if found is None:
            found = await asearch_candidates(self._sources, plan)
        return await asyncio.to_thread(self._rank, found, plan)

    # ----------------------------------------------------- incremental updates
    def _after_update(self) -> None:
        """Refit the per-passage tables in use (after an insert/delete/sync) and note the store's size."""
        self._corpus.fit_tables(self._settings)  # those the edit dropped are refitted
        if not self._custom_sources:
            self._sources = self._default_sources()
        self._stage = RerankStage(self._settings, self._scorers())
        self._seen_size = updates.store_size(self._index)
        self._calibration_info = self._calibration_summary()

    def insert_nodes(self, nodes: Sequence[BaseNode], **insert_kwargs: Any) -> None:
        """Insert evidence into the index *and* the thematic context, without refitting.

        Each node is embedded by the index, gets its cluster from the fitted
        mixture (supervised: its theme's, or the nearest theme's) and takes part
        in SOIs at once.  A node id that already exists is replaced, not duplicated.
        """
        nodes = list(nodes)
        if nodes:
            self._shared.start_edit()  # one writer per folder, and not from a stale copy
        with self._corpus.journal.editing():  # a half-made edit cannot be replayed: the next persist is full
            if updates.insert_nodes(self._index, self._corpus, nodes, **insert_kwargs):
                self._corpus.journal.record_insert(self._index, [n.node_id for n in nodes])
                self._after_update()

    def delete_nodes(self, node_ids: Sequence[str], **delete_kwargs: Any) -> None:
        """Delete evidence from the index and from every SOI.

        Needs a vector store that can delete (``FaissMapVectorStore``,
        ``SimpleVectorStore``, …; the plain ``FaissVectorStore`` cannot).
        """
        node_ids = list(node_ids)
        if node_ids:
            self._shared.start_edit()
        with self._corpus.journal.editing():
            if updates.delete_nodes(self._index, self._corpus, node_ids, **delete_kwargs):
                self._corpus.journal.record_delete(node_ids)
                self._after_update()

    def sync(self) -> tuple[int, int]:
        """Bring the thematic context in line with nodes inserted into or deleted from the index directly.

        Queries call it by themselves when the vector store's size changed since the last
        fit or sync (FAISS and the simple store; not Qdrant).  An insert and a delete of the
        same number of nodes leave the size unchanged: call ``sync()`` after such edits, or
        edit through :meth:`insert_nodes` / :meth:`delete_nodes`.

        Returns:
            ``(added, removed)``.
        """
        added, removed = updates.sync(self._index, self._corpus)
        if added or removed:
            self._corpus.journal.invalidate()  # edits made to the index directly: the next persist is a full one
        self._after_update()
        return added, removed

    def reconcile_docstore(self) -> tuple[int, int]:
        """Bring the vector side and the context in line with the index's docstore; ``(inserted, deleted)``.

        For a docstore written at every edit (DuckDB, Redis): nodes it holds that the saved vectors lack (inserted
        after the last ``persist``) are embedded and inserted, nodes it lacks are deleted.
        :meth:`from_persist_dir` calls it for such an index; a no-op for LlamaIndex's in-memory docstore.
        Only this process's vectors and context change: the docstore is written nothing (it holds these edits),
        so a reader can call it between queries to catch up with a writer's edits on a shared Redis docstore
        (not while another thread queries; ids are compared, not texts).
        """
        if not updates.docstore_holds_nodes(self._index):
            return 0, 0
        from llama_index_carag.stores.docstores import docstore_generation

        generation = docstore_generation(self._index.docstore)  # read first: a later edit reads as a change
        # the docstore holds these edits already: only this process's vectors and context change
        with self._shared.paused():
            nodes, gone = updates.reconcile_docstore(self._index, self._corpus)
            if gone:
                self.delete_nodes(gone)
            if nodes:
                self.insert_nodes([n.model_copy(update={"embedding": None}) for n in nodes])
        self._shared.in_line_with_docstore(generation)
        return len(nodes), len(gone)

    def changed_elsewhere(self) -> str | None:
        """What another writer changed since this retriever loaded (or last persisted) its index: the folder
        persisted again, or the shared Redis docstore edited; ``None`` when nothing.

        Such edits are not retrieved here until the retriever is reloaded with :meth:`from_persist_dir`
        (queries log one warning when they notice).  docs/GUIDE.md, "Several processes", says which layouts
        share what.
        """
        return self._shared.changed_elsewhere()

    @property
    def persist_dir(self) -> Path | None:
        """The folder this retriever's index was loaded from or last persisted to (``None``: neither)."""
        return self._shared.folder

    def _maybe_sync(self) -> None:
        self._shared.poll()  # another process's edits: a warning (at most one check a second)
        size = updates.store_size(self._index)
        if size is not None and size != self._seen_size:
            with self.context.lock:
                if updates.store_size(self._index) != self._seen_size:
                    logger.info("The index changed since the last fit/sync; syncing the thematic context.")
                    self.sync()

    def refit(self, *, show_progress: bool = False) -> ContextAwareRetriever:
        """Refit the clustering on the index as it is now (same settings and claims); in place.

        A calibrated retriever is calibrated again (from the same global preset, the saved claim links
        and the links of evidence inserted since, through its ``claim_key``).
        """
        self._shared.start_edit()
        self._corpus = updates.refit_corpus(
            self._index, self._corpus, self._settings, self._embed_model, show_progress=show_progress
        )
        if self._corpus.calibration is not None:
            self._settings = self._corpus.calibration.settings
        self._after_update()
        return self

    # ------------------------------------------------------------ persistence
    def persist(
        self, persist_dir: str | os.PathLike[str], *, persist_index: bool = False, compact: bool = False
    ) -> Path:
        """Save the fitted clustering and settings under ``persist_dir/carag/`` (and the index with ``persist_index``).

        The state is JSON plus ``.npy`` arrays (no pickle), written atomically; the
        settings are saved as :class:`CaragSettings` JSON.  Evidence embeddings are not
        duplicated: they are read back from the index.

        With ``persist_index=True``, a persist to the folder the corpus was last persisted to (or loaded from)
        writes only the ``insert_nodes`` / ``delete_nodes`` made since, as a journal segment committed
        atomically (LlamaIndex's files and the state's base are left as they are, so a failure at any point
        leaves the previous state loadable); :meth:`from_persist_dir` replays it.  A full persist is written
        when ``compact=True``, past :data:`~llama_index_carag.retrieval.journal.COMPACT_FRACTION` of the base,
        or when the journal cannot extend the base (:mod:`~llama_index_carag.retrieval.journal` says when).

        Args:
            persist_dir: folder (typically the index's own persist dir).
            persist_index: also save the index (``index.storage_context.persist(persist_dir)``, or its journal).
            compact: write a full persist even when the edits could be journaled.

        Returns:
            the state folder.
        """
        from llama_index_carag.retrieval import state

        self._maybe_sync()  # nodes added to the index directly must be in the saved state too
        with self._shared.persisting(persist_dir, STATE_SUBDIR):  # the folder's writer; not from a stale copy
            return state.persist_retriever(self, Path(persist_dir), STATE_SUBDIR, persist_index, compact)

    @classmethod
    def from_persist_dir(
        cls,
        persist_dir: str | os.PathLike[str],
        *,
        index: VectorStoreIndex | None = None,
        embed_model: str | BaseEmbedding | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> ContextAwareRetriever:
        """Reload a retriever saved with :meth:`persist` (its base, then the edits journaled since, replayed).

        Args:
            persist_dir: the folder given to :meth:`persist`.
            index: the index it was fitted on; loaded from ``persist_dir`` when ``None``
                (FAISS indexes saved with ``persist_index=True``).  A given index must hold the
                nodes of the state's base: the journaled edits are replayed on it.
            embed_model: the query embed model; default the index's, or (when the
                index is loaded here) the recorded model resolved offline.

        An index whose nodes live in a DuckDB or Redis docstore (recorded in ``carag_docstore.json``) is
        reloaded on that docstore, and :meth:`reconcile_docstore` then applies the edits made after the last
        ``persist`` (a process killed mid-insert leaves them in the docstore only).

        The folder's files are read under its shared lock (a full persist from another process waits to switch
        them: :func:`~llama_index_carag.core.writer_lock.reading`), so the load gets one persist whole.

        Raises:
            StateError: no state, a corrupt/tampered file, a state that does not
                match the index (other nodes, other embed model or dimension), or
                settings this version cannot read (re-fit then).
            IndexBusyError: a full persist held the folder past ``READ_WAIT_S`` (a writer stuck mid-commit).
        """
        from llama_index_carag.retrieval import state

        folder = Path(persist_dir)
        with reading(folder):  # no full persist switches the folder's files while they are read
            stamp = load_stamp(folder, STATE_SUBDIR)  # before reading: a journal appended meanwhile reads as a change
            corpus, settings, model, token = state.from_persist_dir(folder / STATE_SUBDIR, index, embed_model)
            retriever = cls(
                corpus.index, corpus, settings, embed_model=model, callback_manager=callback_manager, verbose=verbose
            )
            shared = retriever._shared
            # the journal's edits are in a DuckDB/Redis docstore already: replayed into this process's vectors only
            with shared.paused():
                state.replay_into(retriever, folder, folder / STATE_SUBDIR, token, bind=index is None)
        retriever.reconcile_docstore()  # a DuckDB/Redis docstore may be ahead of the saved vectors (a crash, a writer)
        shared.bind(folder, STATE_SUBDIR, stamp)
        return retriever

    def reload_blocker(self) -> str | None:
        """Why :meth:`reloaded` cannot load this retriever again from its folder, or ``None`` when it can."""
        from llama_index_carag.stores.docstores import SPEC_NAME

        folder = self.persist_dir
        if folder is None:
            return "its index was neither loaded from a folder nor persisted to one"
        if self._custom_sources:
            return "it searches custom candidate sources, bound to the index they were built on"
        if not ((folder / "docstore.json").is_file() or (folder / SPEC_NAME).is_file()):
            return f"{folder} holds the CARAG state without the index (from_persist_dir needs index=...)"
        return None

    def reloaded(self) -> ContextAwareRetriever:
        """A new retriever on the index as :attr:`persist_dir` holds it now (another process may have persisted
        edits since): on the same encoder, with this retriever's settings, extra scorers, callback manager and
        verbosity.  This one is left as it is (``carag serve`` swaps it for the new one).

        Raises:
            ValueError: it cannot be loaded again (:meth:`reload_blocker` says why).
        """
        blocker = self.reload_blocker()
        if blocker is not None:
            raise ValueError(f"This retriever cannot be reloaded: {blocker}.")
        assert self.persist_dir is not None
        fresh = type(self).from_persist_dir(
            self.persist_dir,
            embed_model=self._embed_model,
            callback_manager=self.callback_manager,
            verbose=self._verbose,
        )
        if fresh.settings != self._settings:
            fresh = fresh.with_settings(self._settings)
        if not self._extra_scorers:
            return fresh
        return type(self)(
            fresh._index,
            fresh._corpus,
            fresh._settings,
            embed_model=fresh._embed_model,
            scorers=self._extra_scorers,
            callback_manager=self.callback_manager,
            verbose=self._verbose,
        )
