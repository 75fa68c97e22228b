import scroll_core


def test_the_public_core_is_pinned():
    # Adding a name is a decision; this list makes it a visible one.
    assert sorted(scroll_core.__all__) == [
        "ABSTENTION",
        "AgentNotReadable",
        "AppendOnlyViolation",
        "ArtifactRef",
        "CharRatioCounter",
        "ChatModel",
        "CompressRecord",
        "ConfigError",
        "ContextOverflow",
        "ContextState",
        "ContextWindowUnfit",
        "Event",
        "EventLog",
        "EventLogError",
        "EventLogUnavailable",
        "EventNotFound",
        "EventStore",
        "EvictionIndex",
        "EvictionIndexError",
        "GatewayRequestInvalid",
        "Headline",
        "HeadlineParse",
        "Hit",
        "HostFunctionRefused",
        "IndexBlock",
        "IndexRender",
        "IngestError",
        "InvalidEvent",
        "KIND_CONTEXT_MSG",
        "KIND_MODEL_TURN",
        "KIND_TOOL_RESULT",
        "KernelError",
        "KernelProtocolError",
        "KernelUnresponsive",
        "ModelError",
        "ModelReply",
        "OpenAICompatibleModel",
        "POLICY_NAME",
        "PayloadCorrupt",
        "PayloadError",
        "PayloadMissing",
        "PayloadStore",
        "PolicyModel",
        "Prefix",
        "Profile",
        "QueryRefused",
        "RECALL_TOOL",
        "REPL_TOOL",
        "SEAM_BANNER",
        "SandboxUnavailable",
        "ScopedReader",
        "ScrollError",
        "SearchIndexCorrupt",
        "SearchTimeout",
        "SearchTuning",
        "Seqs",
        "Session",
        "SessionSummary",
        "StepRecord",
        "TermStats",
        "TiktokenCounter",
        "TokenCounter",
        "ToolCall",
        "ToolResultRef",
        "TurnResult",
        "Usage",
        "ViewReport",
        "WorkingView",
        "build_view",
        "compress",
        "format_headline",
        "open_event_store",
        "parse_headline",
        "system_prompt",
        "tool_definitions",
    ]
    for name in scroll_core.__all__:
        assert getattr(scroll_core, name) is not None


def test_importing_the_core_does_not_load_the_model_client():
    import subprocess
    import sys

    code = "import sys, scroll_core; print('openai' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_core_does_not_import_the_web_framework():
    import pathlib
    import re

    root = pathlib.Path(scroll_core.__file__).parent
    pattern = re.compile(r"^\s*(from|import)\s+(django|channels|daphne)\b", re.MULTILINE)
    offenders = [str(p) for p in root.rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []
