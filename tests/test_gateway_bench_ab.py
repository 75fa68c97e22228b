"""``bench/gateway_ab.py``: what it is asked to compare is checked before any server starts,
each mistake refused with a message that names it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import gateway_ab  # noqa: E402


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--servers", "daphne"), "give --base"),
        (("--base", str(REPO), "--servers", "daphne,uvicorn"), "not both"),
        (("--servers", "daphne,gunicorn"), "--servers takes names among daphne, uvicorn"),
        (("--base", "/nonexistent"), "no manage.py there"),
        (("--base", str(REPO), "--cells", "new_loud"), "--cells: conversation_mode"),
        (("--base", str(REPO), "--clients", "one"), "--clients: comma-separated integers"),
        (("--base", str(REPO), "--rounds", "0"), "--rounds >= 1"),
    ],
)
def test_a_comparison_it_cannot_make_is_refused_before_anything_starts(
    args, said, capsys, monkeypatch
):
    started: list[object] = []
    monkeypatch.setattr(gateway_ab.CheckoutServer, "key", lambda self, url: started.append(self))
    with pytest.raises(SystemExit) as stopped:
        gateway_ab.main(list(args))
    assert stopped.value.code == 2
    assert said in capsys.readouterr().err
    assert started == []
