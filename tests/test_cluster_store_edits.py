"""core.cluster_store: snapshots made by edits (amortised appends, derived id→row map) equal ones built afresh."""

from __future__ import annotations

import numpy as np

from llama_index_carag.core.cluster_store import ClusterGroup, MemoryClusters
from llama_index_carag.core.soi import ClusterMembers, unsupervised_core


def _group(rng, prefix, n, dim=4, claims=()):
    ids = [f"{prefix}{i}" for i in range(n)]
    is_claim = np.array([i in claims for i in range(n)])
    return ClusterGroup(ids, rng.normal(size=(n, dim)).astype(np.float32), is_claim, [None] * n)


def _same(a: MemoryClusters, b: MemoryClusters) -> None:
    """``a`` and ``b`` hold the same live members, in the same order, with the same vectors."""
    assert list(a.groups) == list(b.groups)
    for key in a.groups:
        ga, gb = a.groups[key].compacted(), b.groups[key].compacted()
        assert ga.ids == gb.ids and ga.claim_of == gb.claim_of
        np.testing.assert_array_equal(ga.unit, gb.unit)
        np.testing.assert_array_equal(ga.is_claim, gb.is_claim)
        assert a.size(key) == b.size(key) == len(ga)
    assert a.where.keys() == b.where.keys()  # the derived map finds the members a fresh build does
    for node_id in a.where:
        assert a.key_of(node_id) == b.key_of(node_id)
        np.testing.assert_array_equal(a.unit_vector(node_id), b.unit_vector(node_id))
        key, row = a.row_of(node_id)
        assert a.groups[key].ids[row] == node_id
    assert list(a.iter_items()) == list(b.iter_items())


def _fresh(snapshot: MemoryClusters) -> MemoryClusters:
    """The snapshot's live members built afresh (no dead rows, no spare rows, no slot map)."""
    groups = {k: g.compacted() for k, g in snapshot.groups.items()}
    return MemoryClusters(
        {k: ClusterGroup(list(g.ids), g.unit.copy(), g.is_claim.copy(), list(g.claim_of)) for k, g in groups.items()},
        snapshot.dim,
    )


def test_edits_give_the_snapshot_a_fresh_build_gives(rng):
    base = MemoryClusters({("T", 0): _group(rng, "a", 9, claims={2}), (None, 1): _group(rng, "b", 5)}, 4)
    one = base.with_added({("T", 0): _group(rng, "x", 3), ("U", 2): _group(rng, "y", 2)})
    _same(one, _fresh(one))
    two, claims = one.without(["a0", "a2", "x1", "b4", "nope", "y0", "y1"])
    assert claims == [("a2", None)]
    _same(two, _fresh(two))
    assert ("U", 2) not in two.groups and "y0" not in two
    three = two.with_added({("T", 0): _group(rng, "z", 40)})  # past the spare rows: a new buffer
    _same(three, _fresh(three))
    assert three.row_of("z0") == (("T", 0), 12)  # after a0 … a8, x0 … x2; a0, a2, x1 are dead rows
    np.testing.assert_array_equal(three.unit_vector("z39"), three.groups[("T", 0)].unit[51])


def test_appends_reuse_spare_rows_and_never_change_an_older_snapshot(rng):
    base = MemoryClusters({("T", 0): _group(rng, "a", 16)}, 4)
    first = base.with_added({("T", 0): _group(rng, "x", 1)})  # a buffer with spare rows
    frozen = first.groups[("T", 0)].unit.copy()
    second = first.with_added({("T", 0): _group(rng, "y", 1)})
    assert np.shares_memory(first.groups[("T", 0)].unit, second.groups[("T", 0)].unit)  # appended in place
    other = first.with_added({("T", 0): _group(rng, "w", 1)})  # from an older snapshot: its own buffer
    assert not np.shares_memory(other.groups[("T", 0)].unit, second.groups[("T", 0)].unit)
    np.testing.assert_array_equal(first.groups[("T", 0)].unit, frozen)
    assert second.groups[("T", 0)].ids[-1] == "y0" and other.groups[("T", 0)].ids[-1] == "w0"
    np.testing.assert_array_equal(second.groups[("T", 0)].unit[:17], frozen)
    for snap in (first, second, other):
        _same(snap, _fresh(snap))


def test_deletes_and_appends_interleaved_keep_every_row(rng):
    snap = MemoryClusters({("T", 0): _group(rng, "a", 30), ("T", 1): _group(rng, "b", 12)}, 4)
    for step in range(6):
        snap = snap.with_added({("T", step % 2): _group(rng, f"s{step}_", 5)})
        gone = [i for k, (i, _) in enumerate(snap.iter_items()) if k % 4 == step % 4]
        snap, _ = snap.without(gone)
        _same(snap, _fresh(snap))
        for node_id, key in snap.iter_items():
            found = snap.row_of(node_id)
            assert found is not None and found[0] == key and snap.groups[key].ids[found[1]] == node_id
    assert snap.rows  # clusters compacted by deletes map slots to rows


def test_a_loaded_snapshot_keeps_room_to_append_in_place(rng):
    base = MemoryClusters({("T", 0): _group(rng, "a", 9), (None, 1): _group(rng, "b", 5)}, 4)
    vectors = {i: base.unit_vector(i) for i in base.where}
    loaded = MemoryClusters.from_state(base.get_state(), 4, lambda ids: np.stack([vectors[i] for i in ids]))
    _same(loaded, base)
    grown = loaded.with_added({("T", 0): _group(rng, "x", 3)})
    assert np.shares_memory(grown.groups[("T", 0)].unit, loaded.groups[("T", 0)].unit)  # appended, not copied
    np.testing.assert_array_equal(loaded.groups[("T", 0)].unit, base.groups[("T", 0)].unit)  # the old one unchanged


def test_a_delete_marks_rows_dead_and_shares_the_vectors_until_a_quarter_is_dead(rng):
    base = MemoryClusters({("T", 0): _group(rng, "a", 20, claims={3})}, 4)
    one, claims = base.without(["a1", "a3"])
    assert claims == [("a3", None)]
    group = one.groups[("T", 0)]
    assert group.unit is base.groups[("T", 0)].unit  # marked dead: no copy of the vectors
    assert group.n_live == 18 and one.size(("T", 0)) == 18 and "a1" not in one
    assert base.size(("T", 0)) == 20 and "a1" in base  # the older snapshot is unchanged
    members = one.members(("T", 0))  # a copy of the live rows
    assert "a1" not in members.ids and len(members.ids) == 18 and members.live is None
    scan = one.members(("T", 0), with_dead=True)  # the SOI's view: dead rows flagged
    assert scan.unit is group.unit and int(scan.live.sum()) == 18
    _same(one, _fresh(one))
    two, _ = one.without([f"a{i}" for i in range(4, 8)])  # 6 of 20 dead (> 25 %): compacted
    assert not np.shares_memory(two.groups[("T", 0)].unit, group.unit)
    assert two.groups[("T", 0)].live is None and len(two.groups[("T", 0)]) == 14
    _same(two, _fresh(two))
    grown = one.with_added({("T", 0): _group(rng, "x", 2)})  # appends after the dead rows
    assert grown.groups[("T", 0)].n_live == 20 and grown.row_of("x1") == (("T", 0), 21)
    _same(grown, _fresh(grown))
    state = grown.get_state()
    assert "a1" not in state[0]["ids"] and len(state[0]["ids"]) == 20


def test_the_soi_never_keeps_a_dead_row():
    unit = np.eye(4, dtype=np.float32)[[0, 0, 0, 1]]
    live = np.array([True, False, True, True])
    members = ClusterMembers(["a", "b", "c", "d"], None, unit, np.zeros(4, bool), [None] * 4, live)
    core = unsupervised_core(np.array([1, 0, 0, 0], np.float32), members, 0.5, min_size=3)
    kept = {members.ids[r] for r in core.rows["refined_cluster_evidences"]}
    assert kept == {"a", "c", "d"} and core.cluster_size == 3  # "b" matches best but is dead
