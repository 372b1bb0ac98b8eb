"""GET /job-types: every registered type with its JSON Schemas, and whether it can run here; a
job-type module that cannot be loaded stops the API at start."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from app.jobs import RegistryError
from app.jobs.builtin.burn import BurnIn, BurnOut
from app.settings import Settings
from tests.api.conftest import Api, open_api
from tests.api.helpers import KEY, SECOND_KEY, UNAUTHORIZED, Untouched
from tests.api.typed_jobs import (
    ECHO,
    ECHO_MAX_S,
    MISSING,
    EchoIn,
    EchoOut,
    with_these_types,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def module_settings(module_settings: Settings) -> Settings:
    """typed_jobs's types, and the workers' test types (tests/jobs/sample.py: preemptible ones)."""
    typed = with_these_types(module_settings)
    return typed.model_copy(update={"job_modules": [*typed.job_modules, "tests.jobs.sample"]})


@pytest.fixture
def api(shared_api: Api) -> Api:
    """One runtime for the module's tests (tests/api/conftest.py), with typed_jobs's job types: the
    types are listed from the runtime's registry, which no test changes."""
    return shared_api


async def listed(api: Api, key: dict[str, str] = KEY) -> dict[str, dict[str, Any]]:
    response = await api.client.get("/job-types", headers=key)
    assert response.status_code == 200, response.text
    types: list[dict[str, Any]] = response.json()
    names = [t["name"] for t in types]
    assert names == sorted(names)
    return {t["name"]: t for t in types}


async def test_a_type_is_listed_with_its_queue_budget_and_schemas(api: Api) -> None:
    echo = (await listed(api))[ECHO]

    assert echo == {
        "name": ECHO,
        "queue": "long",
        "max_duration_s": ECHO_MAX_S,
        "max_duration_s_by_queue": {"short": ECHO_MAX_S, "long": ECHO_MAX_S},
        "description": "Says its text back.",
        "input_schema": EchoIn.model_json_schema(),
        "output_schema": EchoOut.model_json_schema(),
        "available": True,
        "unavailable_reason": None,
        "preemptible": False,
        "gpu": None,
        "min_gpu_memory_gb": None,
        "gpu_classes": None,
        "min_gpus": 1,
        "max_gpus": 1,
    }
    # the nested model travels with the schema, so a client can check an input itself
    assert "Point" in echo["input_schema"]["$defs"]


async def test_the_built_in_types_are_listed_and_available(api: Api) -> None:
    types = await listed(api)

    assert types["burn"]["input_schema"] == BurnIn.model_json_schema()
    assert types["burn"]["output_schema"] == BurnOut.model_json_schema()
    # burn may last 3000 s, but a short job no more than MAX_SHORT_S: the limits are a submit's.
    assert (types["burn"]["queue"], types["burn"]["max_duration_s"]) == ("short", 60)
    assert types["burn"]["max_duration_s_by_queue"] == {"short": 60, "long": 3000}
    assert types["vad"]["available"] is True
    assert types["vad"]["unavailable_reason"] is None


async def test_a_preemptible_type_says_so(api: Api) -> None:
    types = await listed(api)

    assert types["checkpointed"]["preemptible"] is True
    assert types["echo"]["preemptible"] is False


async def test_a_type_whose_dependency_is_missing_is_unavailable_and_says_why(api: Api) -> None:
    missing = (await listed(api))[MISSING]

    assert missing["available"] is False
    assert "fairgpu_no_such_package" in missing["unavailable_reason"]


async def test_any_key_lists_them_and_none_is_401(api: Api, r: redis.Redis) -> None:
    assert await listed(api, SECOND_KEY) == await listed(api, KEY)

    with Untouched(r):
        response = await api.client.get("/job-types")
    assert response.status_code == 401
    assert response.json() == UNAUTHORIZED


async def test_a_job_module_that_cannot_be_imported_stops_the_api_at_start(
    settings: Settings,
) -> None:
    broken = settings.model_copy(update={"job_modules": ["tests.api.no_such_job_module"]})

    with pytest.raises(RegistryError, match="no_such_job_module"):
        async with open_api(broken, wait_for_hub=False):
            pass
