"""Thematic clustering of embeddings with a Gaussian mixture fitted by EM.

:class:`ThematicClusterer` follows scikit-learn's estimator conventions:
hyper-parameters are stored unchanged by ``__init__``, ``fit`` learns the
state (attributes with a trailing underscore), ``predict`` gives the hard
assignment the papers use and ``predict_proba`` the soft one.

Large corpora: ``fit`` runs EM on a bounded random sample (``max_fit_samples``)
and assigns every row with a batched ``predict``, so the cost of fitting does
not grow with the corpus beyond one pass of prediction.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping, Sequence
from numbers import Integral, Real
from typing import Any, ClassVar, Literal

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.decomposition import PCA
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from llama_index_carag.core.store_rows import StackedRows
from llama_index_carag.core.vectors import as_matrix, l2_normalize

logger = logging.getLogger(__name__)

COVARIANCE_TYPES = ("diag", "full", "spherical", "tied")
_STATE_VERSION = 1


def _progress(iterable: Any, *, total: int, desc: str, enabled: bool) -> Any:
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, unit="batch")


class ThematicClusterer(ClusterMixin, BaseEstimator):
    """Gaussian-mixture (EM) clustering of sentence embeddings, hard assignment.

    Why ``covariance_type="diag"`` on the raw vectors is the default
    (``benchmarks/bench_clustering.py``, FactVer: 3,681 claims + evidence, MiniLM
    384-d, 10 clusters, 3 seeds, 2 CPU cores): diagonal covariance fits in about
    0.5 s with theme NMI 0.44.  Full covariance on the raw vectors needs
    ``d*(d+1)/2 = 73,920`` parameters per cluster — far more than the few hundred
    points a cluster holds, so it is ill-conditioned and only the ``reg_covar``
    ridge keeps it invertible — and bought NMI 0.45 at 3x the time; its cost grows
    with ``d**2`` per point, which rules it out at 100k+ passages.  Full covariance
    after PCA to 16–64 dimensions (``reduce_dim``) reached NMI 0.46–0.47 in
    0.4–1.8 s: a small gain, offered as an option, not worth a second model
    (the PCA) in the default.  Diagonal covariance scales linearly in ``d`` and
    in the number of points.

    Args:
        n_clusters: number of mixture components ``t`` (papers: 10), or ``"auto"``
            to pick it by the lowest BIC over ``auto_range``.
        covariance_type: ``"diag"`` (default), ``"full"``, ``"spherical"`` or ``"tied"``.
        reduce_dim: if set, project onto this many principal components before
            the mixture (advisable with ``"full"`` on 384/768-d vectors).
        random_state: seed for the sample, the k-means initialisation and EM.
        max_iter: EM iterations.
        n_init: EM restarts (the best likelihood is kept).
        reg_covar: ridge added to the covariance diagonal.
        max_fit_samples: fit EM on at most this many rows drawn at random,
            then assign all rows with ``predict``.
        auto_range: ``(low, high)`` inclusive range of cluster counts tried by ``"auto"``.
        batch_size: rows per batch in ``predict``/``predict_proba``.
        normalize: L2-normalise rows (batch by batch, so a large input is never
            copied whole) before clustering and predicting.
        show_progress: show progress bars while fitting and assigning.

    Attributes:
        gmm_: the fitted :class:`sklearn.mixture.GaussianMixture`.
        pca_: the fitted :class:`sklearn.decomposition.PCA`, or ``None``.
        labels_: cluster of each training row, shape ``(n,)``.
        n_clusters_: number of clusters actually used.
        n_features_in_: embedding dimension ``d``.
        bic_: ``{n_clusters: BIC}`` for ``"auto"``; one entry otherwise.

    The parameters are checked by :meth:`fit` (scikit-learn's ``_parameter_constraints``).
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "n_clusters": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "covariance_type": [StrOptions(set(COVARIANCE_TYPES))],
        "reduce_dim": [Interval(Integral, 1, None, closed="left"), None],
        "random_state": ["random_state"],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "n_init": [Interval(Integral, 1, None, closed="left")],
        "reg_covar": [Interval(Real, 0, None, closed="left")],
        "max_fit_samples": [Interval(Integral, 1, None, closed="left")],
        "auto_range": [tuple, list],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "normalize": ["boolean"],
        "show_progress": ["boolean"],
    }

    def __init__(
        self,
        n_clusters: int | Literal["auto"] = 10,
        *,
        covariance_type: str = "diag",
        reduce_dim: int | None = None,
        random_state: int | None = 0,
        max_iter: int = 200,
        n_init: int = 1,
        reg_covar: float = 1e-5,
        max_fit_samples: int = 20_000,
        auto_range: tuple[int, int] = (2, 20),
        batch_size: int = 8192,
        normalize: bool = False,
        show_progress: bool = False,
    ) -> None:
        self.n_clusters = n_clusters
        self.covariance_type = covariance_type
        self.reduce_dim = reduce_dim
        self.random_state = random_state
        self.max_iter = max_iter
        self.n_init = n_init
        self.reg_covar = reg_covar
        self.max_fit_samples = max_fit_samples
        self.auto_range = auto_range
        self.batch_size = batch_size
        self.normalize = normalize
        self.show_progress = show_progress

    # ------------------------------------------------------------------ checks
    def _candidates(self, n_samples: int) -> list[int]:
        """The cluster counts to try on ``n_samples`` rows (the parameters' own ranges are checked already)."""
        if isinstance(self.n_clusters, str):  # "auto"
            low, high = self.auto_range
            if not (isinstance(low, Integral) and isinstance(high, Integral) and 1 <= low <= high):
                raise ValueError(f"auto_range must be (low, high) with 1 <= low <= high; got {self.auto_range!r}.")
            high = min(int(high), n_samples)
            if low > high:
                raise ValueError(f"n_clusters='auto' needs at least {low} points; got {n_samples}.")
            return list(range(int(low), high + 1))
        if isinstance(self.n_clusters, bool):  # an Integral to Python, never a cluster count
            raise TypeError(f"n_clusters must be a positive integer or 'auto'; got {self.n_clusters!r}.")
        if self.n_clusters > n_samples:
            raise ValueError(
                f"n_clusters={self.n_clusters} is larger than the number of points to cluster ({n_samples})."
            )
        return [int(self.n_clusters)]

    # --------------------------------------------------------------------- fit
    def fit(
        self, X: Sequence[Sequence[float]] | np.ndarray, y: Any = None, *, order: np.ndarray | None = None
    ) -> ThematicClusterer:
        """Fit the mixture on ``X`` (shape ``(n, d)``) and assign every row.

        Args:
            X: the embeddings.
            order: optional permutation of the rows that defines their canonical
                order (e.g. sorted by node id): the random sample and the EM
                initialisation follow it, so the same data gives the same clusters
                whatever order a vector store returns it in.  ``labels_`` stay in
                ``X``'s row order.

        Raises:
            ValueError: empty input, NaN/inf values, invalid hyper-parameters,
                more clusters than points, or fewer distinct points than clusters.
        """
        self._validate_params()
        matrix = _rows(X)
        n_samples = matrix.shape[0]
        if n_samples == 0:
            raise ValueError("Cannot cluster an empty set of embeddings.")
        candidates = self._candidates(n_samples)
        sample = self._fit_sample(matrix, order)
        n_distinct = _count_distinct(sample, limit=max(candidates))
        if n_distinct < min(candidates):
            raise ValueError(
                f"The embeddings hold only {n_distinct} distinct vector(s), fewer than "
                f"n_clusters={min(candidates)}; lower n_clusters."
            )
        self.n_features_in_ = matrix.shape[1]
        self._select_mixture(self._fit_projection(sample), [k for k in candidates if k <= n_distinct])
        self.labels_ = self.predict(matrix)
        return self

    def _fit_sample(self, matrix: np.ndarray, order: np.ndarray | None) -> np.ndarray:
        """The rows EM is fitted on (the random sample, in canonical order), unit-normalised if asked."""
        n_samples = matrix.shape[0]
        if order is not None:
            order = np.asarray(order, dtype=np.int64)
            if order.shape != (n_samples,):
                raise ValueError("order must be a permutation of the rows of X.")
        positions = self.sample_positions(n_samples)
        if positions is not None:
            sample = matrix[order[positions] if order is not None else positions]
            logger.info("Fitting the mixture on a random sample of %d of %d rows", len(positions), n_samples)
        else:
            sample = matrix if order is None else matrix[order]
        return l2_normalize(sample) if self.normalize else sample

    def _fit_projection(self, sample: np.ndarray) -> np.ndarray:
        """Fit ``pca_`` (or set it to ``None``) and return the sample in the space EM works in (float32)."""
        self.pca_ = None
        if self.reduce_dim is not None and self.reduce_dim < min(sample.shape):
            self.pca_ = PCA(n_components=int(self.reduce_dim), random_state=self.random_state).fit(sample)
            return self.pca_.transform(sample).astype(np.float32)
        return np.asarray(sample, dtype=np.float32)  # float32 halves EM's temporaries

    def _select_mixture(self, sample_t: np.ndarray, candidates: list[int]) -> None:
        """Fit one mixture per candidate ``t``; keep the lowest BIC (``gmm_``, ``n_clusters_``, ``bic_``)."""
        self.bic_: dict[int, float] = {}
        best: GaussianMixture | None = None
        for k in _progress(
            candidates, total=len(candidates), desc="GMM-EM (BIC)", enabled=self.show_progress and len(candidates) > 1
        ):
            gmm = self._fit_one(sample_t, k)
            self.bic_[k] = float(gmm.bic(sample_t)) if len(candidates) > 1 else float("nan")
            if best is None or self.bic_[k] < self.bic_[best.n_components]:
                best = gmm
        assert best is not None
        self.gmm_ = best
        self.n_clusters_ = int(best.n_components)
        if len(candidates) > 1:
            logger.info("BIC chose %d clusters out of %s", self.n_clusters_, candidates)

    def sample_positions(self, n_samples: int) -> np.ndarray | None:
        """Sorted positions (in canonical order) of the rows EM is fitted on, or ``None`` for all rows.

        Deterministic in ``random_state``; lets a remote store fetch exactly the
        sample an in-memory fit would use.
        """
        if n_samples <= self.max_fit_samples:
            return None
        rng = np.random.default_rng(self.random_state)
        return np.sort(rng.choice(n_samples, size=int(self.max_fit_samples), replace=False))

    def _fit_one(self, sample: np.ndarray, k: int) -> GaussianMixture:
        if sample.shape[0] == 1:
            # scikit-learn needs two rows; a repeated point has the same maximum-likelihood fit.
            sample = np.vstack([sample, sample])
        gmm = GaussianMixture(
            n_components=k,
            covariance_type=self.covariance_type,
            reg_covar=float(self.reg_covar),
            max_iter=int(self.max_iter),
            n_init=int(self.n_init),
            random_state=self.random_state,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            try:
                gmm.fit(sample)
            except ValueError as exc:  # ill-defined covariance and the like
                raise ValueError(
                    f"The Gaussian mixture could not be fitted with {k} clusters "
                    f"({exc}); try fewer clusters or a larger reg_covar."
                ) from None
        return gmm

    def fit_predict(self, X: Any, y: Any = None, *, order: np.ndarray | None = None) -> np.ndarray:
        """Fit (``order`` as in :meth:`fit`) and return ``labels_`` (shape ``(n,)``)."""
        return self.fit(X, order=order).labels_

    # ----------------------------------------------------------------- predict
    def _transform(self, matrix: np.ndarray) -> np.ndarray:
        if getattr(self, "normalize", False):
            matrix = l2_normalize(matrix)
        if self.pca_ is not None:
            return self.pca_.transform(matrix).astype(np.float32)
        return np.asarray(matrix, dtype=np.float32)

    def _checked(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "gmm_")
        matrix = _rows(X)
        if matrix.shape[0] and matrix.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has dimension {matrix.shape[1]} but the clusterer was fitted on dimension {self.n_features_in_}."
            )
        return matrix

    def predict(self, X: Any) -> np.ndarray:
        """Hard cluster of each row of ``X`` (shape ``(n, d)``) → int array ``(n,)``."""
        matrix = self._checked(X)
        n = matrix.shape[0]
        if n == 1 and self.gmm_.covariance_type == "diag":
            return np.array([_diag_argmax(self.gmm_, self._transform(matrix[0:1]))], dtype=np.int64)
        out = np.empty(n, dtype=np.int64)
        starts = range(0, n, int(self.batch_size))
        for start in _progress(
            starts, total=len(starts), desc="Assigning clusters", enabled=self.show_progress and len(starts) > 1
        ):
            stop = start + int(self.batch_size)
            out[start:stop] = self.gmm_.predict(self._transform(matrix[start:stop]))
        return out

    def predict_proba(self, X: Any) -> np.ndarray:
        """Posterior probability of each cluster for each row → float array ``(n, n_clusters_)``."""
        matrix = self._checked(X)
        parts = [
            self.gmm_.predict_proba(self._transform(matrix[s : s + int(self.batch_size)]))
            for s in range(0, matrix.shape[0], int(self.batch_size))
        ]
        if not parts:
            return np.zeros((0, self.n_clusters_))
        return np.vstack(parts)

    # --------------------------------------------------------------- state I/O
    def get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The fitted state as (JSON-safe dict, named float/int arrays); no pickle involved."""
        check_is_fitted(self, "gmm_")
        params = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.get_params().items()}
        info = {
            "version": _STATE_VERSION,
            "params": params,
            "n_clusters_": self.n_clusters_,
            "n_features_in_": int(self.n_features_in_),
            "bic_": {str(k): v for k, v in self.bic_.items()},
            "has_pca": self.pca_ is not None,
            "gmm": {  # how EM ended (restored as they were; predictions do not use them)
                "converged_": bool(self.gmm_.converged_),
                "n_iter_": int(self.gmm_.n_iter_),
                "lower_bound_": float(self.gmm_.lower_bound_),
            },
        }
        arrays = {
            "gmm_weights": self.gmm_.weights_,
            "gmm_means": self.gmm_.means_,
            "gmm_covariances": self.gmm_.covariances_,
            "gmm_precisions_cholesky": self.gmm_.precisions_cholesky_,
            "labels": self.labels_,
        }
        if getattr(self.gmm_, "lower_bounds_", None) is not None:  # scikit-learn >= 1.6
            arrays["gmm_lower_bounds"] = np.asarray(self.gmm_.lower_bounds_)
        if self.pca_ is not None:
            arrays["pca_components"] = self.pca_.components_
            arrays["pca_mean"] = self.pca_.mean_
            arrays["pca_explained_variance"] = self.pca_.explained_variance_
        return info, arrays

    @classmethod
    def from_state(cls, info: dict[str, Any], arrays: dict[str, np.ndarray]) -> ThematicClusterer:
        """Rebuild a fitted clusterer from :meth:`get_state`'s output.

        Raises:
            ValueError: unknown version, missing arrays or inconsistent shapes.
        """
        if info.get("version") != _STATE_VERSION:
            raise ValueError(f"Unsupported clusterer state version {info.get('version')!r}.")
        params = dict(info["params"])
        if isinstance(params.get("auto_range"), list):
            params["auto_range"] = tuple(params["auto_range"])
        self = cls(**params)
        try:
            k = int(info["n_clusters_"])
            d = int(info["n_features_in_"])
            gmm = _mixture_from_state(k, self.covariance_type, info.get("gmm"), arrays)
            self.pca_ = None
            if info.get("has_pca"):
                pca = PCA(n_components=gmm.means_.shape[1])
                pca.components_ = np.asarray(arrays["pca_components"])
                pca.mean_ = np.asarray(arrays["pca_mean"])
                pca.explained_variance_ = np.asarray(arrays["pca_explained_variance"])
                pca.n_components_ = pca.components_.shape[0]
                pca.n_features_in_ = d
                pca.whiten = False
                if pca.components_.shape != (gmm.means_.shape[1], d):
                    raise ValueError("PCA arrays do not match the mixture")
                self.pca_ = pca
            elif gmm.means_.shape[1] != d:
                raise ValueError("mixture dimension does not match n_features_in_")
        except KeyError as exc:
            raise ValueError(f"Clusterer state lacks the array {exc}.") from None
        self.gmm_ = gmm
        self.n_clusters_ = k
        self.n_features_in_ = d
        self.bic_ = {int(key): float(v) for key, v in info.get("bic_", {}).items()}
        self.labels_ = np.asarray(arrays["labels"], dtype=np.int64)
        return self


def _mixture_from_state(
    k: int, covariance_type: str, ended: Mapping[str, Any] | None, arrays: Mapping[str, np.ndarray]
) -> GaussianMixture:
    """A fitted ``GaussianMixture`` with every attribute ``fit`` sets, from the saved arrays.

    ``precisions_`` is recomputed from ``precisions_cholesky_`` as scikit-learn's
    ``_set_parameters`` does.  ``converged_``, ``n_iter_``, ``lower_bound_`` and
    ``lower_bounds_`` come back as saved; states written before they were saved get
    ``True``, ``0``, NaN and no ``lower_bounds_``.

    Raises:
        KeyError: a missing array.  ValueError: non-float arrays or shapes that do not match ``k``.
    """
    gmm = GaussianMixture(n_components=k, covariance_type=covariance_type)
    gmm.weights_ = np.asarray(arrays["gmm_weights"])  # dtypes as saved: predictions stay bit-identical
    gmm.means_ = np.asarray(arrays["gmm_means"])
    gmm.covariances_ = np.asarray(arrays["gmm_covariances"])
    gmm.precisions_cholesky_ = np.asarray(arrays["gmm_precisions_cholesky"])
    for name in ("weights_", "means_", "covariances_", "precisions_cholesky_"):
        if getattr(gmm, name).dtype.kind != "f":
            raise ValueError(f"mixture array {name} is not floating point")
    if gmm.weights_.shape != (k,) or gmm.means_.shape[0] != k:
        raise ValueError("mixture arrays do not match n_clusters_")
    gmm.precisions_ = _precisions(gmm.precisions_cholesky_, covariance_type)
    ended = dict(ended or {})
    gmm.converged_ = bool(ended.get("converged_", True))
    gmm.n_iter_ = int(ended.get("n_iter_", 0))
    gmm.lower_bound_ = float(ended.get("lower_bound_", float("nan")))
    if "gmm_lower_bounds" in arrays:
        gmm.lower_bounds_ = list(np.asarray(arrays["gmm_lower_bounds"]))
    gmm.n_features_in_ = gmm.means_.shape[1]
    return gmm


def _precisions(precisions_cholesky: np.ndarray, covariance_type: str) -> np.ndarray:
    """``precisions_`` from ``precisions_cholesky_``, the operations of ``GaussianMixture._set_parameters``.

    Shapes: full ``(k, d, d)``, tied ``(d, d)``, diag ``(k, d)``, spherical ``(k,)``, as the input.
    """
    if covariance_type == "full":
        out = np.empty_like(precisions_cholesky)
        for c in range(precisions_cholesky.shape[0]):
            out[c] = precisions_cholesky[c] @ precisions_cholesky[c].T
        return out
    if covariance_type == "tied":
        return precisions_cholesky @ precisions_cholesky.T
    return precisions_cholesky**2


def _rows(X: Any) -> Any:
    """``X`` as a checked float32 matrix; a :class:`StackedRows` (a store's rows lent in place) as it is."""
    return X if isinstance(X, StackedRows) else as_matrix(X, name="X")


def _count_distinct(matrix: np.ndarray, *, limit: int) -> int:
    """Number of distinct rows, counting up to ``limit`` (cheap early stop on big inputs)."""
    if matrix.shape[0] <= 50_000:
        return int(np.unique(matrix, axis=0).shape[0])
    head = matrix[: max(limit * 100, 1000)]
    return int(np.unique(head, axis=0).shape[0])


def clusterers_state(
    clusterers: dict[str | None, ThematicClusterer], centroids: dict[str, np.ndarray]
) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
    """``(infos, arrays)`` of a context's clusterers (one per theme) and theme centroids."""
    infos: list[dict[str, Any]] = []
    arrays: dict[str, np.ndarray] = {}
    for i, theme in enumerate(clusterers):
        c_info, c_arrays = clusterers[theme].get_state()
        infos.append(c_info)
        for name, arr in c_arrays.items():
            arrays[f"clusterer{i}_{name}"] = arr
        if theme is not None:
            arrays[f"centroid{i}"] = centroids[theme]
    return infos, arrays


def clusterers_from_state(
    themes: list[str | None], infos: list[dict[str, Any]], arrays: Mapping[str, np.ndarray]
) -> tuple[dict[str | None, ThematicClusterer], dict[str, np.ndarray]]:
    """The clusterers and theme centroids saved by :func:`clusterers_state`."""
    clusterers: dict[str | None, ThematicClusterer] = {}
    centroids: dict[str, np.ndarray] = {}
    for i, (theme, c_info) in enumerate(zip(themes, infos)):
        prefix = f"clusterer{i}_"
        c_arrays = {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}
        clusterers[theme] = ThematicClusterer.from_state(c_info, c_arrays)
        if theme is not None:
            centroids[theme] = np.asarray(arrays[f"centroid{i}"], dtype=np.float32)
    return clusterers, centroids


def _diag_argmax(gmm: Any, x: np.ndarray) -> int:
    """``gmm.predict(x)`` for one row of a diagonal mixture: scikit-learn's own formula
    (``_estimate_log_gaussian_prob`` + log weights, same operations in the same order), without its
    input validation, which costs ~0.5 ms per query, 20x the arithmetic."""
    precisions = gmm.precisions_cholesky_**2
    means = gmm.means_
    log_prob = np.sum(means**2 * precisions, 1) - 2.0 * np.dot(x, (means * precisions).T) + np.dot(x**2, precisions.T)
    log_det = np.sum(np.log(gmm.precisions_cholesky_), axis=1)
    weighted = -0.5 * (x.shape[1] * np.log(2 * np.pi) + log_prob) + log_det + np.log(gmm.weights_)
    return int(weighted.argmax(axis=1)[0])
