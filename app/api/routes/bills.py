"""Billing records: what the caller's account has been charged."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app import billing
from app.api.deps import CallerDep, RuntimeDep
from app.api.responses import ERRORS
from app.api.routing import KeyedRoute
from app.models import BillingRecord

router = APIRouter(tags=["billing"], route_class=KeyedRoute)


@router.get("/billing-records", response_model=list[BillingRecord], responses=ERRORS)
async def billing_records(
    caller: CallerDep,
    runtime: RuntimeDep,
    limit: Annotated[int, Query(ge=1, le=1000, description="most records to return")] = 100,
) -> list[BillingRecord]:
    """The caller's billing records, newest first."""
    texts = await runtime.store.billing(caller.account.user_id, limit)
    return [billing.record(text) for text in texts]
