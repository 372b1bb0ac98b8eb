"""A job's input is read strictly at submit (no coercion, no unknown fields) unless its type opts
out, within the bounds its code needs; whatever a type's input check raises is a 422, and what the
API accepted the worker reads the same way from the stored input."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest
import redis

from app.api import submissions
from app.settings import Settings
from app.store.keys import input_key
from tests.api.conftest import Api
from tests.api.helpers import KEY, Untouched
from tests.api.input_jobs import BROKEN, LAX, PLAIN, with_these_types

pytestmark = pytest.mark.anyio
JSON = {**KEY, "content-type": "application/json"}
#: A WAV whose fmt chunk claims to run past the file's end: the standard library's wave raises
#: RuntimeError on it, not its own wave.Error.
CRAFTED_WAV = "UklGRqQMAABXQVZFZm10IP////8BAAEAgD4AAAB9AAACABAAZGF0YYAMAAA="
#: The largest seed numpy's generators take (scikit-learn hands digits-train's to them).
MAX_SEED = 2**32 - 1


@pytest.fixture(scope="module")
def module_settings(module_settings: Settings) -> Settings:
    return with_these_types(module_settings)


@pytest.fixture
def api(shared_api: Api) -> Api:
    """One runtime for the module's tests (tests/api/conftest.py), with input_jobs's job types: what
    a submit writes lives in Redis, emptied for each test."""
    return shared_api


async def post(api: Api, body: Any) -> httpx.Response:
    return await api.client.post("/enqueue-task", content=json.dumps(body), headers=JSON)


async def refused(api: Api, r: redis.Redis, body: Any) -> list[dict[str, Any]]:
    """The 422 that body gets, having written nothing; its errors."""
    with Untouched(r):
        response = await post(api, body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/json"
    errors: list[dict[str, Any]] = response.json()["detail"]
    return errors


async def accepted(api: Api, body: Any) -> str:
    response = await post(api, body)
    assert response.status_code == 200, response.text
    task_id: str = response.json()["task_id"]
    return task_id


@pytest.mark.parametrize("seed", [-1, MAX_SEED + 1, 10**4000], ids=["-1", "2^32", "10^4000"])
async def test_a_seed_numpy_cannot_take_is_a_422_on_seed(
    api: Api, r: redis.Redis, seed: int
) -> None:
    errors = await refused(api, r, {"type": "digits-train", "input": {"seed": seed}})

    assert [e["loc"] for e in errors] == [["body", "input", "seed"]]


async def test_the_largest_seed_numpy_takes_is_accepted(api: Api) -> None:
    await accepted(api, {"type": "digits-train", "input": {"seed": MAX_SEED, "epochs": 1}})


@pytest.mark.parametrize("epochs", ["5", True, 5.0], ids=["string", "bool", "float"])
async def test_an_integer_field_takes_no_other_json_type(
    api: Api, r: redis.Redis, epochs: object
) -> None:
    [error] = await refused(api, r, {"type": "digits-train", "input": {"epochs": epochs}})

    assert error["loc"] == ["body", "input", "epochs"]
    assert error["type"] == "int_type"


@pytest.mark.parametrize(
    ("job_input", "loc", "kind"),
    [
        ({"limit": 1000, "bogus": 1}, ["bogus"], "extra_forbidden"),
        ({"window": {"start": 1, "end": 2}}, ["window", "end"], "extra_forbidden"),
        ({"limit": "5"}, ["limit"], "int_type"),
        ({"ratio": True}, ["ratio"], "float_type"),
        ({"ratio": "0.5"}, ["ratio"], "float_type"),
    ],
    ids=["unknown-field", "unknown-nested-field", "string-int", "bool-float", "string-float"],
)
async def test_a_type_written_as_the_docs_show_is_read_strictly(
    api: Api, r: redis.Redis, job_input: dict[str, Any], loc: list[str], kind: str
) -> None:
    [error] = await refused(api, r, {"type": PLAIN, "input": job_input})

    assert (error["loc"], error["type"]) == (["body", "input", *loc], kind)


async def test_what_the_api_accepts_the_worker_reads_from_the_stored_input(
    api: Api, r: redis.Redis
) -> None:
    """JSON's own spellings: an integer for a float, a date as text (which a strict read of
    Python objects, rather than of JSON, would refuse)."""
    job_input = {"limit": 3, "ratio": 1, "when": "2026-01-02T03:04:05Z", "window": {"start": 2}}
    task_id = await accepted(api, {"type": PLAIN, "input": job_input})

    stored = r.get(input_key(task_id))
    assert stored is not None
    plain = api.runtime.job_types.get(PLAIN)
    assert plain is not None
    inp = plain.parse_input(json.loads(stored))  # as the worker's child reads it
    assert inp.model_dump(mode="json") == {
        "limit": 3,
        "ratio": 1.0,
        "when": "2026-01-02T03:04:05Z",
        "window": {"start": 2},
    }


async def test_a_type_that_opts_out_reads_its_input_as_its_model_says(api: Api) -> None:
    await accepted(api, {"type": LAX, "input": {"limit": "5", "bogus": 1}})


async def test_the_published_schema_says_what_the_api_enforces(api: Api) -> None:
    response = await api.client.get("/job-types", headers=KEY)
    types = {t["name"]: t["input_schema"] for t in response.json()}

    plain = types[PLAIN]
    assert plain["additionalProperties"] is False
    assert plain["$defs"]["Window"]["additionalProperties"] is False
    assert "additionalProperties" not in types[LAX]  # as its model says: unknown fields ignored
    for name in ("burn", "digits-train", "vad"):
        assert types[name]["additionalProperties"] is False, name
    seed = types["digits-train"]["properties"]["seed"]
    assert (seed["minimum"], seed["maximum"]) == (0, MAX_SEED)


async def test_a_crafted_wav_is_a_422_on_audio(api: Api, r: redis.Redis) -> None:
    [error] = await refused(api, r, {"type": "vad", "input": {"audio": CRAFTED_WAV}})

    assert error["loc"] == ["body", "input", "audio"]
    assert "not a readable WAV" in error["msg"]


async def test_whatever_an_input_check_raises_is_a_422_without_a_traceback(
    api: Api, r: redis.Redis, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(submissions, "_logged", set())  # what this process has logged so far
    caplog.set_level(logging.DEBUG)
    for _ in range(3):
        [error] = await refused(api, r, {"type": BROKEN, "input": {"text": "boom"}})

        assert error["loc"] == ["body", "input"]
        assert error["type"] == "input_unreadable"
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR or rec.exc_info]
    # the type's bug is said to the operator once, however many requests meet it
    warnings = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert warnings == [f"job type {BROKEN}: its input check raised RuntimeError"]


async def test_an_unknown_type_is_a_422_that_does_not_say_the_name_back(
    api: Api, r: redis.Redis
) -> None:
    name = "no-such-type-" + "x" * 40
    [error] = await refused(api, r, {"type": name, "input": {}})

    assert error["loc"] == ["body", "type"]
    assert "GET /job-types" in error["msg"]
    assert name not in json.dumps(error)
