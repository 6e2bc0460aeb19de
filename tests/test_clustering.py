import numpy as np
import pytest

from llama_index_carag.core.clustering import ThematicClusterer


def blobs(rng, k=4, per=60, dim=12, spread=0.05):
    centres = rng.normal(size=(k, dim))
    X = np.vstack([c + spread * rng.normal(size=(per, dim)) for c in centres])
    y = np.repeat(np.arange(k), per)
    return X.astype(np.float32), y


def same_partition(a, b):
    # identical up to relabelling
    pairs = set(zip(a.tolist(), b.tolist()))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


def test_fit_predict_recovers_planted_clusters(rng):
    X, y = blobs(rng)
    c = ThematicClusterer(n_clusters=4, random_state=0).fit(X)
    assert c.labels_.shape == (len(X),)
    assert same_partition(c.labels_, y)
    np.testing.assert_array_equal(c.predict(X), c.labels_)
    proba = c.predict_proba(X)
    assert proba.shape == (len(X), 4)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(proba.argmax(axis=1), c.labels_)  # hard = most probable


def test_hyperparameters_stored_unchanged_sklearn_style():
    c = ThematicClusterer(n_clusters=7, covariance_type="full", reduce_dim=8, random_state=3)
    assert c.get_params()["n_clusters"] == 7
    assert c.get_params()["covariance_type"] == "full"
    assert not hasattr(c, "labels_")


def test_auto_picks_planted_number_by_bic(rng):
    X, _ = blobs(rng, k=5, per=50, dim=6, spread=0.05)
    c = ThematicClusterer(n_clusters="auto", auto_range=(2, 8), random_state=0).fit(X)
    assert c.n_clusters_ == 5
    assert set(c.bic_) == set(range(2, 9))
    assert min(c.bic_, key=c.bic_.get) == 5


def test_same_random_state_same_clusters(rng):
    X, _ = blobs(rng, k=6, per=30, dim=10, spread=0.6)
    a = ThematicClusterer(n_clusters=6, random_state=11).fit(X).labels_
    b = ThematicClusterer(n_clusters=6, random_state=11).fit(X).labels_
    np.testing.assert_array_equal(a, b)


def test_reduce_dim_full_covariance(rng):
    X, y = blobs(rng, k=3, per=40, dim=30)
    c = ThematicClusterer(n_clusters=3, covariance_type="full", reduce_dim=5).fit(X)
    assert c.pca_ is not None and c.pca_.n_components_ == 5
    assert same_partition(c.labels_, y)


def test_bounded_sample_then_predict_all(rng):
    X, y = blobs(rng, k=3, per=400, dim=8)
    c = ThematicClusterer(n_clusters=3, max_fit_samples=200, batch_size=100).fit(X)
    assert c.labels_.shape == (1200,)
    assert same_partition(c.labels_, y)


def test_state_round_trip_predicts_identically(rng):
    X, _ = blobs(rng, k=4, per=40, dim=10, spread=0.5)
    for kwargs in ({}, {"covariance_type": "full", "reduce_dim": 4}):
        c = ThematicClusterer(n_clusters=4, **kwargs).fit(X)
        info, arrays = c.get_state()
        d = ThematicClusterer.from_state(info, arrays)
        np.testing.assert_array_equal(d.predict(X), c.predict(X))
        np.testing.assert_allclose(d.predict_proba(X), c.predict_proba(X))


def _fitted_attributes(estimator) -> dict:
    """scikit-learn's fitted state: the public attributes with a trailing underscore."""
    return {k: v for k, v in vars(estimator).items() if k.endswith("_") and not k.startswith("_")}


@pytest.mark.parametrize("covariance_type", ["diag", "full", "tied", "spherical"])
def test_reloaded_mixture_has_every_fitted_attribute_of_the_original(rng, tmp_path, covariance_type):
    from llama_index_carag.core.persistence import read_state, write_state

    X, _ = blobs(rng, k=3, per=40, dim=6, spread=0.3)
    c = ThematicClusterer(n_clusters=3, covariance_type=covariance_type).fit(X)
    write_state(tmp_path, *c.get_state())  # the JSON manifest and .npy files a persisted retriever writes
    info, arrays, _ = read_state(tmp_path)
    d = ThematicClusterer.from_state(info, arrays)

    want, got = _fitted_attributes(c.gmm_), _fitted_attributes(d.gmm_)
    assert {"precisions_", "converged_", "n_iter_", "lower_bound_"} <= set(want)
    assert set(got) == set(want)
    for name, value in want.items():
        if isinstance(value, np.ndarray):
            assert got[name].dtype == value.dtype and got[name].shape == value.shape, name
            np.testing.assert_array_equal(got[name], value, err_msg=name)
        else:
            assert got[name] == value, name
    assert d.gmm_.n_iter_ >= 1 and d.gmm_.converged_ is c.gmm_.converged_
    np.testing.assert_array_equal(d.predict(X), c.predict(X))


def test_state_saved_before_the_em_summary_still_loads(rng):
    X, _ = blobs(rng, k=3, per=30, dim=5)
    c = ThematicClusterer(n_clusters=3).fit(X)
    info, arrays = c.get_state()
    info.pop("gmm")
    arrays.pop("gmm_lower_bounds", None)
    d = ThematicClusterer.from_state(info, arrays)
    np.testing.assert_array_equal(d.gmm_.precisions_, c.gmm_.precisions_)  # derived, so always restored
    assert d.gmm_.converged_ and d.gmm_.n_iter_ == 0 and np.isnan(d.gmm_.lower_bound_)
    np.testing.assert_array_equal(d.predict(X), c.predict(X))


@pytest.mark.parametrize(
    "kwargs, X, exc, match",
    [
        ({"n_clusters": 5}, np.eye(3, dtype=np.float32), ValueError, "larger than the number of points"),
        ({"n_clusters": 0}, np.eye(3, dtype=np.float32), ValueError, r"'n_clusters' .* int in the range \[1, inf\)"),
        ({"n_clusters": "many"}, np.eye(3, dtype=np.float32), ValueError, "'auto'"),
        ({"n_clusters": 2.5}, np.eye(3, dtype=np.float32), TypeError, "'n_clusters' .* must be an int"),
        ({"n_clusters": True}, np.eye(3, dtype=np.float32), TypeError, "n_clusters must be a positive integer"),
        ({"n_clusters": 2}, np.ones((10, 4), dtype=np.float32), ValueError, "only 1 distinct"),
        ({"n_clusters": 2}, np.zeros((0, 4), dtype=np.float32), ValueError, "empty"),
        ({"n_clusters": 2}, np.array([[0.0, np.nan], [1.0, 1.0]]), ValueError, "NaN"),
        ({"n_clusters": 2, "covariance_type": "weird"}, np.eye(3, dtype=np.float32), ValueError, "covariance_type"),
    ],
)
def test_bad_input_raises_clear_errors(kwargs, X, exc, match):
    with pytest.raises(exc, match=match):
        ThematicClusterer(**kwargs).fit(X)


def test_predict_checks_dimension(rng):
    X, _ = blobs(rng, k=2, per=20, dim=6)
    c = ThematicClusterer(n_clusters=2).fit(X)
    with pytest.raises(ValueError, match="dimension 5 but the clusterer was fitted on dimension 6"):
        c.predict(np.zeros((1, 5)))


def test_one_row_fast_path_equals_batch_predict():
    """predict() of one row (the per-query path) takes a shortcut; it must agree with the batch path."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(1500, 32)).astype(np.float32)
    clusterer = ThematicClusterer(n_clusters=7, random_state=0).fit(X)
    Y = rng.normal(size=(500, 32)).astype(np.float32)
    batch = clusterer.gmm_.predict(clusterer._transform(Y))  # scikit-learn's own predict
    assert [int(clusterer.predict(y[None])[0]) for y in Y] == batch.tolist()
