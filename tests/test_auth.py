"""Accounts: keys map to accounts by digest; the file is checked when loaded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.auth import Account, Accounts, digest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "users.json"


def test_demo_accounts_load_and_keys_map_to_accounts() -> None:
    accounts = Accounts.load(FIXTURES)
    demo = accounts.authenticate("default_api_key")
    assert demo is not None
    assert demo.user_id == "11111111-1111-1111-1111-111111111111"
    assert demo.admin
    second = accounts.authenticate("second_api_key")
    assert second is not None
    assert not second.admin
    assert accounts.authenticate("second_api_key_v2") is second  # listed by its sha256 only


@pytest.mark.parametrize("key", [None, "", "wrong", "default_api_key ", "é" * 500, "x" * 100_000])
def test_unknown_keys_authenticate_nobody(key: str | None) -> None:
    assert Accounts.load(FIXTURES).authenticate(key) is None


#: Limits an accounts file may not give: at least one job running, more than no GPU-seconds.
LIMITS_OUT_OF_RANGE = [
    ("max_running", 0),
    ("max_running", -1),
    ("max_running", 1.5),
    ("max_held_gpu_seconds", 0),
    ("max_held_gpu_seconds", -60),
    ("max_held_gpu_seconds", float("inf")),
    ("max_held_gpu_seconds", float("nan")),
]


def test_the_accounts_file_may_limit_an_account_and_no_limit_is_the_default(
    tmp_path: Path,
) -> None:
    path = tmp_path / "users.json"
    limited = {"user_id": "lab", "api_keys": ["lab_key"], "max_running": 2,
               "max_held_gpu_seconds": 600}  # fmt: skip
    path.write_text(json.dumps({"accounts": [limited, {"user_id": "free", "api_keys": ["k"]}]}))
    accounts = Accounts.load(path)
    lab, free = accounts.get("lab"), accounts.get("free")
    assert lab is not None and free is not None
    assert (lab.max_running, lab.max_held_gpu_seconds) == (2, 600.0)
    assert (free.max_running, free.max_held_gpu_seconds) == (None, None)


def test_share_defaults_to_one() -> None:
    accounts = Accounts.load(FIXTURES)
    assert accounts.share("33333333-3333-3333-3333-333333333333") == 2
    assert accounts.share("11111111-1111-1111-1111-111111111111") == 1
    assert accounts.share("nobody") == 1


def test_a_key_shared_by_two_accounts_is_refused() -> None:
    a = Account(user_id="a", api_keys=("k",))
    b = Account(user_id="b", api_keys=(f"sha256:{digest('k')}",))
    with pytest.raises(ValueError, match="another account"):
        Accounts([a, b])


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        json.dumps({"accounts": [{"user_id": "a", "api_keys": []}]}),
        json.dumps({"accounts": [{"user_id": "a", "api_keys": ["k"], "share": 0}]}),
        json.dumps({"accounts": [{"user_id": "a", "api_keys": ["k"], "extra": 1}]}),
        *(
            json.dumps({"accounts": [{"user_id": "a", "api_keys": ["k"], name: value}]})
            for name, value in LIMITS_OUT_OF_RANGE
        ),
    ],
)
def test_a_malformed_accounts_file_is_a_clear_error(tmp_path: Path, content: str) -> None:
    path = tmp_path / "users.json"
    path.write_text(content)
    with pytest.raises(ValueError, match="cannot load accounts"):
        Accounts.load(path)
