"""The in-place layout helpers equal NumPy's one-shot expressions; the context's copy=False fit equals copy=True."""

from __future__ import annotations

import numpy as np
import pytest

from llama_index_carag.core.context import ThematicContext
from llama_index_carag.core.corpus_items import CorpusItems
from llama_index_carag.core.vectors import (
    divide_rows_inplace,
    growth_rows,
    permute_rows_inplace,
    row_norms,
    spread_blocks_inplace,
)
from llama_index_carag.ranking.contrast import ClaimContrast


@pytest.mark.parametrize("n", [0, 1, 2, 7, 1000])
@pytest.mark.parametrize("block", [1, 3, 64, 10_000])
def test_permute_rows_inplace_equals_fancy_indexing(n, block):
    rng = np.random.default_rng(n + block)
    X = rng.standard_normal((n, 5)).astype(np.float32)
    order = rng.permutation(n)
    if n > 4:
        order[:2] = [0, 1]  # some fixed points
        order[2:] = 2 + rng.permutation(n - 2)
    expected = X[order]
    permute_rows_inplace(X, order, block=block)
    np.testing.assert_array_equal(X, expected)


def test_permute_rows_inplace_refuses_a_non_permutation():
    X = np.zeros((3, 2), np.float32)
    with pytest.raises(ValueError, match="permutation"):
        permute_rows_inplace(X, np.array([0, 0, 1]))
    with pytest.raises(ValueError, match="permutation"):
        permute_rows_inplace(X, np.array([0, 1]))


def test_norms_and_division_in_blocks_are_bit_for_bit():
    X = np.random.default_rng(0).standard_normal((1001, 9)).astype(np.float32)
    norms = row_norms(X, block=100)
    np.testing.assert_array_equal(norms, np.linalg.norm(X, axis=1))
    Y = X.copy()
    divide_rows_inplace(Y, norms, block=77)
    np.testing.assert_array_equal(Y, X / norms[:, None])


def _items(rng, n=300, m=12, d=8):
    X = rng.standard_normal((n + m, d)).astype(np.float32)
    return CorpusItems(
        ids=[f"e{i}" for i in range(n)] + [f"c{i}" for i in range(m)],
        vectors=X,
        is_claim=np.array([False] * n + [True] * m),
        claim_of=[None] * n + [f"c{i}" for i in range(m)],
        themes=[None] * (n + m),
        claim_texts={f"c{i}": f"claim {i}" for i in range(m)},
    )


def test_context_fit_in_place_equals_the_copying_fit(rng):
    items = _items(rng)
    original = np.array(items.vectors, copy=True)
    a = ThematicContext("unsupervised", n_clusters=4, random_state=0).fit(items)
    np.testing.assert_array_equal(items.vectors, original)  # copy=True (the default) leaves the input alone
    b = ThematicContext("unsupervised", n_clusters=4, random_state=0).fit(items, copy=False)
    assert a.groups == b.groups
    for key in a.groups:
        ma, mb = a.members(key, include_texts=False), b.members(key, include_texts=False)
        assert list(ma.ids) == list(mb.ids)
        np.testing.assert_array_equal(ma.unit, mb.unit)
    ids_a, units_a = a.evidence_units()
    ids_b, units_b = b.evidence_units()
    assert ids_a == ids_b
    np.testing.assert_array_equal(units_a, units_b)


def test_read_only_input_is_copied_even_with_copy_false(rng):
    items = _items(rng)
    items.vectors.flags.writeable = False
    ThematicContext("unsupervised", n_clusters=3, random_state=0).fit(items, copy=False)  # no error: copied


def test_contrast_table_from_blocks_equals_the_one_matrix_fit(rng):
    units = rng.standard_normal((50, 6)).astype(np.float32)
    units /= np.linalg.norm(units, axis=1, keepdims=True)
    claims = units[:7] + 0.01
    ids = [f"p{i}" for i in range(50)]
    whole = ClaimContrast(claims, top=3).fit(ids, units)
    blocks = ClaimContrast(claims, top=3).fit_blocks([(ids[:20], units[:20]), (ids[20:], units[20:])])
    np.testing.assert_array_equal(whole.sims_, blocks.sims_)
    np.testing.assert_array_equal(whole.claims_, blocks.claims_)
    assert whole.get_state()[0] == blocks.get_state()[0]
    empty = ClaimContrast(claims, top=3).fit_blocks([])
    assert empty.sims_.shape == (0, 3)


@pytest.mark.parametrize("block", [1, 2, 5, 10_000])
def test_spread_blocks_inplace_moves_each_block_after_the_room_of_those_before(block):
    rng = np.random.default_rng(block)
    sizes, room = [3, 0, 7, 4], [2, 5, 0, 3]
    buffer = np.full((sum(sizes) + sum(room) + 1, 3), np.nan, np.float32)
    rows = rng.standard_normal((sum(sizes), 3)).astype(np.float32)
    buffer[: sum(sizes)] = rows
    firsts = spread_blocks_inplace(buffer, sizes, room, block=block)
    assert firsts == [0, 5, 10, 10 + 7 + 0]
    starts = np.cumsum([0, *sizes[:-1]])
    for first, start, size in zip(firsts, starts, sizes):
        np.testing.assert_array_equal(buffer[first : first + size], rows[start : start + size])


def test_spread_blocks_inplace_refuses_room_that_does_not_fit():
    with pytest.raises(ValueError, match="do not fit"):
        spread_blocks_inplace(np.zeros((5, 2), np.float32), [3], [3])


def test_a_fit_leaves_room_so_a_first_insert_appends_in_place():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((600, 8)).astype(np.float32)
    n = len(X)

    def items(vectors, prefix="n"):
        return CorpusItems(
            ids=[f"{prefix}{i}" for i in range(len(vectors))],
            vectors=vectors,
            is_claim=np.zeros(len(vectors), bool),
            claim_of=[None] * len(vectors),
        )

    buffer = np.empty((n + growth_rows(n), 8), np.float32)
    buffer[:n] = X
    ctx = ThematicContext(n_clusters=4, random_state=0).fit(items(buffer[:n]), copy=False, buffer=buffer)
    copied = ThematicContext(n_clusters=4, random_state=0).fit(items(X.copy()))
    before = {k: g.unit for k, g in ctx.cluster_store_.clusters.groups.items()}
    for key, unit in before.items():
        np.testing.assert_array_equal(unit, copied.cluster_store_.clusters.groups[key].unit)
        assert np.shares_memory(unit, buffer)  # the sorted store is the given buffer, no copy
    ctx.add_items(items(rng.standard_normal((5, 8)).astype(np.float32), prefix="new"))
    for key, group in ctx.cluster_store_.clusters.groups.items():
        assert np.shares_memory(group.unit, buffer)  # appended into the room: no cluster was copied
        np.testing.assert_array_equal(group.unit[: len(before[key])], before[key])
