"""Choosing the sandbox tier: auto takes the strongest, bwrap fails closed, and auto falls
back to the weaker process tier only when the operator allowed it."""

from __future__ import annotations

import pytest

from scroll_core.errors import ConfigError
from scroll_core.kernel import Kernel, KernelConfig, SandboxUnavailable, bwrap_status, sandbox


def test_the_setting_comes_from_scroll_sandbox():
    assert KernelConfig.from_env({"SCROLL_SANDBOX": "process"}).sandbox == "process"
    assert KernelConfig.from_env({}).sandbox == "auto"
    assert KernelConfig.from_env({"SCROLL_SANDBOX": "bwrap"}, sandbox="process").sandbox == (
        "process"
    )


def test_the_fallback_comes_from_scroll_sandbox_fallback():
    assert KernelConfig.from_env({}).fallback == "none"
    config = KernelConfig.from_env({"SCROLL_SANDBOX_FALLBACK": " Process "})
    assert config.fallback == "process"


def test_an_unknown_fallback_is_a_config_error():
    with pytest.raises(ConfigError, match="sandbox fallback must be one of none, process"):
        KernelConfig.from_env({"SCROLL_SANDBOX_FALLBACK": "bwrap"})


def test_an_unknown_tier_is_a_config_error():
    with pytest.raises(ConfigError, match="sandbox must be one of"):
        KernelConfig(sandbox="docker")


@pytest.mark.parametrize("knob", ["print_cap", "timeout_s", "memory_mb", "processes"])
def test_limits_must_be_positive(knob):
    with pytest.raises(ConfigError):
        KernelConfig(**{knob: 0})


def test_auto_takes_bwrap_when_it_works():
    ok, _ = bwrap_status()
    assert sandbox.resolve_tier("auto") == ("bwrap" if ok else "process")
    assert sandbox.resolve_tier("process") == "process"


def test_bwrap_required_but_missing_refuses_to_start(monkeypatch):
    monkeypatch.setattr(sandbox, "bwrap_status", lambda: (False, "bwrap is not installed"))
    with pytest.raises(SandboxUnavailable, match="SCROLL_SANDBOX=bwrap"):
        Kernel(KernelConfig(sandbox="bwrap"))
    with pytest.raises(SandboxUnavailable, match="SCROLL_SANDBOX=bwrap"):
        Kernel(KernelConfig(sandbox="bwrap", fallback="process"))


def test_auto_without_bwrap_refuses_unless_the_fallback_is_allowed(monkeypatch):
    monkeypatch.setattr(sandbox, "bwrap_status", lambda: (False, "bwrap is not installed"))
    with pytest.raises(SandboxUnavailable, match="SCROLL_SANDBOX_FALLBACK=process"):
        Kernel(KernelConfig())
    with pytest.raises(SandboxUnavailable, match="bwrap is not installed"):
        Kernel.resolve(KernelConfig.from_env({"SCROLL_SANDBOX": "auto"}))
    allowed = KernelConfig.from_env({"SCROLL_SANDBOX_FALLBACK": "process"})
    with Kernel(allowed) as kernel:
        status = kernel.status()
        assert (status.tier, status.strength) == ("process", "weaker")
        assert kernel.execute("print('ran')").stdout == "ran\n"


def test_the_process_tier_scratch_is_removed_at_close():
    k = Kernel(KernelConfig(sandbox="process"))
    scratch = k._spec.host_scratch
    k.execute("open('note.txt', 'w').write('hi')")
    k.close()
    import os

    assert scratch and not os.path.exists(scratch)
    assert not k.alive


@pytest.mark.skipif(not bwrap_status()[0], reason=bwrap_status()[1])
def test_the_bwrap_kernel_sees_only_runtime_and_scratch():
    with Kernel(KernelConfig(sandbox="bwrap")) as k:
        result = k.execute(
            "import os\nprint(sorted(os.listdir('/scratch')), os.getcwd(), os.getuid(), "
            "dict(os.environ).get('HOME'))"
        )
        assert result.stdout == "[] /scratch 65534 /scratch\n"
