"""The timing command's optional profile (kbv.worker.diagnose): off by default, and when kbv's environment asks
for it, it reaches the worker and names where the time went."""

from __future__ import annotations

from kbv.sandbox import plan
from kbv.worker import diagnose


def test_a_profile_lists_the_functions_that_took_the_time_and_only_when_asked() -> None:
    def busy() -> int:
        return sum(i * i for i in range(20000))

    with diagnose.profiled(False) as off:
        busy()
    assert off.text is None
    with diagnose.profiled(True) as on:
        busy()
    assert on.text is not None
    assert on.text[0] == "by tottime:" and "by cumulative:" in on.text
    assert any("busy" in line for line in on.text)
    assert diagnose.median_ms(busy, diagnose.sync_of("cpu"), calls=3) > 0


def test_the_profile_switch_reaches_the_worker_and_is_no_secret() -> None:
    env = plan.worker_environment({diagnose.PROFILE_ENV: "1", "OPENAI_API_KEY": "sk-x", "PATH": "/bin"})
    assert env.get(diagnose.PROFILE_ENV) == "1"
    assert "OPENAI_API_KEY" not in env
