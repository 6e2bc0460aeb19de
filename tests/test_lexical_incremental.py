"""Incremental BM25: inserts and deletes in O(batch) give the scores and top-k of a rebuild, and survive a round trip."""

from __future__ import annotations

import numpy as np
import pytest
from llama_index.core.schema import TextNode
from sklearn.exceptions import NotFittedError

from llama_index_carag import ContextAwareRetriever
from llama_index_carag.ranking.bm25 import TOKEN_PATTERN, BM25Index, import_bm25s
from llama_index_carag.retrieval.indexing import build_faiss_index
from llama_index_carag.settings import PAPER
from llama_index_carag.stores.vector_stores import nodes_by_id

_COMMON = "the of and is a in to cat cats running runs ran dog dogs house tree blue quick sea level rose warming"
_TOPICS = "ocean coral reef ice sheet melt carbon emission policy"
WORDS = _COMMON.split() + _TOPICS.split() + [f"w{i}" for i in range(200)]


def random_texts(rng: np.random.Generator, n: int) -> list[str]:
    p = 1.0 / np.arange(1, len(WORDS) + 1)
    p /= p.sum()
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(0, 25)), p=p)) for _ in range(n)]


def assert_same_as_rebuild(index: BM25Index, texts: dict[str, str], queries: list[str], k: int = 10) -> None:
    """Every live passage's score equals the rebuild's exactly; the top-k are the same up to the order of ties."""
    live = index.ids_
    assert sorted(live) == sorted(texts)
    rebuilt = BM25Index().fit_texts(live, [texts[i] for i in live])
    for q in queries:
        ours, theirs = index.query(q, k), rebuilt.query(q, k)
        np.testing.assert_array_equal(index.lookup(ours, live), rebuilt.lookup(theirs, live))
        np.testing.assert_array_equal(ours.scores, theirs.scores)
        cutoff = ours.scores[-1] if len(ours.ids) == k else 0.0  # ties at the k-th score may be swapped
        above = {i for i, s in zip(ours.ids, ours.scores) if s > cutoff}
        assert above == {i for i, s in zip(theirs.ids, theirs.scores) if s > cutoff}


def test_scores_are_bm25s_bit_for_bit(rng):
    import bm25s
    import Stemmer

    texts = random_texts(rng, 400)
    index = BM25Index().fit_texts([f"d{i}" for i in range(len(texts))], texts)
    tokens = bm25s.tokenize(texts, stopwords="en", stemmer=Stemmer.Stemmer("english"), token_pattern=TOKEN_PATTERN)
    model = import_bm25s().BM25()
    model.index(tokens, show_progress=False)
    for q in texts[:60] + ["cat cat running the", "nothing-matches-this"]:
        term_ids = model.get_tokens_ids(index.tokenize(q))
        expected = model.get_scores_from_ids(term_ids) if term_ids else np.zeros(len(texts), np.float32)
        np.testing.assert_array_equal(index.all_scores(q), expected)


@pytest.mark.parametrize("merge_fraction", [100.0, 0.05])  # never merged / merged along the way
def test_random_inserts_and_deletes_equal_a_rebuild(rng, merge_fraction):
    pool = random_texts(rng, 900)
    texts = {f"d{i}": t for i, t in enumerate(pool[:300])}
    index = BM25Index(merge_fraction=merge_fraction).fit_texts(list(texts), list(texts.values()))
    queries = random_texts(rng, 25) + ["quick blue ocean", "w1 w1 w2"]
    fresh = iter(range(300, 900))
    for step in range(12):
        if step % 3 == 2:  # delete a random batch, some ids not indexed
            gone = list(rng.choice(sorted(texts), size=min(len(texts) - 1, int(rng.integers(1, 40))), replace=False))
            assert index.remove([*gone, "never-indexed"]) == len(gone)
            for i in gone:
                del texts[i]
        else:  # insert new passages and replace a few existing ones
            new = {f"d{next(fresh)}": "" for _ in range(int(rng.integers(1, 50)))}
            new.update({i: "" for i in rng.choice(sorted(texts), size=3, replace=False)})
            batch = random_texts(rng, len(new))
            assert index.add_texts(list(new), batch) == len(new)
            texts.update(zip(new, batch))
        assert_same_as_rebuild(index, texts, queries)
    if merge_fraction > 1:
        assert len(index.segments_.parts) > 1  # the comparison above ran on a segmented index
    index.merge()
    assert len(index.segments_.parts) == 1
    assert_same_as_rebuild(index, texts, queries)


def test_a_segmented_index_round_trips(rng):
    texts = random_texts(rng, 120)
    ids = [f"d{i}" for i in range(len(texts))]
    index = BM25Index(merge_fraction=100.0).fit_texts(ids[:80], texts[:80])
    index.add_texts(ids[80:], texts[80:])
    index.remove(ids[10:30])
    index.add_texts(["d15"], ["quick blue ocean rose"])  # a removed id comes back
    assert len(index.segments_.parts) == 3
    info, arrays = index.get_state()
    assert len(index.segments_.parts) == 3  # saving does not merge the live index
    back = BM25Index.from_state(info, arrays)
    again = BM25Index.from_state(*back.get_state())  # and once more from the reloaded one
    for other in (back, again):
        assert sorted(other.ids_) == sorted(index.ids_)
        for q in texts[:20] + ["quick blue ocean"]:
            live = index.ids_
            np.testing.assert_array_equal(other.lookup(other.query(q, 5), live), index.lookup(index.query(q, 5), live))
        other.add_texts(["extra"], ["coral reef coral"])  # the reloaded index takes edits
        assert other.query("coral reef", 1).ids == ["extra"]


def test_bad_edits_are_refused():
    index = BM25Index().fit_texts(["a", "b"], ["sea level", "coral reef"])
    with pytest.raises(ValueError, match="duplicated"):
        index.add_texts(["c", "c"], ["x", "y"])
    with pytest.raises(ValueError, match="2 ids for 1 texts"):
        index.add_texts(["c", "d"], ["x"])
    with pytest.raises(NotFittedError):
        BM25Index().add_texts(["a"], ["x"])
    with pytest.raises(ValueError, match="merge_fraction"):
        BM25Index(merge_fraction=0).fit_texts(["a"], ["x"])
    index.remove(["a", "b"])
    assert len(index) == 0 and index.query("sea", 3).ids == []


def test_retriever_edits_update_bm25_in_place_as_a_rebuild_would(minilm, demo_corpus):
    settings = PAPER.replace(alpha=1.0, rerank_candidates=30, lexical_weight=0.8)
    index = build_faiss_index(demo_corpus.evidence_nodes, minilm, id_map=True)
    retriever = ContextAwareRetriever.from_index(index, settings, claim_nodes=demo_corpus.claim_nodes)
    table = retriever.corpus.tables["lexical"]
    evidence = demo_corpus.evidence_nodes
    new = [TextNode(id_=f"fresh-{i}", text=f"Quokkaflux reading {i} rose in the coral sea.") for i in range(5)]
    replaced = TextNode(id_=evidence[3].node_id, text="Zebrabanana replaces this passage entirely.", metadata={})
    retriever.insert_nodes([*new, replaced])
    retriever.delete_nodes([evidence[0].node_id, evidence[1].node_id])
    assert retriever.corpus.tables["lexical"] is table  # updated in place, not dropped and refitted
    live = retriever.corpus.evidence_ids()
    assert sorted(table.index.ids_) == sorted(live)
    rebuilt = BM25Index().fit([n for n in nodes_by_id(index, live) if n is not None])
    for q in ["quokkaflux coral", "zebrabanana", demo_corpus.claim_nodes[2].get_content()]:
        np.testing.assert_array_equal(
            table.index.lookup(table.index.query(q, 5), live), rebuilt.lookup(rebuilt.query(q, 5), live)
        )
    assert retriever.retrieve("zebrabanana passage")[0].node.node_id == evidence[3].node_id


def reference_build_segment(offset, token_ids, lengths, n_terms):
    """build_segment as it was (a stable argsort by term): the packed-key sort must give the same arrays."""
    from llama_index_carag.ranking.bm25.segments import Segment

    lengths = np.asarray(lengths, dtype=np.int32)
    cols = np.asarray(token_ids, dtype=np.int32)
    rows = np.repeat(np.arange(lengths.shape[0], dtype=np.int32), lengths)
    order = np.argsort(cols, kind="stable")
    cols, rows = cols[order], rows[order]
    new = np.ones(cols.shape[0], dtype=bool)
    new[1:] = (cols[1:] != cols[:-1]) | (rows[1:] != rows[:-1])
    starts = np.flatnonzero(new)
    tf = np.diff(np.append(starts, cols.shape[0]))
    indptr = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(np.bincount(cols[starts], minlength=n_terms), out=indptr[1:])
    tf_dtype = np.uint16 if tf.size == 0 or tf.max() <= np.iinfo(np.uint16).max else np.uint32
    alive = np.ones(lengths.shape[0], dtype=bool)
    return Segment(int(offset), indptr, rows[starts].astype(np.int32), tf.astype(tf_dtype), lengths, alive)


def assert_same_segment(ours, theirs) -> None:
    for name in ("indptr", "rows", "tf", "dl", "alive"):
        a, b = getattr(ours, name), getattr(theirs, name)
        assert a.dtype == b.dtype, name
        np.testing.assert_array_equal(a, b, err_msg=name)
    assert (ours.offset, ours.n_dead) == (theirs.offset, theirs.n_dead)


@pytest.mark.parametrize("n_terms", [1, 7, 300])
def test_build_segment_gives_the_arrays_of_a_stable_argsort(rng, n_terms):
    from llama_index_carag.ranking.bm25.segments import build_segment

    for n in (0, 1, 5, 400):
        lengths = rng.integers(0, 30, size=n).astype(np.int32)
        tokens = rng.integers(0, n_terms, size=int(lengths.sum())).astype(np.int32)
        assert_same_segment(
            build_segment(9, tokens, lengths, n_terms + 2), reference_build_segment(9, tokens, lengths, n_terms + 2)
        )
    lengths = np.array([70_000, 3], dtype=np.int32)  # a term frequency beyond uint16
    tokens = np.zeros(70_003, dtype=np.int32)
    assert build_segment(0, tokens, lengths, 1).tf.dtype == np.uint32
    assert_same_segment(build_segment(0, tokens, lengths, 1), reference_build_segment(0, tokens, lengths, 1))


def test_fit_in_chunks_equals_a_segment_per_chunk_merged(rng, monkeypatch):
    import llama_index_carag.ranking.bm25.index as bm25_index
    from llama_index_carag.ranking.bm25.segments import Segments, merge

    texts = random_texts(rng, 530)
    ids = [f"d{i}" for i in range(len(texts))]
    monkeypatch.setattr(bm25_index, "FIT_CHUNK", 100)
    index = BM25Index().fit_texts(ids, texts)
    vocab: dict[str, int] = {}
    parts = Segments.empty()
    for start in range(0, len(texts), 100):  # the previous fit: a segment per chunk, then merged
        tokens, lengths = index.document_term_ids(texts[start : start + 100], vocab)
        parts = parts.append(reference_build_segment(parts.n_rows, tokens, lengths, len(vocab)))
    merged, old_rows = merge(parts, len(vocab))
    assert vocab == index.vocab_ and len(index.segments_.parts) == 1
    np.testing.assert_array_equal(old_rows, np.arange(len(texts)))
    assert_same_segment(index.segments_.parts[0], merged)


def test_fit_from_uneven_chunks_equals_one_fit(rng):
    """fit_chunks (the text read lazily, uneven and empty chunks) indexes what one fit_texts call does: the
    same terms and lengths, the same counts per (term, passage), scores bit for bit.  (A term's column
    number depends on the chunk it first appears in, as it always did with fit_texts's own chunks.)"""
    texts = random_texts(rng, 333)
    ids = [f"d{i}" for i in range(len(texts))]
    whole = BM25Index().fit_texts(ids, texts)
    cuts = [0, 1, 1, 50, 51, 200, 333]  # chunks of 1, 0, 49, 1, 149 and 133 passages
    chunks = ((ids[a:b], texts[a:b]) for a, b in zip(cuts[:-1], cuts[1:]))
    chunked = BM25Index().fit_chunks(chunks, total=len(texts))
    assert set(chunked.vocab_) == set(whole.vocab_) and chunked.ids_ == whole.ids_
    a, b = chunked.segments_.parts[0], whole.segments_.parts[0]
    np.testing.assert_array_equal(a.dl, b.dl)
    for term, col in whole.vocab_.items():
        other = chunked.vocab_[term]
        np.testing.assert_array_equal(
            a.rows[a.indptr[other] : a.indptr[other + 1]], b.rows[b.indptr[col] : b.indptr[col + 1]]
        )
        np.testing.assert_array_equal(
            a.tf[a.indptr[other] : a.indptr[other + 1]], b.tf[b.indptr[col] : b.indptr[col + 1]]
        )
    for q in random_texts(rng, 30):
        np.testing.assert_array_equal(chunked.all_scores(q), whole.all_scores(q))
    with pytest.raises(ValueError, match="at least one passage"):
        BM25Index().fit_chunks(iter([([], [])]))
    with pytest.raises(ValueError, match="duplicated"):
        BM25Index().fit_chunks([(["a"], ["x y"]), (["a"], ["z w"])])
    with pytest.raises(ValueError, match="2 ids for 1 texts"):
        BM25Index().fit_chunks([(["a", "b"], ["x y"])])


@pytest.mark.parametrize(("min_postings", "budget"), [(1, 1 << 30), (1, 3_000), (10**9, 1 << 30)])
def test_cached_contributions_score_as_computed_ones(rng, monkeypatch, min_postings, budget):
    """Every term cached / a budget that evicts / nothing cached: the same bits as bm25s, through edits."""
    import bm25s
    import Stemmer

    import llama_index_carag.ranking.bm25.segments as seg

    monkeypatch.setattr(seg, "CONTRIBUTION_CACHE_MIN_POSTINGS", min_postings)
    monkeypatch.setattr(seg, "CONTRIBUTION_CACHE_BYTES", budget)
    texts = random_texts(rng, 300)
    ids = [f"d{i}" for i in range(len(texts))]
    index = BM25Index(merge_fraction=100.0).fit_texts(ids[:200], texts[:200])
    index.add_texts(ids[200:], texts[200:])
    index.remove(ids[50:90])
    live = index.ids_
    by_id = dict(zip(ids, texts))
    tokens = bm25s.tokenize(
        [by_id[i] for i in live], stopwords="en", stemmer=Stemmer.Stemmer("english"), token_pattern=TOKEN_PATTERN
    )
    model = import_bm25s().BM25()
    model.index(tokens, show_progress=False)
    for _ in range(2):  # the second pass reads the cache
        for q in texts[:40] + ["cat cat running the", "w1 w1 w1 sea"]:
            term_ids = model.get_tokens_ids(index.tokenize(q))
            expected = model.get_scores_from_ids(term_ids) if term_ids else np.zeros(len(live), np.float32)
            np.testing.assert_array_equal(index.lookup(index.query(q, 5), live), expected)
    cache = index.segments_.contributions(index.k1, index.b)
    assert cache.nbytes <= budget
    assert (len(cache) > 0) == (min_postings == 1)


def test_indexed_text_is_the_embed_content():
    """A node without metadata is indexed by its text; one with metadata by its MetadataMode.EMBED content (keys
    excluded from embeddings left out); a node class with its own get_content by that."""
    from llama_index.core.schema import MetadataMode

    class Shouting(TextNode):
        def get_content(self, metadata_mode: MetadataMode = MetadataMode.NONE) -> str:
            return self.text.upper() + " megaphone"

    nodes = [
        TextNode(id_="plain", text="coral reefs bleach"),
        TextNode(id_="meta", text="coral reefs bleach", metadata={"venue": "Nature", "label": "x"}),
        Shouting(id_="own", text="coral reefs bleach"),
    ]
    nodes[1].excluded_embed_metadata_keys = ["label"]
    index = BM25Index().fit(nodes)
    assert index.all_scores("nature")[0] == 0 and index.all_scores("nature")[1] > 0
    assert index.all_scores("label")[1] == 0  # excluded from embeddings, so from BM25 too
    assert index.all_scores("megaphone")[2] > 0 and index.all_scores("megaphone")[:2].tolist() == [0, 0]
