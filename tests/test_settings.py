"""Settings: defaults, validation, and the table of docs/configuration.md kept true."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.settings import Settings

TABLE = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def test_every_setting_is_in_the_configuration_table_and_nothing_else() -> None:
    documented = set(re.findall(r"^\| `([A-Z_]+)` \|", TABLE.read_text(), flags=re.M))
    settings = {name.upper() for name in Settings.model_fields}
    assert settings <= documented
    assert documented - settings == {"CUDA_VISIBLE_DEVICES"}


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEASE_SECONDS", "12.5")
    monkeypatch.setenv("MAX_ATTEMPTS", "5")
    settings = Settings()
    assert (settings.lease_seconds, settings.max_attempts) == (12.5, 5)


def test_heartbeat_must_be_shorter_than_the_lease() -> None:
    with pytest.raises(ValidationError, match="HEARTBEAT_SECONDS"):
        Settings(lease_seconds=5, heartbeat_seconds=5)


@pytest.mark.parametrize("field", ["lease_seconds", "max_attempts", "max_concurrency"])
def test_counts_and_durations_must_be_positive(field: str) -> None:
    with pytest.raises(ValidationError):
        Settings(**{field: 0})  # type: ignore[arg-type]


def test_kind_limits_and_prices() -> None:
    settings = Settings()
    assert settings.max_duration_s("short") == 60
    assert settings.max_duration_s("long") == 3000
    assert settings.price_per_s("short") == 0.5
    assert settings.price_per_s("long") == 0.25


def test_preemption_defaults_and_limits() -> None:
    settings = Settings()
    assert (settings.preempt_after_s, settings.preempt_min_run_s) == (300, 60)
    assert settings.preempt_grace_s == 30
    assert Settings(preempt_after_s=0, preempt_min_run_s=0).preempt_min_run_s == 0
    for field, value in [
        ("preempt_after_s", -1),
        ("preempt_min_run_s", -1),
        ("preempt_grace_s", 0),
        ("preempt_after_s", float("inf")),
    ]:
        with pytest.raises(ValidationError, match=field):
            Settings(**{field: value})  # type: ignore[arg-type]


def test_the_script_network_deny_list_is_parsed_and_a_bad_entry_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SCRIPT_NETWORK_DENY", "10.0.0.0/8, 192.168.1.7,fd00::/8")
    assert [str(net) for net in Settings().script_network_deny] == [
        "10.0.0.0/8",
        "192.168.1.7/32",
        "fd00::/8",
    ]
    assert Settings(script_network_deny="").script_network_deny == []
    for bad in ("10.0.0.1/8", "10.0.0.0/33", "not-an-address"):
        with pytest.raises(ValidationError, match="script_network_deny"):
            Settings(script_network_deny=bad)


def test_the_fleets_settings_and_their_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings()
    assert (settings.gpu_classes, settings.worker_host, settings.worker_gpu_class) == (None,) * 3
    assert settings.fleet_ttl_s == 600
    with pytest.raises(ValidationError, match="fleet_ttl_s"):
        Settings(fleet_ttl_s=0)
    monkeypatch.setenv("GPU_CLASSES", '{"big": {"memory_gb": 80, "price": 2.0}}')
    monkeypatch.setenv("WORKER_HOST", "node-7")
    monkeypatch.setenv("WORKER_GPU_CLASS", "big")
    settings = Settings()
    assert settings.gpu_classes == '{"big": {"memory_gb": 80, "price": 2.0}}'
    assert (settings.worker_host, settings.worker_gpu_class) == ("node-7", "big")


def test_a_bad_gpu_catalog_stops_the_process_at_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GPU_CLASSES", '{"big": {"memory_gb": 0, "price": 2.0}}')
    with pytest.raises(ValidationError, match=r"gpu_classes\n.*class 'big': memory_gb"):
        Settings()
    path = tmp_path / "classes.json"
    path.write_text('{"big": {"memory_gb": 80, "price": 1, "colour": "red"}}')
    with pytest.raises(ValidationError, match=r"class 'big': colour: Extra inputs"):
        Settings(gpu_classes=str(path))
    with pytest.raises(ValidationError, match=r"cannot read the file"):
        Settings(gpu_classes=str(tmp_path / "missing.json"))


def test_the_checks_moved_out_of_settings_still_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKER_QUEUES", "short, long")
    monkeypatch.setenv("REDIS_SENTINELS", "a:26379,b:26380")
    settings = Settings()
    assert settings.worker_queues == ["short", "long"]
    assert settings.sentinels == [("a", 26379), ("b", 26380)]
    for field, bad in [
        ("worker_queues", "gpu"),
        ("redis_sentinels", "a:0"),
        ("redis_sentinels", "nohost"),
        ("price_short_per_s", 0.1234567),
    ]:
        with pytest.raises(ValidationError, match=field):
            Settings(**{field: bad})  # type: ignore[arg-type]
