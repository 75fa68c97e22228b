"""The reply is committed after the answer left (``GatewayConversation.handle``'s
``answered``): the session stays locked until the commit is done, a commit that fails then is
traced and recovered by the client's next request, and a retry still appends nothing."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from test_gateway_core import ScriptedUpstream, assistant_of, conversation, request, user

from scroll_core.gateway import ClientReply
from scroll_core.gateway.conversation import REQUEST_SPAN
from scroll_core.store import EventLog
from scroll_core.tokens import CharRatioCounter

SESSION = "gw:alice:s"
FAIL_REPLIES = (
    "CREATE TRIGGER fail_replies BEFORE INSERT ON events "
    "WHEN json_extract(NEW.metadata, '$.gw') = 'reply' "
    "BEGIN SELECT RAISE(ABORT, 'disk I/O error (the test refused the reply)'); END"
)


@pytest.fixture
def clog(tmp_path):
    with EventLog(tmp_path / "eventlog.sqlite3", token_counter=CharRatioCounter()) as log:
        yield log


def _sql(log: EventLog, statement: str) -> None:
    """A statement on the log's file through a connection of its own (a real SQLite
    trigger makes the log refuse a write, as a full disk would)."""
    db = sqlite3.connect(log.path)
    try:
        db.execute(statement)
        db.commit()
    finally:
        db.close()


def _logged(log: EventLog, *, role: str, content: str) -> list[str]:
    """The ``gw`` kind of every event of the session with this role and content."""
    return [
        e.metadata.get("gw")
        for e in log.session_events(SESSION, limit=None)
        if e.role == role and e.content == content
    ]


def test_the_answer_leaves_before_the_commit_and_the_next_request_waits_for_it(clog):
    convo = conversation(clog)
    upstream = ScriptedUpstream()
    handed: list[ClientReply] = []
    answer_out = threading.Event()
    next_waiting = threading.Event()
    before_commit: list[list[str]] = []

    def answered(reply: ClientReply) -> None:  # the server sends the answer here
        handed.append(reply)
        before_commit.append(_logged(clog, role="assistant", content=reply.content))
        answer_out.set()
        assert next_waiting.wait(30), "the second request never reached the session's turn"

    @contextmanager
    def waiting() -> Iterator[None]:  # entered by the second request around its turn
        next_waiting.set()
        yield

    first = threading.Thread(
        target=lambda: convo.handle(request(user("one")), upstream, model="m", answered=answered)
    )
    first.start()
    assert answer_out.wait(30)
    reply = handed[0]
    assert before_commit == [[]]  # the client had its answer before the reply was logged
    second_history = [user("one"), assistant_of(reply), user("two")]
    results: list[ClientReply] = []
    second = threading.Thread(
        target=lambda: results.append(
            convo.handle(request(*second_history), upstream, model="m", idle=waiting)
        )
    )
    second.start()
    first.join(30)
    second.join(30)
    assert not first.is_alive() and not second.is_alive()
    # The second request found the reply in the log: it appended only its new message.
    assert results[0].stats.appended == 1
    assert _logged(clog, role="assistant", content=reply.content) == ["reply"]
    seqs = {e.content: e.seq for e in clog.session_events(SESSION, limit=None)}
    assert seqs["one"] < seqs[reply.content] < seqs["two"]
    assert len(upstream.requests) == 2


def test_a_commit_failing_after_the_answer_is_traced_and_the_next_request_recovers_it(clog, ring):
    convo = conversation(clog)
    upstream = ScriptedUpstream()
    handed: list[ClientReply] = []
    _sql(clog, FAIL_REPLIES)
    reply = convo.handle(request(user("one")), upstream, model="m", answered=handed.append)
    assert handed[0].content == reply.content == "ok 1"  # the client got its answer
    assert "the test refused the reply" in reply.commit_error
    assert _logged(clog, role="assistant", content="ok 1") == []  # nothing half-written
    (failed,) = ring.records("scroll.gateway.commit")
    (root,) = ring.records(REQUEST_SPAN)
    assert failed.status == "error" and "the test refused the reply" in failed.status_message
    assert failed.parent_id == root.span_id and failed.session_id == SESSION
    assert "the test refused the reply" in root.attributes["scroll.commit_error"]

    _sql(clog, "DROP TRIGGER fail_replies")
    history = [user("one"), assistant_of(reply), user("two")]
    second = convo.handle(request(*history), upstream, model="m", answered=handed.append)
    # The reply came back with the client's history and was appended then, once.
    assert second.stats.appended == 2 and not second.commit_error
    assert _logged(clog, role="assistant", content="ok 1") == ["msg"]
    assert _logged(clog, role="user", content="one") == ["msg"]
    assert _logged(clog, role="assistant", content="ok 2") == ["reply"]
    count = clog.count(SESSION)
    again = convo.handle(request(*history), upstream, model="m", answered=handed.append)
    assert again.stats.replayed and again.content == "ok 2"
    assert clog.count(SESSION) == count and len(upstream.requests) == 2


def test_a_commit_failing_before_any_answer_raises(clog):
    _sql(clog, FAIL_REPLIES)
    with pytest.raises(Exception, match="the test refused the reply"):
        conversation(clog).handle(request(user("one")), ScriptedUpstream(), model="m")
    assert _logged(clog, role="assistant", content="ok 1") == []


def test_a_retry_of_an_answered_request_appends_nothing(clog):
    convo = conversation(clog)
    upstream = ScriptedUpstream()
    handed: list[ClientReply] = []
    first = convo.handle(request(user("once")), upstream, model="m", answered=handed.append)
    count = clog.count(SESSION)
    again = convo.handle(request(user("once")), upstream, model="m", answered=handed.append)
    assert again.stats.replayed and again.content == first.content
    assert [r.content for r in handed] == [first.content, first.content]  # both answered
    assert clog.count(SESSION) == count and len(upstream.requests) == 1


@pytest.mark.django_db(transaction=True)
def test_over_http_the_answer_is_sent_and_a_failed_commit_is_on_the_sessions_record(
    gateway, upstream, console_log
):
    from gateway_clients import ask, make_key, oa
    from gateway_clients import assistant_of as sent_back

    from dashboard.gateway.service import get_service
    from dashboard.runs.models import RunRecord

    client = oa(gateway, make_key(upstream))
    _sql(console_log, FAIL_REPLIES)
    headers = {"X-Scroll-Session": "s"}
    first = ask(client, [user("one")], extra_headers=headers)
    assert first.choices[0].message.content == "ok 1"
    get_service().flush()  # the commit ran after the answer; the console's record after it
    run = RunRecord.objects.get(session_id=SESSION)
    assert "the test refused the reply" in run.error and run.status == "done"
    _sql(console_log, "DROP TRIGGER fail_replies")
    ask(client, [user("one"), sent_back(first), user("two")], extra_headers=headers)
    get_service().flush()
    assert _logged(console_log, role="assistant", content="ok 1") == ["msg"]
    assert _logged(console_log, role="assistant", content="ok 2") == ["reply"]
    assert RunRecord.objects.get(session_id=SESSION).error == ""


def test_the_request_span_times_the_commit_apart_from_the_answers_way_out(clog, ring):
    from scroll_core.gateway import Stages

    stages = Stages()
    convo = conversation(clog)
    convo.handle(
        request(user("one")),
        ScriptedUpstream(),
        model="m",
        stages=stages,
        answered=lambda reply: stages.lap("sent"),  # as the server's laps while it sends
    )
    (root,) = ring.records(REQUEST_SPAN)
    laps = [k for k in root.attributes if k.startswith("scroll.stage_")]
    # The commit (log) is timed after the answer left, from where the answer's way out ended.
    assert laps.index("scroll.stage_upstream_ms") < laps.index("scroll.stage_sent_ms")
    assert laps.index("scroll.stage_answered_ms") < laps.index("scroll.stage_log_ms")
    assert list(stages.ms)[-2:] == ["answered", "log"]


class _Appends:
    """The real log, counting its appends (each one commit) and what each held."""

    def __init__(self, log: EventLog) -> None:
        self.log, self.batches = log, []
        self._append = log.append_many

    def __enter__(self) -> _Appends:
        def counted(events, *args, **kwargs):
            self.batches.append([(e.get("metadata") or {}).get("gw") for e in events])
            return self._append(events, *args, **kwargs)

        self.log.append_many = counted  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        del self.log.append_many


def test_a_new_conversation_logs_its_prefix_with_its_messages_in_one_commit(clog):
    convo = conversation(clog)
    upstream = ScriptedUpstream()
    with _Appends(clog) as appends:
        reply = convo.handle(request(user("one")), upstream, model="m")
    # Before the upstream call: the prefix and the message together; after it: the reply.
    assert appends.batches == [["prefix", "msg"], ["reply"]]
    assert _logged(clog, role="user", content="one") == ["msg"]
    history = [user("one"), assistant_of(reply), user("two")]
    with _Appends(clog) as appends:
        convo.handle(request(*history), upstream, model="m")
    assert appends.batches == [["msg"], ["reply"]]  # the prefix unchanged: not logged again
    with _Appends(clog) as appends:
        convo.handle(request(*history, system="You are verbose now."), upstream, model="m")
    assert appends.batches[0] == ["prefix"]  # a retry appends no message: the prefix alone
    prefixes = [e for e in clog.session_events(SESSION, limit=None)
                if e.metadata.get("gw") == "prefix"]  # fmt: skip
    assert [e.content for e in prefixes] == ["You are terse.", "You are verbose now."]
    # Rebuilt from the log, the conversation knows its prefix: the next request logs none.
    again = conversation(clog)
    with _Appends(clog) as appends:
        again.handle(request(*history, system="You are verbose now."), upstream, model="m")
    assert all("prefix" not in batch for batch in appends.batches)


def test_a_prefix_whose_request_failed_before_its_append_is_logged_by_the_next(clog):
    convo = conversation(clog)
    _sql(clog, "CREATE TRIGGER fail_msgs BEFORE INSERT ON events "
               "WHEN json_extract(NEW.metadata, '$.gw') = 'msg' "
               "BEGIN SELECT RAISE(ABORT, 'the test refused the message'); END")  # fmt: skip
    with pytest.raises(Exception, match="the test refused the message"):
        convo.handle(request(user("one")), ScriptedUpstream(), model="m")
    assert clog.count(SESSION) == 0  # the prefix went down with its messages
    _sql(clog, "DROP TRIGGER fail_msgs")
    with _Appends(clog) as appends:
        convo.handle(request(user("one")), ScriptedUpstream(), model="m")
    assert appends.batches[0] == ["prefix", "msg"]
