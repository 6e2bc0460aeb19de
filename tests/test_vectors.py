import numpy as np
import pytest

from llama_index_carag.core.vectors import (
    as_matrix,
    as_vector,
    blend_query,
    cosine_similarities,
    l2_normalize,
    thematic_embedding,
)


def test_blend_is_weighted_sum_normalised():
    q = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    t = np.array([0.0, 0.5, 0.0], dtype=np.float32)
    out = blend_query(q, t, 0.5)
    expected = np.array([0.5, 0.25, 0.0]) / np.linalg.norm([0.5, 0.25, 0.0])
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_blend_alpha_one_and_empty_theme_return_query_unchanged():
    q = np.array([0.3, 0.4, 0.0], dtype=np.float32)  # not unit: must come back as is
    t = np.array([0.0, 1.0, 0.0], dtype=np.float32)
    np.testing.assert_array_equal(blend_query(q, t, 1.0), q)
    np.testing.assert_array_equal(blend_query(q, None, 0.5), q)


def test_blend_alpha_zero_is_theme_direction():
    q = np.array([1.0, 0.0], dtype=np.float32)
    t = np.array([0.0, 0.2], dtype=np.float32)
    np.testing.assert_allclose(blend_query(q, t, 0.0), [0.0, 1.0], atol=1e-7)


def test_thematic_embedding_is_mean_and_none_when_empty():
    vs = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=np.float32)
    np.testing.assert_allclose(thematic_embedding(vs), [2 / 3, 2 / 3], rtol=1e-6)
    assert thematic_embedding(np.zeros((0, 2), np.float32)) is None


def test_cosine_and_normalise_handle_zero_rows():
    m = l2_normalize(np.array([[3.0, 4.0], [0.0, 0.0]]))
    np.testing.assert_allclose(m[0], [0.6, 0.8])
    np.testing.assert_array_equal(m[1], [0.0, 0.0])
    sims = cosine_similarities(np.array([6.0, 8.0]), m)
    np.testing.assert_allclose(sims, [1.0, 0.0], atol=1e-6)


@pytest.mark.parametrize("bad", [[[1.0, np.nan]], [[np.inf, 0.0]]])
def test_as_matrix_rejects_non_finite(bad):
    with pytest.raises(ValueError, match="NaN or infinite"):
        as_matrix(bad)


def test_as_vector_checks_dimension_and_values():
    with pytest.raises(ValueError, match="dimension 3 but the corpus embeddings have dimension 4"):
        as_vector([1.0, 2.0, 3.0], dim=4)
    with pytest.raises(ValueError, match="NaN"):
        as_vector([1.0, float("nan")])
    with pytest.raises(ValueError, match="shape"):
        as_vector([[1.0, 2.0], [3.0, 4.0]])
