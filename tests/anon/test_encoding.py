import numpy as np
import pytest

from veil.anon.encoding import EncodedTable, SensitiveDomain, classify, group


def _as_dict(table):
    return {tuple(c): (n, tuple(h)) for c, n, h in zip(table.codes.tolist(),
                                                     table.counts.tolist(),
                                                     table.hist.tolist())}


# blocks: all four columns in one (age 60 x zip 8 x sex 2 x job 5 values), three, or
# one each; slots: grouped through a slot per key, or sorted
@pytest.mark.parametrize(("block_limit", "blocks"), [
    (1 << 14, [(0, 4)]), (64, [(0, 1), (1, 3), (3, 4)]), (1, [(0, 1), (1, 2), (2, 3), (3, 4)])])
@pytest.mark.parametrize("slot_limit", [1 << 22, 1])
def test_rollup_equals_grouping_the_rows(table, monkeypatch, block_limit, blocks, slot_limit):
    monkeypatch.setattr("veil.anon.encoding._BLOCK_LIMIT", block_limit)
    monkeypatch.setattr("veil.anon.encoding._SLOT_LIMIT", slot_limit)
    df, hierarchies = table
    enc = EncodedTable(df, hierarchies, SensitiveDomain("disease", df["disease"]))
    assert enc.blocks == blocks
    finer = np.array([1, 2, 0, 1])
    coarser = np.array([2, 4, 1, 1])
    table_finer = enc.rollup(enc.bottom(), np.zeros(4, dtype=np.int64), finer)
    rolled = enc.rollup(table_finer, finer, coarser)
    direct = group(enc.row_codes(coarser), enc.radices(coarser),
                   sensitive=enc.sensitive.codes, n_sensitive=enc.sensitive.size)
    assert _as_dict(rolled) == _as_dict(direct)
    assert rolled.counts.sum() == len(df)
    rows = enc.row_classes(rolled, coarser)
    assert np.array_equal(rolled.codes[rows], enc.row_codes(coarser))


def test_dense_sorted_and_overflowing_keys_agree():
    codes = np.array([[3, 1], [0, 2], [3, 1], [1, 0], [0, 2]])
    expected = [[0, 2], [1, 0], [3, 1]]
    for radices in ([4, 3], [1 << 20, 1 << 20], [1 << 40, 1 << 40]):
        inverse, unique = classify(codes, np.array(radices, dtype=np.int64))
        assert unique.tolist() == expected
        assert np.array_equal(unique[inverse], codes)
