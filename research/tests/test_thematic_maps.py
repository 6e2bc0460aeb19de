"""The papers' thematic maps (research.thematic_maps) and their explanations file (research.explanations)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from llama_index_carag.datasets import demo_corpus_path
from research.explanations import load_explanations, project_2d
from research.thematic_maps import main, save_figure, thematic_map, thematic_map_3d, thematic_panels, theme_colors


def read_png(path: Path) -> np.ndarray:
    from matplotlib.image import imread

    return imread(str(path))


CENTRES = {"politics": (0.0, 0.0), "health": (4.0, 1.0), "climate": (1.0, 4.0)}


@pytest.fixture()
def blobs2d():
    rng = np.random.default_rng(1)
    xy = np.vstack([rng.normal(c, 0.7, size=(40, 2)) for c in CENTRES.values()] + [np.array([[6.0, 6.0], [6.5, 6.2]])])
    themes = [t for t in CENTRES for _ in range(40)] + ["tiny"] * 2
    points = {
        "RAG": (rng.normal((2, 2), 1.5, size=(6, 2)), list(CENTRES) * 2),
        "CARAG": (np.array(list(CENTRES.values()) * 2) + rng.normal(0, 0.3, (6, 2)), list(CENTRES) * 2),
        "CARAG-u": (np.array(list(CENTRES.values())) + rng.normal(0, 0.3, (3, 2)), list(CENTRES)),
        "BM25": (np.array([[6.2, 6.1]]), ["tiny"]),
    }
    return xy, themes, points


def contour_sets(ax):
    from matplotlib.contour import ContourSet

    return [c for c in ax.get_children() if isinstance(c, ContourSet)]


def legend_labels(fig):
    return [[t.get_text() for t in leg.get_texts()] for leg in fig.legends]


def test_thematic_map_contours_markers_and_legends(tmp_path, blobs2d, caplog):
    xy, themes, points = blobs2d
    with caplog.at_level("INFO", logger="research.thematic_maps"):
        fig = thematic_map(xy, themes, points, title="Figure 8")
    assert len(fig.axes) == 1
    ax = fig.axes[0]
    assert len(contour_sets(ax)) == 2 * 3  # filled + lines per theme; none for the 2-point theme
    assert "tiny" in caplog.text and "fewer than 3" in caplog.text
    assert legend_labels(fig) == [["climate", "health", "politics", "tiny"], ["RAG", "CARAG", "CARAG-u", "BM25"]]
    method_handles = fig.legends[1].legend_handles
    assert [h.get_marker() for h in method_handles] == ["o", "D", "^", "s"]
    assert [h.get_markerfacecolor() for h in method_handles[:3]] == ["#D62728", "#2CA02C", "#1F77B4"]
    path = save_figure(fig, tmp_path / "map.png", dpi=50)
    w, h = fig.get_size_inches()
    assert read_png(path).shape[:2] == (round(h * 50), round(w * 50))


def test_thematic_panels_one_axes_per_theme(tmp_path, blobs2d):
    xy, themes, points = blobs2d
    fig = thematic_panels(xy, themes, points, ncols=2)
    assert [ax.get_title() for ax in fig.axes] == ["climate", "health", "politics", "tiny"]
    assert len(fig.legends) == 2
    for ax in fig.axes:
        assert len(contour_sets(ax)) == 6  # every panel shows all themes' densities
        method_points = sum(len(c.get_offsets()) for c in ax.collections if c.get_zorder() == 6)
        expected = sum(ths.count(ax.get_title()) for _, ths in points.values())
        assert method_points == expected
    assert read_png(save_figure(fig, tmp_path / "panels.png", dpi=40)).ndim == 3


def test_thematic_map_3d_hulls_skip_degenerate_themes(tmp_path, caplog):
    from mpl_toolkits.mplot3d.art3d import Poly3DCollection

    rng = np.random.default_rng(2)
    xyz = np.vstack(
        [rng.normal((*c, 0.0), 0.7, size=(30, 3)) for c in CENTRES.values()]
        + [
            np.array([[5, 5, 5], [6, 6, 6], [7, 7, 7], [8, 8, 8.0]]),  # collinear
            np.array([[0, 6, 0], [1, 6, 0], [0, 7, 0], [1, 7, 0.0]]),  # coplanar
            np.array([[9, 0, 0], [9, 1, 1.0]]),
        ]
    )  # two points
    themes = [t for t in CENTRES for _ in range(30)] + ["line"] * 4 + ["plane"] * 4 + ["pair"] * 2
    points = {
        "CARAG-u": (rng.normal(size=(4, 3)), ["health", "politics", "climate", "line"]),
        "RAG": (rng.normal(size=(2, 3)), ["health", "pair"]),
    }
    with caplog.at_level("INFO", logger="research.thematic_maps"):
        fig = thematic_map_3d(xyz, themes, points)
    assert len(fig.axes) == 1 and fig.axes[0].name == "3d"
    hulls = [c for c in fig.axes[0].collections if isinstance(c, Poly3DCollection)]
    assert len(hulls) == 3
    assert caplog.text.count("no convex hull") == 3
    assert legend_labels(fig)[0] == ["climate", "health", "line", "pair", "plane", "politics"]
    assert legend_labels(fig)[1] == ["CARAG-u", "RAG"]
    assert read_png(save_figure(fig, tmp_path / "map3d.png", dpi=40)).shape[:2] == (280, 360)


def test_thematic_maps_handle_math_text_and_bad_shapes(tmp_path):
    xy = np.array([[0, 0], [1, 0], [0, 1], [1, 1.0]])
    fig = thematic_map(xy, ["$x^{2$"] * 2 + ["costs $5"] * 2, {"$$": (xy[:1], ["costs $5"])})
    save_figure(fig, tmp_path / "math.png", dpi=30)
    with pytest.raises(ValueError):
        thematic_map(np.zeros((3, 3)), ["a"] * 3, {})
    with pytest.raises(ValueError):
        thematic_map(xy, ["a"] * 3, {})
    with pytest.raises(ValueError):
        thematic_map_3d(xy, ["a"] * 4, {})


def test_load_explanations(tmp_path, factver_path):
    from tests.conftest import PAPER_EXPLANATIONS_CSV

    if PAPER_EXPLANATIONS_CSV.is_file():
        e = load_explanations(PAPER_EXPLANATIONS_CSV)
        assert len(e.claims) == 30 and e.methods == ["Annotated", "RAG", "CARAG", "CARAG_U"]
        assert sorted(set(e.themes)) == ["Climate", "Covid", "Electric_Vehicles"]
        assert load_explanations(PAPER_EXPLANATIONS_CSV, ["RAG", "CARAG"]).methods == ["RAG", "CARAG"]
    bad = tmp_path / "x.csv"
    bad.write_text("Theme,RAG\nA,\n", encoding="utf-8")
    with pytest.raises(ValueError, match="empty RAG explanation"):
        load_explanations(bad)
    with pytest.raises(ValueError, match="no column"):
        load_explanations(bad, ["CARAG"])


def test_project_2d_fits_explanations_and_corpus_together():
    rng = np.random.default_rng(0)
    corpus, expl = rng.normal(size=(20, 5)), {"RAG": rng.normal(size=(3, 5)), "CARAG": rng.normal(size=(2, 5))}
    corpus_xy, xy = project_2d(corpus, expl)
    assert corpus_xy.shape == (20, 2) and xy["RAG"].shape == (3, 2) and xy["CARAG"].shape == (2, 2)
    corpus_xyz, _ = project_2d(corpus, expl, n_components=3)
    assert corpus_xyz.shape == (20, 3)
    with pytest.raises(ValueError, match="different dimensions"):
        project_2d(corpus, {"RAG": rng.normal(size=(3, 4))})
    with pytest.raises(ValueError, match="'pca' or 'tsne'"):
        project_2d(corpus, expl, method="umap")


def test_theme_colours_are_stable():
    a = theme_colors(["b", "a", "c", "a"])
    assert list(a) == ["a", "b", "c"] and len(set(a.values())) == 3
    assert theme_colors(["c", "b", "a"]) == a


def test_entry_point_draws_the_maps_of_an_index(tmp_path, capsys):
    """``python -m research.thematic_maps`` (formerly ``carag map``) on an index of the demo corpus."""
    from llama_index_carag.cli.main import main as carag

    index = tmp_path / "index"
    assert carag(["-q", "index", str(demo_corpus_path()), "--out", str(index), "--clusters", "3"]) == 0
    expl = tmp_path / "expl.csv"
    with expl.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["Claim_id", "Theme", "RAG", "CARAG_U"])
        w.writerow(["1", "Oceans", "Sugar is added to drinks.", "Warm seas bleach corals [1]."])
        w.writerow(["2", "Energy", "Coral reefs are bleached.", "Solar modules became much cheaper."])
        w.writerow(["3", "Nutrition", "Wind turbines stand offshore.", "Soft drinks add sugar for children."])
    out, panels = tmp_path / "map.png", tmp_path / "panels.png"
    assert main(["--index", str(index), "--explanations", str(expl), "--out", str(out), "--panels", str(panels)]) == 0
    assert min(read_png(out).shape[:2]) > 300 and min(read_png(panels).shape[:2]) > 300
    bad = tmp_path / "bad.csv"
    bad.write_text("claim,text\na,b\n", encoding="utf-8")
    with pytest.raises(ValueError, match="Theme"):
        main(["--index", str(index), "--explanations", str(bad), "--out", str(out)])
