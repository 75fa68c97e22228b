"""The policy baseline writes real ``ms`` programs that run in the sandboxed kernel."""

from __future__ import annotations

import re

import pytest

from scroll_core.errors import ConfigError
from scroll_core.headlines import parse_headline
from scroll_core.kernel import Kernel, KernelConfig
from scroll_core.kernel.ms import MsCapability
from scroll_core.models import ChatModel, PolicyModel
from scroll_core.models.policy import (
    POLICY_NAME,
    analyse_question,
    choose_evidence,
    cite,
    compose_answer,
    find_evidence,
    format_headline,
    when_phrase,
)
from scroll_core.prompts import ABSTENTION, RECALL_TOOL, REPL_TOOL, system_prompt, tool_definitions
from tests.conftest import BACKENDS, open_store

HEADLINE = re.compile(r"^⟦[^|⟦⟧]+ \| status: [^;|⟧]+; next: [^|⟧]+ \| anchors: [^|⟧]+⟧$")

FILLER = [
    ("Melanie", "I painted a sunrise over the lake last weekend."),
    ("Caroline", "Work has been busy, lots of meetings this week."),
    ("Melanie", "The kids loved the museum trip."),
    ("Caroline", "I am reading a novel about a lighthouse keeper."),
]


@pytest.fixture(scope="module", params=BACKENDS)
def event_log(request, tmp_path_factory):
    """The planted log on each backend: the programs the policy writes (sql_query with ?
    placeholders included) run on both."""
    with open_store(request, request.param, tmp_path_factory.mktemp("policy")) as log:
        day = 1
        for round_ in range(6):
            for i, (speaker, text) in enumerate(FILLER):
                log.append(
                    session_id=f"s{round_}",
                    kind="chat_turn",
                    role="user",
                    name=speaker,
                    content=text,
                    created_at=f"2023-04-{day:02d}T10:{i:02d}:00Z",
                )
            day += 2
        log.append(
            session_id="s7",
            kind="chat_turn",
            role="user",
            name="Melanie",
            content="How was your week?",
            created_at="2023-05-08T09:00:00Z",
        )
        log.append(
            session_id="s7",
            kind="chat_turn",
            role="user",
            name="Caroline",
            content="Great news. I went to the LGBTQ support group yesterday and it was powerful.",
            created_at="2023-05-08T09:01:00Z",
        )
        log.append(
            session_id="s7",
            kind="chat_turn",
            role="user",
            name="Melanie",
            content="My dog Biscuit chewed my sneakers again!",
            created_at="2023-05-08T09:02:00Z",
        )
        log.append(
            session_id="s8",
            kind="chat_turn",
            role="user",
            name="Caroline",
            content="I adopted a cat and named her Pepper.",
            created_at="2023-06-20T18:00:00Z",
        )
        yield log


@pytest.fixture(scope="module")
def ms(event_log):
    cap = MsCapability(event_log, agent_id="main")
    yield cap
    cap.close()


@pytest.fixture(scope="module")
def kernel(ms):
    with Kernel(KernelConfig(sandbox="process"), host_functions=ms.functions()) as k:
        yield k


def converse(model, kernel, question, *, max_steps=4):
    """Drive the policy as the agent loop would: call, run tool calls, feed results back."""
    messages = [
        {"role": "system", "content": system_prompt()},
        {"role": "user", "content": question},
    ]
    tools = tool_definitions()
    replies = []
    for _ in range(max_steps):
        reply = model.complete(messages, tools)
        replies.append(reply)
        messages.append(reply.to_message())
        if not reply.tool_calls:
            return reply, replies, messages
        for call in reply.tool_calls:
            result = kernel.execute(call.arguments["code"])
            output = result.stdout if result.ok else f"{result.error.type}: {result.error.message}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
    raise AssertionError("the policy did not finish")


def headline_of(content):
    last = content.rstrip().splitlines()[-1]
    assert HEADLINE.match(last), last
    return last


def test_it_is_a_labelled_baseline_that_fits_the_protocol():
    model = PolicyModel()
    assert isinstance(model, ChatModel)
    assert model.name == POLICY_NAME == "scroll-policy-baseline"
    assert model.baseline is True
    assert "not an LLM" in repr(model)


def test_step_one_writes_an_ms_program_with_separate_bounded_searches():
    question = "What is the name of Melanie's dog?"
    reply = PolicyModel().complete([{"role": "user", "content": question}], tool_definitions())
    assert reply.finish_reason == "tool_calls" and reply.model == POLICY_NAME
    (call,) = reply.tool_calls
    assert call.name == RECALL_TOOL
    code = call.arguments["code"]
    assert "ms.search(query, k=5" in code
    assert "'Melanie name dog'" in code and "'name dog'" in code  # entity and terms apart
    assert "ms.expand(lo, hi)" in code and "print(" in code
    assert "ms.sql_query" not in code  # no time named, no date filter
    compile(code, "<policy>", "exec")
    headline_of(reply.content)


def test_it_finds_a_planted_fact_in_the_sandboxed_kernel(kernel):
    model = PolicyModel()
    answer, replies, messages = converse(model, kernel, "What is the name of Melanie's dog?")
    assert len(replies) == 2
    printed = messages[-2]["content"]
    assert "*[27] 2023-05-08 Melanie: My dog Biscuit chewed my sneakers again!" in printed
    assert all(len(line) < 400 for line in printed.splitlines())  # a compact projection
    assert answer.content.splitlines()[0] == "Biscuit"  # the short answer first ...
    assert ABSTENTION not in answer.content
    headline = headline_of(answer.content)
    # ... and where it comes from in the headline.
    assert "status: answered from seq 27 (2023-05-08, Melanie)" in headline and "dog" in headline


def test_a_named_time_filters_by_day_deterministically(kernel, ms):
    question = "When did Caroline go to the LGBTQ support group in May 2023?"
    calls_before = len(ms.calls)
    answer, replies, _ = converse(PolicyModel(), kernel, question)
    code = replies[0].tool_calls[0].arguments["code"]
    assert "substr(created_at,1,10) BETWEEN ? AND ?" in code
    assert "since, until = '2023-05-01', '2023-06-01'" in code
    names = [c.name for c in ms.calls[calls_before:]]
    assert names.count("search") == 3 and "sql_query" in names and "expand" in names
    searches = [c for c in ms.calls[calls_before:] if c.name == "search"]
    assert all(c.kwargs.get("k") == 5 and c.kwargs.get("since") for c in searches)
    # "yesterday", said on 8 May: the ISO date first, the citation in the headline.
    assert answer.content.splitlines()[0] == "2023-05-07"
    assert "status: answered from seq 26 (2023-05-08, Caroline)" in headline_of(answer.content)


def test_expand_is_not_redundant(kernel, ms):
    before = len(ms.calls)
    converse(PolicyModel(), kernel, "What is the name of Melanie's dog?")
    spans = [tuple(c.args) for c in ms.calls[before:] if c.name == "expand"]
    covered = [set(range(lo, hi + 1)) for lo, hi in spans]
    assert all(a.isdisjoint(b) for i, a in enumerate(covered) for b in covered[i + 1 :])


def test_it_abstains_with_the_exact_phrase_when_nothing_relevant_is_printed(kernel):
    answer, _, _ = converse(PolicyModel(), kernel, "What is my accountant's phone number?")
    assert answer.content.splitlines()[0] == ABSTENTION
    assert "status: abstained" in headline_of(answer.content)


def test_it_is_deterministic_for_the_same_inputs(kernel):
    first = converse(PolicyModel(), kernel, "What did Caroline adopt?")
    second = converse(PolicyModel(), kernel, "What did Caroline adopt?")
    assert first[1] == second[1]  # every reply, tool call ids included
    assert "Pepper" in first[0].content


def test_the_live_question_is_never_its_own_evidence(store):
    log = store
    log.append(session_id="a", kind="context_msg", role="user", content="zebra stripes?")
    ms = MsCapability(log)
    with Kernel(KernelConfig(sandbox="process"), host_functions=ms.functions()) as kernel:
        answer, _, _ = converse(PolicyModel(), kernel, "zebra stripes?")
    ms.close()
    assert answer.content.splitlines()[0] == ABSTENTION


def test_hostile_question_text_stays_a_string(kernel):
    question = "What about 'x'); import os; os.system('id') #\"\nand\\n Biscuit?"
    reply = PolicyModel().complete([{"role": "user", "content": question}], tool_definitions())
    result = kernel.execute(reply.tool_calls[0].arguments["code"])
    assert result.ok, result.error
    assert "question = " + repr(" ".join(question.split())) in reply.tool_calls[0].arguments["code"]


def test_a_failed_program_is_retried_once_with_a_plain_search(kernel):
    model = PolicyModel()
    messages = [{"role": "user", "content": "What did Caroline adopt?"}]
    first = model.complete(messages, tool_definitions())
    messages += [
        first.to_message(),
        {
            "role": "tool",
            "tool_call_id": first.tool_calls[0].id,
            "content": "Traceback (most recent call last):\nNameError: name 'ms' is not defined",
        },
    ]
    retry = model.complete(messages, tool_definitions())
    (call,) = retry.tool_calls
    assert "fallback" in call.arguments["code"] and "ms.search(" in call.arguments["code"]
    out = kernel.execute(call.arguments["code"]).stdout
    messages += [retry.to_message(), {"role": "tool", "tool_call_id": call.id, "content": out}]
    answer = model.complete(messages, tool_definitions())
    assert not answer.tool_calls and "Pepper" in answer.content


def test_a_python_block_in_the_request_runs_with_repl_exec(kernel):
    request = "Please compute this:\n```python\ntotal = sum(range(10))\nprint(total * 2)\n```"
    answer, replies, _ = converse(PolicyModel(), kernel, request)
    assert replies[0].tool_calls[0].name == REPL_TOOL
    assert (
        replies[0].tool_calls[0].arguments["code"] == "total = sum(range(10))\nprint(total * 2)\n"
    )
    assert "The cell printed:\n90" in answer.content
    assert "anchors: total" in headline_of(answer.content)


def test_without_task_code_a_python_block_is_declined_and_nothing_runs():
    request = "Please compute this:\n```python\nimport os\nprint(os.listdir('/'))\n```"
    model = PolicyModel(task_code=False)

    reply = model.complete([{"role": "user", "content": request}], tool_definitions())

    assert not reply.tool_calls and reply.finish_reason == "stop"
    assert "run_task_code" in reply.content
    assert "status: code not run" in headline_of(reply.content)
    # A question without code is still answered from the log as before.
    question = model.complete(
        [{"role": "user", "content": "Where is Biscuit?"}], tool_definitions()
    )
    assert question.tool_calls and question.tool_calls[0].name == RECALL_TOOL


def test_without_recall_tools_it_abstains_rather_than_guessing():
    reply = PolicyModel().complete([{"role": "user", "content": "Where is Biscuit?"}], [])
    assert not reply.tool_calls and reply.content.startswith(ABSTENTION)
    headline_of(reply.content)


def _history(*turns):
    # A transcript as a plain agent keeps it: one user message per turn, stamped lines.
    return [
        {"role": "user", "name": who, "content": f"[{day} 10:00] {text}"}
        for day, who, text in turns
    ]


def test_without_tools_it_answers_from_a_fact_its_view_shows():
    messages = [
        {"role": "system", "content": "Answer from the conversation; Melanie's dog is Rex."},
        *_history(
            ("2023-05-08", "Melanie", "My dog Biscuit chewed my sneakers again!"),
            ("2023-05-09", "Caroline", "Work has been busy this week."),
        ),
        {"role": "assistant", "content": "Melanie's dog is called Spot."},
        {"role": "user", "content": "What is the name of Melanie's dog?"},
    ]
    reply = PolicyModel().complete(messages, [])
    assert not reply.tool_calls
    # The speaker's words, not the system prompt's nor its own earlier reply.
    assert reply.content.splitlines()[0] == "Biscuit"
    assert "status: answered from view (2023-05-08, Melanie)" in headline_of(reply.content)


def test_a_when_answer_from_the_view_is_anchored_on_the_line_s_stamp():
    messages = [
        *_history(("2023-05-08", "Caroline", "I went to the LGBTQ support group yesterday.")),
        {"role": "user", "content": "When did Caroline go to the LGBTQ support group?"},
    ]
    assert PolicyModel().complete(messages, []).content.splitlines()[0] == "2023-05-07"


def test_among_equal_view_sentences_the_newer_wins():
    messages = [
        *_history(
            ("2023-05-01", "Ann", "My okapi is named Zed."),
            ("2023-06-01", "Ann", "My okapi is named Quill."),
        ),
        {"role": "user", "content": "What is Ann's okapi named?"},
    ]
    assert PolicyModel().complete(messages, []).content.splitlines()[0] == "Quill"


def test_a_sentence_both_printed_and_in_view_is_cited_by_its_seq():
    q = analyse_question("What did Melanie paint last weekend?")
    sentence = "I painted a sunrise over the lake, so calm."
    lines = _printed((40, "2023-05-08", "Melanie", sentence)) + f"\n=[-1] - user: {sentence}"
    chosen = choose_evidence(find_evidence(q, lines))
    assert [e.seq for e in chosen] == [40]


def test_it_abstains_in_the_wording_it_was_given():
    said = "Not mentioned in the conversation."
    reply = PolicyModel(abstention=said).complete(
        [{"role": "user", "content": "Where is Biscuit's okapi?"}], []
    )
    assert reply.content.splitlines()[0] == said
    with pytest.raises(ConfigError):
        PolicyModel(abstention="  ")
    with pytest.raises(ConfigError):
        PolicyModel(shared_specific=0.0)


def test_a_stricter_share_of_specific_terms_abstains_where_a_looser_answers():
    q = analyse_question("What colour is the lighthouse keeper's boat?")
    printed = _printed((7, "2023-05-08", "Ann", "The keeper's boat is red."))
    assert find_evidence(q, printed, share=0.5)
    assert find_evidence(q, printed, share=1.0) == []


def test_repl_exec_stands_in_for_recall_when_it_is_the_only_tool(kernel):
    tools = [t for t in tool_definitions() if t["function"]["name"] == REPL_TOOL]
    model = PolicyModel()
    messages = [{"role": "user", "content": "What is the name of Melanie's dog?"}]
    first = model.complete(messages, tools)
    assert first.tool_calls[0].name == REPL_TOOL
    out = kernel.execute(first.tool_calls[0].arguments["code"]).stdout
    messages += [
        first.to_message(),
        {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": out},
    ]
    assert "Biscuit" in model.complete(messages, tools).content


@pytest.mark.parametrize(
    ("text", "since", "until"),
    [
        ("What happened on 2023-05-08?", "2023-05-08", "2023-05-09"),
        ("What happened on May 8, 2023?", "2023-05-08", "2023-05-09"),
        ("What happened on 8th May 2023?", "2023-05-08", "2023-05-09"),
        ("What did we plan in December 2023?", "2023-12-01", "2024-01-01"),
        ("What did we do in 2022?", "2022-01-01", "2023-01-01"),
        ("What did we do yesterday?", None, None),
    ],
)
def test_named_times_become_half_open_day_ranges(text, since, until):
    question = analyse_question(text)
    assert (question.since, question.until) == (since, until)


def test_entities_and_terms_are_read_separately():
    q = analyse_question('When did Caroline meet "Project Falcon" people in New York?')
    assert q.entities == ("Project Falcon", "Caroline", "New York")
    assert q.terms == ("meet", "people")
    assert q.specific == ("meet",)


def test_headline_fields_cannot_break_the_format():
    line = format_headline("a | b ⟦x⟧", "ok; fine", "n|m", ["x|y", "", "z"])
    assert HEADLINE.match(line), line


def test_its_own_earlier_lookups_are_not_evidence(store):
    log = store
    log.append(session_id="a", kind="chat_turn", name="Ann", content="My okapi is named Zed.")
    # An earlier recall printout right beside the fact, as the agent loop stores it.
    log.append(
        session_id="a",
        kind="tool_result",
        name=RECALL_TOOL,
        tool_call_id="c0",
        content="*[1] 2023-01-01 Ann: My okapi is named Zed. (an old printout)",
        searchable=False,
    )
    ms = MsCapability(log)
    with Kernel(KernelConfig(sandbox="process"), host_functions=ms.functions()) as kernel:
        answer, _, messages = converse(PolicyModel(), kernel, "What is the okapi named?")
    ms.close()
    printed = "\n".join(m["content"] for m in messages if m["role"] == "tool")
    assert "[1]" in printed
    assert "old printout" not in printed
    assert "Zed" in answer.content


def test_its_headlines_parse_as_ok_with_the_canonical_parser():

    for anchors in (["Biscuit", "dog"], []):
        parsed = parse_headline(
            "answer\n" + format_headline("find the dog", "done", "wait", anchors)
        )
        assert parsed.quality == "ok"
        assert parsed.headline is not None and parsed.headline.anchors


def _printed(*lines):
    return "\n".join(f"*[{seq}] {day} {who}: {text}" for seq, day, who, text in lines)


@pytest.mark.parametrize(
    ("sentence", "wanted"),
    [
        ("I went to the support group yesterday.", "2023-05-07"),
        ("I gave a talk at a school last week.", "the week before 2023-05-08"),
        ("I ran a charity race last Sunday.", "the sunday before 2023-05-08"),
        ("I painted that sunrise last year.", "2022"),
        ("I started it last month.", "2023-04"),
        ("We moved here in March 2021.", "2021-03"),
        ("I signed up for a pottery class.", "2023-05-08"),
    ],
)
def test_a_when_question_is_answered_with_an_iso_date_phrase(sentence, wanted):
    # ISO 8601, no data set's own date style: a bench that wants another style rewrites it.
    assert when_phrase(sentence, "2023-05-08") == wanted


def test_an_undated_sentence_answers_when_with_the_time_it_names():
    assert when_phrase("We moved here in March 2021.", "-") == "2021-03"


def test_answers_are_short_and_cite_in_the_headline_only():
    q = analyse_question("What did Melanie paint last weekend?")
    printed = _printed((40, "2023-05-08", "Melanie", "I painted a sunrise over the lake, so calm."))
    chosen = choose_evidence(find_evidence(q, printed))
    assert compose_answer(q, chosen) == "sunrise over the lake"
    assert cite(chosen) == "seq 40 (2023-05-08, Melanie)"
    yes = analyse_question("Did Melanie paint the sunrise?")
    assert compose_answer(yes, choose_evidence(find_evidence(yes, printed))) == "Yes"


def test_questions_and_its_own_replies_are_not_evidence_so_it_abstains():
    # An adversarial question: only the earlier question and the baseline's reply share
    # its terms, never something a speaker said.
    q = analyse_question("What journal has Deborah been using to track tasks?")
    printed = _printed(
        (90, "2026-11-29", "user", "What journal has Jolene been using to track tasks?"),
        (91, "2026-11-29", "assistant", "bullet journal"),
        (12, "2023-08-16", "Jolene", "Work has been busy this week."),
    )
    assert find_evidence(q, printed) == []
    assert compose_answer(q, []) == ABSTENTION


def test_a_cell_headline_names_the_request_and_what_the_output_carried(kernel):
    request = (
        "Check the deploys of payments-api.\n```python\n"
        "rows = ['10:02 payments-api v2.41.0 PoolTimeoutError trace=88a93551b3b7 /v1/x',\n"
        "        '14:20 v2.40.3']\n"
        "for r in rows:\n    print(r)\n```"
    )
    answer, _, _ = converse(PolicyModel(), kernel, request)
    parsed = parse_headline(answer.content)
    assert parsed.quality == "ok"
    assert parsed.headline.task == "Check the deploys of payments-api."
    anchors = parsed.headline.anchors
    assert {"v2.41.0", "v2.40.3", "PoolTimeoutError"} <= set(anchors)
    assert "rows" in anchors
    assert "88a93551b3b7" not in anchors and "v1" not in anchors  # noise, not anchors
