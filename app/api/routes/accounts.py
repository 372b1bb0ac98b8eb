"""Operators' endpoints for accounts, keys and the audit log, under /admin: onboard an account,
change its share, quotas and budgets, disable it, issue and revoke keys, read who changed what.

Every change is made in the SQL account store (app/ledger/accounts.py), which writes its audit
entry in the same transaction, then announced (app/ledger/live.py), so every API process
rereads its accounts at once: a revoked key stops working everywhere within a second. A share
change also re-tags the account's queued jobs in both fair queues, so that the new share holds
from that moment.
"""

from __future__ import annotations

import asyncio
import json
import logging
from decimal import Decimal
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, status

from app.admin_models import (
    USER_ID_PATTERN,
    AccountCreate,
    AccountInfo,
    AccountUpdate,
    AuditEntry,
    IssuedKey,
    KeyInfo,
    KeyRequest,
)
from app.api.deps import CallerDep, RuntimeDep
from app.api.routes.admin import RESPONSES
from app.api.routing import AdminRoute
from app.api.runtime import Runtime
from app.ledger.accounts import AccountError
from app.ledger.live import announce
from app.ledger.schema import AccountRow, KeyRow
from app.models import ErrorBody
from app.pricing import MICROS

log = logging.getLogger(__name__)
router = APIRouter(prefix="/admin", tags=["admin"], route_class=AdminRoute)
UserId = Annotated[str, Path(pattern=USER_ID_PATTERN, description="the account's id")]
KEY_ID_DIGITS = 12
NO_ACCOUNT = "no such account"
#: The fields that the fair queues enforce at each lease (app/wiring/limits.py).
LIMIT_FIELDS = frozenset({"max_running", "max_held_gpu_seconds"})
CONFLICT: dict[int | str, dict[str, Any]] = {
    409: {"model": ErrorBody, "description": "the account exists already"}
}
INVALID: dict[int | str, dict[str, Any]] = {
    422: {"model": ErrorBody, "description": "an id, body or query outside its schema"}
}


def info(row: AccountRow, live_keys: int) -> AccountInfo:
    """An account row as admins see it."""
    cost = row.budget_cost_micros
    return AccountInfo(
        user_id=row.user_id,
        description=row.description,
        share=row.share,
        admin=row.admin,
        disabled=row.disabled,
        max_queued=row.max_queued,
        max_running=row.max_running,
        max_held_gpu_seconds=row.max_held_gpu_seconds,
        budget_gpu_seconds=row.budget_gpu_seconds,
        budget_cost=None if cost is None else cost / MICROS,
        created_at=row.created_at,
        keys=live_keys,
    )


def key_info(row: KeyRow) -> KeyInfo:
    """A key as it is kept: its id is the start of its digest."""
    return KeyInfo(
        id=row.digest[:KEY_ID_DIGITS],
        user_id=row.user_id,
        label=row.label,
        created_at=row.created_at,
        revoked_at=row.revoked_at,
    )


def stored(fields: dict[str, Any]) -> dict[str, Any]:
    """An account's fields as the account store keeps them: a cost in micro-units."""
    if "budget_cost" in fields:
        cost = fields.pop("budget_cost")
        micros = None if cost is None else Decimal(repr(cost)).scaleb(6).to_integral_value()
        fields["budget_cost_micros"] = None if micros is None else int(micros)
    return fields


async def _changed(runtime: Runtime, user_id: str) -> None:
    """Tell every API process to reread the accounts, and reread them here at once."""
    await announce(runtime.redis, user_id)
    await runtime.accounts.reload()


async def _info(runtime: Runtime, user_id: str) -> AccountInfo:
    store = runtime.ledger.accounts
    row = await asyncio.to_thread(store.get, user_id)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=NO_ACCOUNT)
    keys = await asyncio.to_thread(store.keys, user_id)
    return info(row, sum(1 for k in keys if k.revoked_at is None))


@router.get("/accounts", response_model=list[AccountInfo], responses=RESPONSES)
async def list_accounts(admin: CallerDep, runtime: RuntimeDep) -> list[AccountInfo]:
    """Every account, disabled ones too, by id."""
    store = runtime.ledger.accounts
    rows, counts = await asyncio.gather(
        asyncio.to_thread(store.all), asyncio.to_thread(store.live_key_counts)
    )
    return [info(row, counts.get(row.user_id, 0)) for row in rows]


@router.post(
    "/accounts",
    response_model=AccountInfo,
    status_code=status.HTTP_201_CREATED,
    responses={**RESPONSES, **CONFLICT, **INVALID},
)
async def create_account(body: AccountCreate, admin: CallerDep, runtime: RuntimeDep) -> AccountInfo:
    """Open an account (without keys: issue one next)."""
    fields = stored(body.model_dump(exclude={"user_id"}))  # the defaults too
    try:
        await asyncio.to_thread(
            runtime.ledger.accounts.create, admin.account.user_id, body.user_id, **fields
        )
    except AccountError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, detail=str(exc)) from None
    log.info("admin created an account", extra=_who(admin.account.user_id, body.user_id))
    await _changed(runtime, body.user_id)
    await _limit(runtime, body.user_id)
    return await _info(runtime, body.user_id)


@router.get("/accounts/{user_id}", response_model=AccountInfo, responses={**RESPONSES, **INVALID})
async def get_account(user_id: UserId, admin: CallerDep, runtime: RuntimeDep) -> AccountInfo:
    """One account."""
    return await _info(runtime, user_id)


@router.patch("/accounts/{user_id}", response_model=AccountInfo, responses={**RESPONSES, **INVALID})
async def update_account(
    user_id: UserId, body: AccountUpdate, admin: CallerDep, runtime: RuntimeDep
) -> AccountInfo:
    """Change an account: its description, share, admin flag, quota, budgets, or disable it
    (its keys stop working; its queued jobs stay queued). A new share re-tags its queued jobs
    at once. Fields left out are kept; null clears a quota or a budget."""
    changes = stored(body.model_dump(include=body.model_fields_set))
    if not changes:
        return await _info(runtime, user_id)
    try:
        await asyncio.to_thread(
            runtime.ledger.accounts.update, admin.account.user_id, user_id, **changes
        )
    except AccountError:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=NO_ACCOUNT) from None
    await _changed(runtime, user_id)
    if changes.keys() & LIMIT_FIELDS:
        await _limit(runtime, user_id)
    if "share" in changes:
        await _reshare(runtime, user_id, float(changes["share"]))
    log.info("admin changed an account", extra={**_who(admin.account.user_id, user_id),
                                                "fields": sorted(changes)})  # fmt: skip
    return await _info(runtime, user_id)


async def _limit(runtime: Runtime, user_id: str) -> None:
    """Put the account's limits on both queues: they hold for every lease after the answer."""
    account = runtime.accounts.get(user_id)
    if account is not None:
        await runtime.apply_limits(account)


async def _reshare(runtime: Runtime, user_id: str, share: float) -> None:
    """Re-tag the account's queued jobs in both queues with its new share."""
    for queue in runtime.queues.values():
        await queue.reshare(user_id, share)


@router.get(
    "/accounts/{user_id}/keys", response_model=list[KeyInfo], responses={**RESPONSES, **INVALID}
)
async def list_keys(user_id: UserId, admin: CallerDep, runtime: RuntimeDep) -> list[KeyInfo]:
    """An account's keys, revoked ones too, oldest first (their ids, never their text)."""
    await _info(runtime, user_id)  # 404 for an unknown account
    rows = await asyncio.to_thread(runtime.ledger.accounts.keys, user_id)
    return [key_info(row) for row in rows]


@router.post(
    "/accounts/{user_id}/keys",
    response_model=IssuedKey,
    status_code=status.HTTP_201_CREATED,
    responses={**RESPONSES, **INVALID},
)
async def issue_key(
    user_id: UserId, admin: CallerDep, runtime: RuntimeDep, body: KeyRequest | None = None
) -> IssuedKey:
    """Issue a key for the account. The answer holds the key's text, which is kept nowhere:
    store it now."""
    label = "" if body is None else body.label
    try:
        issued = await asyncio.to_thread(
            runtime.ledger.accounts.issue_key, admin.account.user_id, user_id, label
        )
    except AccountError:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=NO_ACCOUNT) from None
    await _changed(runtime, user_id)
    log.info("admin issued a key", extra=_who(admin.account.user_id, user_id))
    rows = await asyncio.to_thread(runtime.ledger.accounts.keys, user_id)
    row = next(r for r in rows if r.digest == issued.digest)
    return IssuedKey(**key_info(row).model_dump(), key=issued.key)


@router.delete(
    "/keys/{key_id}",
    response_model=KeyInfo,
    responses={
        **RESPONSES,
        **INVALID,
        404: {"model": ErrorBody, "description": "not an admin key, or no key (or several)"},
    },
)
async def revoke_key(
    key_id: Annotated[
        str, Path(pattern=r"^[0-9a-fA-F]{8,64}$", description="a key's id, 8 hex digits or more")
    ],
    admin: CallerDep,
    runtime: RuntimeDep,
) -> KeyInfo:
    """Revoke a key: it stops working in every API process within a second. Revoking a
    revoked key changes nothing."""
    try:
        row = await asyncio.to_thread(
            runtime.ledger.accounts.revoke_key, admin.account.user_id, key_id
        )
    except AccountError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=str(exc)) from None
    await _changed(runtime, row.user_id)
    log.warning("admin revoked a key", extra=_who(admin.account.user_id, row.user_id))
    return key_info(row)


@router.get("/audit", response_model=list[AuditEntry], responses={**RESPONSES, **INVALID})
async def audit(
    admin: CallerDep,
    runtime: RuntimeDep,
    limit: Annotated[int, Query(ge=1, le=1000, description="most entries")] = 100,
    before: Annotated[
        int | None,
        Query(ge=1, le=2**62, description="entries older than this id (the last one seen)"),
    ] = None,
) -> list[AuditEntry]:
    """Changes of accounts and keys, newest first: who, what, when."""
    rows = await asyncio.to_thread(runtime.ledger.accounts.audit, limit, before)
    return [
        AuditEntry(
            id=r.id,
            at=r.at,
            actor=r.actor,
            action=r.action,
            target=r.target,
            detail=json.loads(r.detail),
        )
        for r in rows
    ]


def _who(admin: str, user_id: str) -> dict[str, str]:
    return {"account": admin, "target": user_id}
