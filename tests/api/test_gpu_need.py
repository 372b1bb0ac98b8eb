"""What a job needs of its card, at the API: GET /job-types lists each type's need and the
classes that serve it; a submit's `gpu` narrows its type's need, and a need the catalog cannot
serve is a 422 that names its field and writes nothing."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from app.api.submissions import checked_submission
from app.models import TypedEnqueueRequest
from app.settings import Settings
from tests.api.conftest import Api
from tests.api.gpu_need_jobs import (
    ANY,
    BIG_FIRST,
    ELSEWHERE,
    MEMORY,
    SMALL_ONLY,
    with_catalog,
)
from tests.api.helpers import KEY, Untouched

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def module_settings(module_settings: Settings) -> Settings:
    """The catalog's two classes (big, small) and the types of gpu_need_jobs."""
    return with_catalog(module_settings)


@pytest.fixture
def api(shared_api: Api) -> Api:
    """One runtime for the module's tests (tests/api/conftest.py)."""
    return shared_api


async def post(api: Api, body: dict[str, Any], key: str | None = None) -> Any:
    headers = KEY if key is None else {**KEY, "Idempotency-Key": key}
    return await api.client.post("/enqueue-task", json=body, headers=headers)


async def refusal(api: Api, r: redis.Redis, body: dict[str, Any]) -> dict[str, Any]:
    """The one error of a refused submit, which wrote nothing."""
    with Untouched(r):
        response = await post(api, body)
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    return dict(error)


async def test_job_types_list_each_need_and_the_classes_that_serve_it(api: Api) -> None:
    response = await api.client.get("/job-types", headers=KEY)
    assert response.status_code == 200, response.text
    types = {t["name"]: t for t in response.json()}
    needs = {
        name: (t["gpu"], t["min_gpu_memory_gb"], t["gpu_classes"])
        for name, t in types.items()
        if name in (ANY, BIG_FIRST, MEMORY, SMALL_ONLY, ELSEWHERE)
    }
    assert needs == {
        ANY: (None, None, ["small", "big"]),  # no order: the cheapest first
        BIG_FIRST: (["big", "small"], None, ["big", "small"]),  # its own order
        MEMORY: (None, 40, ["big"]),
        SMALL_ONLY: (["small"], None, ["small"]),
        ELSEWHERE: (["a100"], None, []),  # no class of this catalog can serve it
    }


async def test_a_need_the_catalog_meets_is_accepted(api: Api) -> None:
    for body in (
        {"type": ANY},
        {"type": BIG_FIRST, "gpu": {"classes": ["small"]}},
        {"type": ANY, "gpu": {"min_memory_gb": 40}},
        {"type": MEMORY, "gpu": {"min_memory_gb": 1}},  # less than its type's: the type's holds
    ):
        response = await post(api, body)
        assert response.status_code == 200, (body, response.text)


@pytest.mark.parametrize(
    ("body", "loc", "kind"),
    [
        ({"type": ANY, "gpu": {"classes": ["huge"]}}, ["gpu", "classes"], "gpu_class_unknown"),
        ({"type": MEMORY, "gpu": {"classes": ["small"]}}, ["gpu"], "gpu_need_unmet"),
        ({"type": ANY, "gpu": {"min_memory_gb": 100}}, ["gpu"], "gpu_need_unmet"),
        ({"type": ELSEWHERE}, ["gpu"], "gpu_class_unknown"),
    ],
    ids=["unknown-class", "memory-of-type", "memory-of-body", "type-elsewhere"],
)
async def test_a_need_no_class_serves_is_a_422_naming_its_field(
    api: Api, r: redis.Redis, body: dict[str, Any], loc: list[str], kind: str
) -> None:
    error = await refusal(api, r, body)
    assert (error["loc"], error["type"]) == (["body", *loc], kind)
    assert "catalog has big (80 GB), small (16 GB)" in error["msg"]


async def test_a_submit_never_widens_its_type_s_classes(api: Api, r: redis.Redis) -> None:
    error = await refusal(api, r, {"type": SMALL_ONLY, "gpu": {"classes": ["small", "big"]}})
    assert (error["loc"], error["type"]) == (["body", "gpu", "classes"], "gpu_class_not_allowed")
    assert "never widens" in error["msg"] and "'big'" in error["msg"]
    served = await post(api, {"type": SMALL_ONLY, "gpu": {"classes": ["small"]}})
    assert served.status_code == 200, served.text


@pytest.mark.parametrize(
    "gpu",
    [{"classes": []}, {"classes": ["big", "big"]}, {"min_memory_gb": 0}, {"gpus": 2}, "big"],
    ids=repr,
)
async def test_a_malformed_need_is_a_422(api: Api, r: redis.Redis, gpu: object) -> None:
    error = await refusal(api, r, {"type": ANY, "gpu": gpu})
    assert error["loc"][:2] == ["body", "gpu"]


async def test_the_need_is_part_of_the_idempotency_fingerprint(api: Api) -> None:
    body = {"type": BIG_FIRST, "gpu": {"classes": ["big"]}}
    first = await post(api, body, key="gpu-1")
    again = await post(api, body, key="gpu-1")
    assert first.status_code == again.status_code == 200, first.text
    assert first.json()["task_id"] == again.json()["task_id"]
    other = await post(api, {**body, "gpu": {"classes": ["small"]}}, key="gpu-1")
    assert other.status_code == 422, other.text
    assert "Idempotency-Key" in other.json()["detail"]
    bare = await post(api, {"type": BIG_FIRST}, key="gpu-1")
    assert bare.status_code == 422, bare.text


async def test_a_burn_job_s_need_is_part_of_its_fingerprint_too(api: Api) -> None:
    plain = await post(api, {"kind": "short", "duration_s": 2}, key="gpu-burn")
    assert plain.status_code == 200, plain.text
    typed = {"type": "burn", "duration_s": 2, "gpu": {"classes": ["big"]}}
    needing = await post(api, typed, key="gpu-burn")
    assert needing.status_code == 422, needing.text


async def test_the_submission_carries_its_classes_in_order(api: Api) -> None:
    runtime = api.runtime

    async def classes(body: dict[str, Any]) -> tuple[str, ...]:
        request = TypedEnqueueRequest.model_validate(body)
        job = await checked_submission(request, runtime.job_types, runtime.settings)
        return job.gpu_classes

    assert await classes({"type": ANY}) == ("small", "big")
    assert await classes({"type": BIG_FIRST}) == ("big", "small")
    assert await classes({"type": BIG_FIRST, "gpu": {"classes": ["small", "big"]}}) == (
        "big",
        "small",
    )
    assert await classes({"type": ANY, "gpu": {"min_memory_gb": 20}}) == ("big",)
