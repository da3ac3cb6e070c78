"""Runs tests/test_spark_columns.py's property test and damage test with
ptars_adapter.batch in place of columns.batch (same expectations)."""
import sys
sys.path.insert(0, "/work/main/tests")
import pytest
from hypothesis import given, settings, strategies as st
import test_spark_columns as T
import ptars_adapter

@settings(max_examples=300, deadline=None)
@given(st.lists(T.payloads(), min_size=1, max_size=6))
def test_ptars_matches_upb(batch):
    keys = [T.key(i + 1) for i in range(len(batch))]
    got = ptars_adapter.batch(keys, batch, "q", "history").to_pylist()
    assert T._exact(got) == T._exact([T.expected(i + 1, p) for i, p in enumerate(batch)])

def test_damaged():
    good = T.pb.Message(address="a").SerializeToString()
    cut = T.pb.Message(body=b"x" * 50).SerializeToString()[:10]
    bad_utf8 = T._field(8, T._field(5, b"\xff"))
    for payload in (cut, bad_utf8):
        with pytest.raises(Exception) as e:
            ptars_adapter.batch([T.key(1), T.key(2)], [good, payload], "q", "history")
        print(type(e.value), e.value)
