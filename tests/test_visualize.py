"""Tests of llama_index_carag.visualize: SOI/cluster graphs, HTML (escaping, offline
rendering in headless Chromium when installed) and PNGs.  All offline, CPU."""

from __future__ import annotations

import html
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from llama_index_carag import visualize as V
from llama_index_carag.core.soi import SOIItem, SubsetOfInterest

CHROMIUM = Path("/usr/bin/chromium")
# CI installs Chromium (.ci/run); there a missing browser is a failure, not a skip.
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists() and not os.environ.get("CI"),
    reason="headless Chromium not installed (apt-get install chromium)",
)

HOSTILE = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'
# payloads that leave a trace in the DOM if they ever execute
DOM_SCRIPT = "<script>document.body.setAttribute('data-pwned','2')</script>"
DOM_IMG = "<img src=x onerror=\"document.body.setAttribute('data-pwned','1')\">"


# --------------------------------------------------------------------------- #
# fixtures / helpers
# --------------------------------------------------------------------------- #


def supervised_soi(**overrides) -> SubsetOfInterest:
    fields = dict(
        claim_id="c0",
        claim="Vaccines cause autism.",
        annotated_evidences=[
            SOIItem("e0a", "Large cohort studies found no link. " * 6, 0.93, "c0"),
            SOIItem("e0b", "A retracted 1998 paper claimed a link.", 0.81, "c0"),
        ],
        related_claims=[
            SOIItem("c1", "MMR vaccine is unsafe.", 0.88, "c1"),
            SOIItem("c2", "Vaccines contain mercury.", 0.79, "c2"),
        ],
        thematic_cluster_evidences=[
            SOIItem("e1a", "MMR safety review.", 0.85, "c1"),
            SOIItem("e2a", "Thimerosal was removed in 2001.", 0.77, "c2"),
            SOIItem("e2b", "Thimerosal is ethylmercury.", 0.76, "c2"),
            SOIItem("eX", "Evidence of a claim outside the SOI.", 0.755, "c9"),
        ],
        mode="supervised",
        delta=0.75,
        cluster=3,
        theme="health",
        cluster_size=14,
    )
    fields.update(overrides)
    soi = SubsetOfInterest(**fields)
    soi.similarities = {i.id: i.similarity for i in soi.items()}
    return soi


def unsupervised_soi(n: int = 6) -> SubsetOfInterest:
    items = [SOIItem(f"r{i}", f"refined passage {i}", 0.95 - 0.03 * i) for i in range(n)]
    return SubsetOfInterest(
        claim_id=None,
        claim="A new claim",
        refined_cluster_evidences=items,
        mode="unsupervised",
        delta=0.7,
        cluster=1,
        cluster_size=20,
    )


STANCE_NAMES = ("SUPPORTED", "REFUTED", "NOT_ENOUGH_INFO")


def stance_evidence() -> list[dict]:
    """Four retrieved passages of :func:`unsupervised_soi`: three SOI members and one outsider, each with a stance."""
    return [
        {"rank": 1, "id": "r0", "text": "refined passage 0", "stance": "SUPPORTED", "stance_score": 0.91},
        {"id": "out", "text": "outside the SOI", "carag": {"claim_similarity": 0.5, "stance": "T"}},
        {"id": "r1", "text": "refined passage 1", "carag": {"stance": "REFUTED", "stance_score": 0.7}},
        {"id": "r2", "text": "refined passage 2", "stance": "NOT_ENOUGH_INFO"},
    ]


def hostile_soi(payload: str = HOSTILE, claim: str | None = None) -> SubsetOfInterest:
    return SubsetOfInterest(
        claim_id="c0",
        claim=claim if claim is not None else payload,
        mode="unsupervised",
        delta=0.5,
        cluster=0,
        refined_cluster_evidences=[SOIItem(payload, payload, 0.9), SOIItem("safe", f"prefix {payload} suffix", 0.8)],
    )


def read_png(path: Path) -> np.ndarray:
    from matplotlib.image import imread

    return imread(str(path))


def unescape_json(text: str) -> str:
    """Undo JSON ``\\uXXXX`` escapes (Plotly writes ``<`` as ``\\u003c``) so checks see the real characters."""
    return re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), text)


def all_strings(obj) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in all_strings(v)]
    if isinstance(obj, (list, tuple)):
        return [s for v in obj for s in all_strings(v)]
    return []


def run_chromium(tmp_path: Path, url: str, *extra: str) -> subprocess.CompletedProcess:
    profile = tmp_path / "chromium-profile"
    cmd = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--window-size=1200,900",
        "--virtual-time-budget=5000",
        *extra,
        url,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90)


# --------------------------------------------------------------------------- #
# import cost
# --------------------------------------------------------------------------- #


def test_import_is_lazy():
    code = (
        "import sys, llama_index_carag as p; before = set(sys.modules); "
        "import llama_index_carag.visualize; "
        "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
        "print(sorted(new & {'plotly', 'matplotlib', 'networkx', 'mpl_toolkits', 'PIL'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------- #
# soi_graph / layout
# --------------------------------------------------------------------------- #


def test_soi_graph_nodes_edges_and_weights():
    soi = supervised_soi()
    g = V.soi_graph(soi)
    kinds = [d["kind"] for _, d in g.nodes(data=True)]
    assert kinds.count("claim") == 1
    assert kinds.count("annotated_evidence") == len(soi.annotated_evidences) == 2
    assert kinds.count("related_claim") == len(soi.related_claims) == 2
    assert kinds.count("thematic_evidence") == len(soi.thematic_cluster_evidences) == 4
    assert kinds.count("refined_evidence") == 0
    assert g.number_of_nodes() == 1 + len(soi)
    assert g.graph["claim_node"] == "c0" and g.nodes["c0"]["kind"] == "claim"
    for item in soi.items():
        assert g.has_edge("c0", item.id)
        edge = g.edges["c0", item.id]
        assert edge["weight"] == item.similarity
        assert edge["label"] == f"{item.similarity:.2f}"
        assert edge["relation"] == "similarity"
        assert g.nodes[item.id]["text"] == item.text and g.nodes[item.id]["similarity"] == item.similarity
    assert set(g.neighbors("c0")) == set(soi.item_ids)
    # related claim -> its thematic evidence; none for evidence of a claim outside the SOI
    annotated_for = {frozenset((u, v)) for u, v, d in g.edges(data=True) if d["relation"] == "annotated_for"}
    assert annotated_for == {frozenset(p) for p in [("c1", "e1a"), ("c2", "e2a"), ("c2", "e2b")]}
    assert g.edges["c2", "e2b"]["weight"] == 0.76
    assert g.number_of_edges() == len(soi) + 3


def test_soi_graph_unsupervised_query_node_and_empty():
    soi = unsupervised_soi(4)
    g = V.soi_graph(soi)
    assert g.graph["claim_node"] == "query" and g.nodes["query"]["kind"] == "claim"
    assert sorted(d["kind"] for n, d in g.nodes(data=True) if n != "query") == ["refined_evidence"] * 4
    empty = V.soi_graph(SubsetOfInterest(claim_id=None, claim="lonely"))
    assert list(empty.nodes) == ["query"] and empty.number_of_edges() == 0


def test_soi_graph_keeps_colliding_ids_apart():
    soi = SubsetOfInterest(
        claim_id=None,
        claim="q",
        refined_cluster_evidences=[
            SOIItem("query", "an item named like the claim node", 0.9),
            SOIItem("dup", "a", 0.8),
            SOIItem("dup", "b", 0.7),
        ],
    )
    g = V.soi_graph(soi)
    assert g.number_of_nodes() == 4 and g.degree("query") == 3
    assert sorted(d["item_id"] for n, d in g.nodes(data=True) if n != "query") == ["dup", "dup", "query"]


def test_soi_layout_is_deterministic_with_claim_at_centre():
    g = V.soi_graph(supervised_soi())
    pos = V.soi_layout(g)
    assert pos == V.soi_layout(V.soi_graph(supervised_soi()))
    assert pos["c0"] == (0.0, 0.0)
    radius = {n: math.hypot(*p) for n, p in pos.items()}
    assert radius["e0a"] < radius["e0b"] < radius["e2b"]  # more similar = closer to the claim
    assert all(0.4 < r <= 1.0 + 1e-9 for n, r in radius.items() if n != "c0")
    assert len({(round(x, 6), round(y, 6)) for x, y in pos.values()}) == len(pos)


# --------------------------------------------------------------------------- #
# soi_figure
# --------------------------------------------------------------------------- #


def node_traces(fig):
    """The traces that draw nodes (legend-only shape entries have no point)."""
    return [t for t in fig.data if t.showlegend is not False and t.mode and "markers" in t.mode and t.x != (None,)]


def legend_only(fig):
    return [t for t in fig.data if t.legendgroup == "shape" and t.x == (None,)]


def test_soi_figure_colour_is_stance_shape_is_kind():
    soi = supervised_soi()
    fig = V.soi_figure(soi)
    traces = node_traces(fig)
    # no evidence: one stance trace (not scored) holding every item, then the claim
    assert [t.name for t in traces] == ["stance not scored", "claim"]
    assert len(traces[0].x) == len(soi) == 8 and traces[0].marker.color == V.STANCE_STYLES[None]["color"]
    assert traces[0].legendgroup == "stance" and traces[0].legendgrouptitle.text == "Stance (colour)"
    symbols = dict(zip(traces[0].hovertext, traces[0].marker.symbol))
    assert {s for h, s in symbols.items() if "annotated evidence" in h} == {"diamond"}
    assert {s for h, s in symbols.items() if "related claim" in h} == {"square"}
    # the shapes' legend: the claim (a star at the centre) and one legend-only entry per kind present
    assert (traces[1].x[0], traces[1].y[0]) == (0.0, 0.0) and traces[1].marker.symbol == "star"
    shapes = legend_only(fig)
    assert [t.name for t in shapes] == ["annotated evidence", "related claim", "thematic cluster evidence"]
    assert len({t.marker.symbol for t in shapes}) == 3
    # edge widths grow with similarity, similarity labels at midpoints
    edge_widths = {t.line.width for t in fig.data if t.mode == "lines"}
    assert len(edge_widths) > 2
    labels = [t for t in fig.data if t.mode == "text"]
    assert len(labels) == 1 and sorted(labels[0].text) == sorted(f"{i.similarity:.2f}" for i in soi.items())
    title = fig.layout.title.text
    for part in (
        "Vaccines cause autism.",
        "CARAG (supervised)",
        "cluster: 3",
        "δ = 0.75",
        "SOI size: 8 of 14",
        "theme: health",
    ):
        assert part in title


def test_soi_figure_with_stances_colours_members_and_hollow_outsiders():
    fig = V.soi_figure(unsupervised_soi(4), evidence=stance_evidence())
    traces = {t.name: t for t in node_traces(fig)}
    supports, refutes, neither = (traces[V.STANCE_STYLES[s]["label"]] for s in STANCE_NAMES)
    assert supports.marker.color == "#009E73" and refutes.marker.color == "#D55E00"
    assert neither.marker.color == V.STANCE_STYLES["NOT_ENOUGH_INFO"]["color"]
    # r0 (in the SOI) supports; "out" (not in the SOI) supports too, drawn open
    assert list(supports.marker.symbol) == ["triangle-up", "hexagon-open"]
    assert list(supports.marker.line.color) == [V.styles.MEMBER_EDGE, "#009E73"]
    assert "#1 refined passage 0" in supports.text[0] and "#2 outside the SOI" in supports.text[1]
    assert "in the SOI · retrieved #1 · supports the claim (p = 0.91)" in supports.hovertext[0]
    assert "stance read from" not in supports.hovertext[0]  # read whole
    assert "not in the SOI · retrieved #2" in supports.hovertext[1]
    assert list(refutes.marker.symbol) == ["triangle-up"] and list(neither.marker.symbol) == ["triangle-up"]
    assert len(traces["stance not scored"].x) == 1  # r3: in the SOI, not retrieved
    assert "retrieved, not in the SOI" in [t.name for t in legend_only(fig)]
    assert "4 retrieved (3 in the SOI): 2 support, 1 refute, 1 neither" in fig.layout.title.text


def test_the_soi_hover_shows_the_excerpt_a_long_passages_stance_was_read_from():
    evidence = stance_evidence()
    evidence[0] |= {"text": "refined passage 0. It says <b>so</b>.", "stance_excerpt": "It says <b>so</b>."}
    fig = V.soi_figure(unsupervised_soi(4), evidence=evidence)
    supports = {t.name: t for t in node_traces(fig)}[V.STANCE_STYLES["SUPPORTED"]["label"]]
    hover = supports.hovertext[0]
    assert hover.endswith("<i>stance read from:</i><br>It says &lt;b&gt;so&lt;/b&gt;.<br><br>refined passage 0")


def test_soi_figure_hover_is_full_wrapped_text():
    long_text = " ".join(f"word{i}" for i in range(60))
    soi = unsupervised_soi(1)
    soi.refined_cluster_evidences = [SOIItem("r0", long_text, 0.9)]
    fig = V.soi_figure(soi)
    hover = node_traces(fig)[0].hovertext[0]
    body = hover.split("<br><br>", 1)[1]
    lines = body.split("<br>")
    assert len(lines) > 3 and all(len(line) <= 80 for line in lines)
    assert " ".join(lines) == long_text
    assert "0.90" in hover


def test_soi_figure_of_empty_soi_shows_claim_and_why_it_is_empty():
    soi = SubsetOfInterest(claim_id="c7", claim="lonely claim", cluster=2, cluster_size=9, delta=0.75)
    fig = V.soi_figure(soi)
    traces = node_traces(fig)
    assert [t.name for t in traces] == ["claim"] and len(traces[0].x) == 1
    (note,) = [a.text for a in fig.layout.annotations]
    assert note.replace("<br>", " ") == html.escape(V.EmptySOIReason.of(soi).text(), quote=False).replace("'", "&#39;")
    assert "cluster 2 (9 items)" in note and "δ=0.75" in note and "the query is the" in note
    (caption,) = fig.layout.annotations
    assert (caption.xref, caption.yref, caption.y, caption.yanchor) == ("paper", "paper", 0.0, "top")  # off the graph
    assert "SOI size: 0" in fig.layout.title.text
    given = V.soi_figure(soi, empty_reason="<b>why</b> it is empty")  # the caller's reason, escaped
    assert [a.text for a in given.layout.annotations] == ["&lt;b&gt;why&lt;/b&gt; it is empty"]
    assert not V.soi_figure(unsupervised_soi(1)).layout.annotations  # an SOI with items has no such note


def test_soi_figure_never_holds_raw_user_markup():
    fig = V.soi_figure(hostile_soi(), title=HOSTILE)
    strings = all_strings(fig.to_plotly_json())
    joined = "\n".join(strings)
    assert "<script" not in joined and "<img" not in joined and 'onerror="' not in joined
    assert html.escape("<script>window.__pwned=1</script>", quote=False) in joined
    # only our own tags remain
    tags = set(re.findall(r"</?([a-zA-Z]+)", joined))
    assert tags <= {"br", "b", "i", "sup"}


# --------------------------------------------------------------------------- #
# HTML output
# --------------------------------------------------------------------------- #


def test_write_soi_html_is_self_contained_and_escaped(tmp_path):
    out = V.write_soi_html(hostile_soi(), tmp_path / "sub" / "soi.html")
    assert out == (tmp_path / "sub" / "soi.html").resolve() and out.is_file()
    text = out.read_text(encoding="utf-8")
    assert len(text) > 1_000_000  # plotly.js is inlined
    assert '<script src="http' not in text and "cdn.plot.ly" not in text.split("</script>")[-1]
    assert 'class="plotly-graph-div"' in text or "plotly-graph-div" in text
    for view in (text, unescape_json(text)):  # as written, and with Plotly's \u003c JSON escapes undone
        assert HOSTILE not in view
        assert "<script>window.__pwned" not in view
        assert 'onerror="window.__pwned' not in view
    decoded = unescape_json(text)
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in decoded
    assert "&lt;img src=x onerror=&#34;window.__pwned=2&#34;&gt;" in decoded
    assert sorted(p.name for p in out.parent.iterdir()) == ["soi.html"]  # no temp file left behind


def test_write_soi_html_overwrites_atomically(tmp_path):
    path = tmp_path / "soi.html"
    path.write_text("old")
    V.write_soi_html(unsupervised_soi(), path)
    assert path.read_text(encoding="utf-8").lstrip().lower().startswith(("<!doctype html>", "<html>"))
    assert [p.name for p in tmp_path.iterdir()] == ["soi.html"]
    assert path.stat().st_mode & 0o777 == 0o644  # not mkstemp's 0o600


@needs_chromium
def test_html_renders_offline_in_headless_chromium(tmp_path):
    evidence = [{"id": "e0a", "text": "-", "stance": "SUPPORTED"}, {"id": "e0b", "text": "-", "stance": "REFUTED"}]
    page = V.write_soi_html(supervised_soi(), tmp_path / "soi.html", evidence=evidence)
    shot = tmp_path / "shot.png"
    proc = run_chromium(tmp_path, page.as_uri(), f"--screenshot={shot}")
    assert shot.is_file(), proc.stderr[-2000:]
    img = read_png(shot)
    assert img.shape[:2] == (900, 1200)
    rgb = (img[..., :3] * 255).round().astype(np.uint8)
    colours = np.unique(rgb.reshape(-1, 3), axis=0)
    assert len(colours) > 50  # not a blank page: markers, anti-aliased text and lines
    assert rgb.std() > 5
    # the stance colours are in the page's figure (their pixels in the screenshot are not checked: see CHANGELOG)
    html = page.read_text(encoding="utf-8").lower()
    for hex_colour in [V.STANCE_STYLES[s]["color"] for s in ("SUPPORTED", "REFUTED", None)]:
        assert hex_colour.lower() in html, hex_colour


@needs_chromium
def test_hostile_text_never_executes_in_chromium(tmp_path):
    # positive control: the same payload, pasted raw into a page, does leave its trace
    control = tmp_path / "control.html"
    control.write_text(f"<html><body>{DOM_IMG}{DOM_SCRIPT}</body></html>", encoding="utf-8")
    dom = run_chromium(tmp_path, control.as_uri(), "--dump-dom").stdout
    assert 'data-pwned="' in dom

    soi = hostile_soi(DOM_SCRIPT + DOM_IMG)
    page = V.write_soi_html(soi, tmp_path / "hostile.html")
    proc = run_chromium(tmp_path, page.as_uri(), "--dump-dom")
    dom = proc.stdout
    assert "js-plotly-plot" in dom and "plot-container" in dom, proc.stderr[-2000:]  # plotly.js ran
    assert 'data-pwned="' not in dom
    assert not re.search(r"<body[^>]*data-pwned", dom)
    # the payload reached the rendered SVG title, as inert text
    assert "&lt;script&gt;document.body.setAttribute('data-pwned','2')" in dom


# --------------------------------------------------------------------------- #
# PNG output
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(("width", "height", "dpi"), [(1200, 900, 100), (1001, 777, 72)])
def test_write_soi_png_has_exact_size(tmp_path, width, height, dpi):
    path = V.write_soi_png(supervised_soi(), tmp_path / "soi.png", width=width, height=height, dpi=dpi)
    img = read_png(path)
    assert img.shape[:2] == (height, width)
    assert img[..., :3].std() > 0.02
    assert [p.name for p in tmp_path.iterdir()] == ["soi.png"]


def test_write_soi_png_survives_hostile_and_math_text(tmp_path):
    soi = hostile_soi(claim="costs $5 and $x^{$ \\frac{ " + HOSTILE)
    img = read_png(V.write_soi_png(soi, tmp_path / "h.png", width=640, height=480))
    assert img.shape[:2] == (480, 640)
    empty = read_png(
        V.write_soi_png(SubsetOfInterest(claim_id=None, claim="q"), tmp_path / "e.png", width=400, height=300)
    )
    assert empty.shape[:2] == (300, 400)


def test_write_soi_png_rejects_bad_size(tmp_path):
    with pytest.raises(ValueError):
        V.write_soi_png(unsupervised_soi(), tmp_path / "x.png", width=0)


# --------------------------------------------------------------------------- #
# cluster graph
# --------------------------------------------------------------------------- #


def angle_vectors(degrees):
    r = np.deg2rad(np.asarray(degrees, dtype=float))
    return np.stack([np.cos(r), np.sin(r)], axis=1)


def test_cluster_graph_edges_above_threshold():
    ids = ["c0", "e0", "e1", "c1", "e2"]
    unit = angle_vectors([0, 30, 50, 70, 180])
    kinds = ["claim", "evidence", "evidence", "claim", "evidence"]
    g = V.cluster_graph(ids, [f"t {i}" for i in ids], unit, kinds, threshold=0.6, highlight=["e0", "c1"])
    sims = unit @ unit.T
    expected = {frozenset((ids[i], ids[j])) for i in range(5) for j in range(i + 1, 5) if sims[i, j] > 0.6}
    assert {frozenset(e) for e in g.edges} == expected
    for u, v, d in g.edges(data=True):
        assert d["weight"] == pytest.approx(sims[ids.index(u), ids.index(v)])
    assert g.degree("e2") == 0
    assert {n for n, d in g.nodes(data=True) if d["highlighted"]} == {"e0", "c1"}
    assert [d["kind"] for _, d in g.nodes(data=True)] == kinds


def test_cluster_graph_validates_inputs():
    unit = angle_vectors([0, 10])
    with pytest.raises(ValueError):
        V.cluster_graph(["a"], ["t"], unit, ["claim"])
    with pytest.raises(ValueError):
        V.cluster_graph(["a", "b"], ["t", "u"], unit, ["claim", "passage"])
    with pytest.raises(ValueError):
        V.cluster_graph(["a", "a"], ["t", "u"], unit, ["claim", "evidence"])
    assert V.cluster_graph([], [], np.zeros((0, 0)), []).number_of_nodes() == 0


def test_cluster_figure_html_and_png(tmp_path):
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(3, 12))
    unit = np.vstack([centres[i % 3] + rng.normal(0, 0.5, 12) for i in range(30)])
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    ids = [f"m{i}" for i in range(30)]
    kinds = ["claim" if i % 5 == 0 else "evidence" for i in range(30)]
    fig = V.cluster_figure(ids, ids, unit, kinds, threshold=0.5, highlight=["m0", "m1"], title="<b>x</b>")
    traces = node_traces(fig)
    assert [t.name for t in traces] == ["claim", "evidence"]
    assert sum(len(t.x) for t in traces) == 30
    assert max(traces[0].marker.size) > min(traces[0].marker.size)  # highlighted m0 drawn larger
    assert "&lt;b&gt;x&lt;/b&gt;" in fig.layout.title.text
    assert (
        fig.to_plotly_json()
        == V.cluster_figure(
            ids, ids, unit, kinds, threshold=0.5, highlight=["m0", "m1"], title="<b>x</b>"
        ).to_plotly_json()
    )  # deterministic
    html_path = V.write_cluster_html(ids, ids, unit, kinds, tmp_path / "c.html", highlight=["m0"])
    assert "plotly-graph-div" in html_path.read_text(encoding="utf-8")
    png = read_png(
        V.write_cluster_png(ids, ids, unit, kinds, tmp_path / "c.png", width=800, height=600, highlight=["m0"])
    )
    assert png.shape[:2] == (600, 800)


# --------------------------------------------------------------------------- #
# the SOI's evidence, stances and the PNG's figure
# --------------------------------------------------------------------------- #


def test_read_passages_takes_nodes_rows_and_dicts(caplog):
    from llama_index.core.schema import NodeWithScore, TextNode

    from llama_index_carag.verdicts.check import EvidenceRow
    from llama_index_carag.verdicts.scored import with_stances
    from llama_index_carag.verdicts.types import PassageStance

    node = NodeWithScore(node=TextNode(id_="n1", text="passage one", metadata={"carag": {"claim_similarity": 0.8}}))
    scored = with_stances([node], [PassageStance(number=1, id="n1", stance="REFUTED", score=0.75)])
    row = EvidenceRow(rank=4, id="n2", score=None, text="two", carag={"claim_similarity": 0.6}, stance="SUPPORTED")
    passages = V.read_passages(
        [*scored, row, {"id": "n3", "text": "three", "stance": "n"}, {"id": "n4", "stance": "?"}]
    )
    assert [(p.id, p.rank, p.stance) for p in passages] == [
        ("n1", 1, "REFUTED"),
        ("n2", 4, "SUPPORTED"),  # a row's own rank
        ("n3", 3, "NOT_ENOUGH_INFO"),  # FactVer's letters too
        ("n4", 4, None),  # an unknown stance is not scored, and said so
    ]
    assert passages[0].similarity == 0.8 and passages[0].stance_score == 0.75 and passages[1].similarity == 0.6
    assert math.isnan(passages[2].similarity) and passages[2].text == "three"
    assert "Unknown stance '?'" in caplog.text
    with pytest.raises(TypeError):
        V.read_passages(["not a passage"])


def test_soi_graph_joins_the_retrieved_passages():
    g = V.soi_graph(unsupervised_soi(4), evidence=stance_evidence())
    assert g.graph["n_retrieved"] == 4 and g.number_of_nodes() == 1 + 4 + 1
    assert g.nodes["r0"]["rank"] == 1 and g.nodes["r0"]["stance"] == "SUPPORTED" and g.nodes["r0"]["in_soi"]
    assert g.nodes["r0"]["stance_score"] == 0.91 and g.nodes["r0"]["similarity"] == 0.95  # the SOI's cosine kept
    assert g.nodes["r3"]["rank"] is None and g.nodes["r3"]["stance"] is None and g.nodes["r3"]["in_soi"]
    out = g.nodes["out"]
    assert (out["kind"], out["in_soi"], out["rank"], out["stance"], out["similarity"]) == (
        "retrieved_evidence",
        False,
        2,
        "SUPPORTED",
        0.5,
    )
    assert g.edges["query", "out"]["relation"] == "similarity" and g.edges["query", "out"]["label"] == "0.50"
    pos = V.soi_layout(g)
    assert math.hypot(*pos["out"]) == pytest.approx(1.0)  # least similar: the outer ring
    # without evidence nothing changes but the new attributes
    plain = V.soi_graph(unsupervised_soi(4))
    assert plain.graph["n_retrieved"] == 0 and all(d["stance"] is None for _, d in plain.nodes(data=True))


def png_parts(fig):
    """The PNG figure's graph axes, its item labels (annotations) and its node scatters."""
    from matplotlib.collections import PathCollection
    from matplotlib.text import Annotation

    ax = fig.axes[0]
    labels = [t for t in ax.texts if isinstance(t, Annotation)]
    return ax, labels, [c for c in ax.collections if isinstance(c, PathCollection)]


def rgb_hex(rgba) -> str:
    from matplotlib.colors import to_hex

    return to_hex(rgba).upper()


def test_png_colours_nodes_by_stance_and_draws_outsiders_hollow():
    fig = V.soi_png_figure(unsupervised_soi(4), evidence=stance_evidence())
    _, _, scatters = png_parts(fig)
    faces = {rgb_hex(c) for s in scatters for c in s.get_facecolors()}
    assert {V.STANCE_STYLES[s]["color"].upper() for s in (*STANCE_NAMES, None)} <= faces
    hexagons = scatters[-1]  # the last kind drawn: retrieved, not in the SOI
    assert [rgb_hex(c) for c in hexagons.get_facecolors()] == ["#FFFFFF"]
    assert [rgb_hex(c) for c in hexagons.get_edgecolors()] == ["#009E73"]
    members = scatters[1]  # the refined evidence, after the claim
    assert {rgb_hex(c) for c in members.get_edgecolors()} == {V.styles.MEMBER_EDGE.upper()}
    legends = {lg.get_title().get_text(): [t.get_text() for t in lg.get_texts()] for lg in fig.legends}
    assert legends["Stance (colour)"] == [V.STANCE_STYLES[s]["label"] for s in (*STANCE_NAMES, None)]
    assert legends["SOI component (shape)"] == ["claim", "refined cluster evidence", "retrieved, not in the SOI"]


def test_png_labels_are_wrapped_ranked_and_never_cut():
    from llama_index_carag.visualize.soi_drawing import label_shape

    soi = supervised_soi()
    fig = V.soi_png_figure(soi, evidence=[{"id": "e0a", "text": "ignored: the SOI's text is drawn"}])
    ax, labels, _ = png_parts(fig)
    width, lines = label_shape(len(soi))
    assert len(labels) == len(soi)
    for label in labels:
        text_lines = label.get_text().split("\n")
        assert len(text_lines) <= lines and all(len(line) <= width for line in text_lines)
    first = next(t.get_text() for t in labels if t.get_text().startswith("#1 "))
    assert first.startswith("#1 Large cohort studies found") and first.endswith("…")  # wrapped, then cut
    renderer = fig.canvas.get_renderer()
    frame, graph_box = fig.bbox, ax.get_window_extent(renderer)
    boxes = [t.get_window_extent(renderer) for t in [*ax.texts, *fig.texts]]
    boxes += [lg.get_window_extent(renderer) for lg in fig.legends]
    for box in boxes:  # inside the canvas
        assert frame.x0 - 0.5 <= box.x0 and box.x1 <= frame.x1 + 0.5
        assert frame.y0 - 0.5 <= box.y0 and box.y1 <= frame.y1 + 0.5
    drawn = [t.get_window_extent(renderer) for t in ax.texts]
    left, right = min(b.x0 for b in drawn), max(b.x1 for b in drawn)
    bottom, top = min(b.y0 for b in drawn), max(b.y1 for b in drawn)
    assert graph_box.x0 <= left and right <= graph_box.x1 and graph_box.y0 <= bottom and top <= graph_box.y1
    # the graph fills its part of the page: in one direction it reaches both margins (14 px)
    slack_x = (left - graph_box.x0, graph_box.x1 - right)
    slack_y = (bottom - graph_box.y0, graph_box.y1 - top)
    assert max(slack_x) < 16 or max(slack_y) < 16


def test_png_size_follows_the_number_of_nodes_unless_given():
    small = V.soi_png_figure(unsupervised_soi(3))
    large = V.soi_png_figure(unsupervised_soi(30))
    (w_small, h_small), (w_large, h_large) = (fig.get_size_inches() * fig.dpi for fig in (small, large))
    assert w_large > w_small and h_large > h_small
    fixed = V.soi_png_figure(unsupervised_soi(30), width=700, height=500)
    assert tuple(round(v) for v in fixed.get_size_inches() * fixed.dpi) == (700, 500)
    # an empty SOI says so under the title, in red, off the graph
    reason = "SOI empty: no item of the claim's cluster 3 (24 items) has a cosine to the claim above δ=0.75"
    empty = V.soi_png_figure(
        SubsetOfInterest(claim_id=None, claim="q"), evidence=stance_evidence(), empty_reason=reason
    )
    notes = [t for t in empty.texts if t.get_text().replace("\n", " ") == reason]
    assert len(notes) == 1 and rgb_hex(notes[0].get_color()) == "#B22222"
    assert len(png_parts(empty)[1]) == 4  # the four retrieved passages, all outside the (empty) SOI


def test_largest_scale_is_exact():
    from llama_index_carag.visualize.soi_drawing import largest_scale

    # two anchors one unit apart, each 10 px wide around itself: 10 + s + 10 <= 120 -> s = 100
    coords, low, high = np.array([0.0, 1.0]), np.array([-10.0, -10.0]), np.array([10.0, 10.0])
    assert largest_scale(coords, low, high, 120.0) == pytest.approx(100.0)
    assert largest_scale(coords, low, high, 15.0) == 0.0  # a label wider than the room
    assert largest_scale(np.array([0.0]), np.array([-5.0]), np.array([5.0]), 20.0) == math.inf
    # the left anchor's label reaches 200 px right: the anchors must be far enough apart for it
    assert largest_scale(coords, low, np.array([200.0, 10.0]), 150.0) == 0.0


def test_mpl_wrapped_wraps_cuts_between_words_and_escapes_dollars():
    from llama_index_carag.visualize.text import _mpl_wrapped

    text = "Offshore wind farms have become informal marine reserves where young fish can grow, at $5 a fish"
    wrapped = _mpl_wrapped(text, 20, 3)
    lines = wrapped.split("\n")
    assert len(lines) == 3 and all(len(line) <= 20 for line in lines) and lines[-1].endswith("…")
    assert " ".join(lines)[:-1].split() == text.split()[: len(" ".join(lines)[:-1].split())]  # whole words
    assert _mpl_wrapped("costs $5", 20, 3) == r"costs \$5"
