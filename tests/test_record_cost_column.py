"""The sessions list's cost column (issue 29): what a session's recorded calls cost, the
same figure as its cost panel, following each new call and each price change."""

from __future__ import annotations

from decimal import Decimal

import pytest

from dashboard.console.views import session_row
from dashboard.record.store import store_calls
from dashboard.telemetry.cost import session_cost
from dashboard.telemetry.models import ModelPrice
from scroll_core import wire

pytestmark = pytest.mark.django_db


def _call(sid: str, n: int) -> wire.WireCall:
    body = b'{"model":"priced-model","messages":[{"role":"user","content":"q%d"}]}' % n
    return wire.WireCall(sid, "priced-model", "gateway", body=body, sends=1,
                         started_at=1.0e9 + n,
                         usage={"input_tokens": 1000, "output_tokens": 100})  # fmt: skip


def test_the_cost_column_is_the_recorded_calls_cost_and_follows_them(console_log, admin_client):
    sid = "gw:cost-column"
    console_log.append(session_id=sid, kind="context_msg", role="user", content="go")
    price = ModelPrice.objects.create(model="priced-model", input_per_mtok=2, output_per_mtok=10)
    assert session_row(console_log, sid).cost == (None, "")  # no record yet
    store_calls([_call(sid, 1)])
    assert session_row(console_log, sid).cost == (Decimal("0.003"), "USD")
    store_calls([_call(sid, 2)])
    row = session_row(console_log, sid)
    assert row.cost == (Decimal("0.006"), "USD")
    assert row.cost[0] == session_cost(sid).total  # the same figure as the cost panel
    price.output_per_mtok = 20
    price.save()
    assert session_row(console_log, sid).cost == (Decimal("0.008"), "USD")
    page = admin_client.get("/").content.decode()
    assert '<td class="num session-cost">0.0080 USD</td>' in page
