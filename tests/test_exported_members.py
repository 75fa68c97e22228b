import scroll_core


def test_the_public_core_is_pinned():
    exported = set(scroll_core.__all__)
    assert exported == {name for name in dir(scroll_core) if not name.startswith("_")} & exported
    assert {
        "EventLog",
        "Event",
        "Hit",
        "SessionSummary",
        "ToolResultRef",
        "ArtifactRef",
        "ScrollError",
        "AppendOnlyViolation",
        "InvalidEvent",
        "EventNotFound",
        "PayloadMissing",
        "PayloadCorrupt",
        "IngestError",
        "Profile",
        "EvictionIndex",
        "EvictionIndexError",
        "ContextWindowUnfit",
        "ContextState",
        "Prefix",
        "ViewReport",
        "WorkingView",
        "CompressRecord",
        "build_view",
        "compress",
        "parse_headline",
        "format_headline",
        "SEAM_BANNER",
    } <= exported
    for name in exported:
        assert getattr(scroll_core, name) is not None


def test_the_core_does_not_import_the_web_framework():
    import pathlib
    import re

    root = pathlib.Path(scroll_core.__file__).parent
    pattern = re.compile(r"^\s*(from|import)\s+(django|channels|daphne)\b", re.MULTILINE)
    offenders = [str(p) for p in root.rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []
