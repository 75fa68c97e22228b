"""The gateway's JSON encoding: orjson's speed, the standard library's meaning, whatever the
value."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from scroll_core.gateway._json import dumps

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(JSON_VALUES)
def test_a_value_reads_back_as_the_standard_library_wrote_it(value):
    assert json.loads(dumps(value)) == json.loads(json.dumps(value, ensure_ascii=False))


def test_what_orjson_refuses_is_written_by_the_standard_library():
    assert json.loads(dumps({"n": 2**70, 1: "key", "m": -(2**63) - 1})) == {
        "n": 2**70,
        "1": "key",
        "m": -(2**63) - 1,
    }
    assert dumps({"a": "é"}) == '{"a":"é"}'.encode()  # UTF-8, not \\u escapes
