"""The in-place layout helpers equal NumPy's one-shot expressions; the context's copy=False fit equals copy=True."""

from __future__ import annotations

import numpy as np
import pytest

from llama_index_carag.core.context import ThematicContext
from llama_index_carag.core.corpus_items import CorpusItems
from llama_index_carag.core.vectors import divide_rows_inplace, permute_rows_inplace, row_norms
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
