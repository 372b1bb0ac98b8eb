"""Accounts: the caller's own (GET /account, router `own`), and the operators' endpoints for
accounts, keys and the audit log, under /admin (router `router`): onboard an account, change its
share, quotas and budgets, disable it, issue and revoke keys, read who changed what. An account's
shapes are made in app/account.py.

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
from app.api.budgets import month_use
from app.api.deps import CallerDep, RuntimeDep
from app.api.responses import ERRORS
from app.api.routes.admin import RESPONSES
from app.api.routing import AdminRoute, KeyedRoute
from app.api.runtime import Runtime
from app.ledger.accounts import AccountError
from app.ledger.live import announce
from app.ledger.schema import AccountRow, KeyRow
from app.models import ErrorBody
from app.usage_models import AccountView
from app.wiring.limits import QUEUE_LIMITS

log = logging.getLogger(__name__)
own = APIRouter(tags=["jobs"], route_class=KeyedRoute)
#: What GET /account shows of the account as it is: the rest (its quota, resolved; its month)
#: is worked out.
VIEWED = set(AccountView.model_fields) - {"max_queued", "month"}
router = APIRouter(prefix="/admin", tags=["admin"], route_class=AdminRoute)
UserId = Annotated[str, Path(pattern=USER_ID_PATTERN, description="the account's id")]
KEY_ID_DIGITS = 12
NO_ACCOUNT = "no such account"
CONFLICT: dict[int | str, dict[str, Any]] = {
    409: {"model": ErrorBody, "description": "the account exists already"}
}
INVALID: dict[int | str, dict[str, Any]] = {
    422: {"model": ErrorBody, "description": "an id, body or query outside its schema"}
}


def info(row: AccountRow, live_keys: int) -> AccountInfo:
    """An account row as admins see it."""
    return AccountInfo(
        user_id=row.user_id,
        **row.terms().model_dump(),
        disabled=row.disabled,
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


@own.get("/account", response_model=AccountView, responses=ERRORS)
async def account(caller: CallerDep, runtime: RuntimeDep) -> AccountView:
    """Whose key this is: the account, its fair share, whether it may use /admin, its quota and
    limits, and this month's use against its budgets."""
    a = caller.account
    return AccountView(
        **a.model_dump(include=VIEWED),
        max_queued=a.max_queued or runtime.settings.max_queued_per_account,
        month=await month_use(runtime, a),
    )


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
    fields = body.model_dump(exclude={"user_id"})  # the defaults too
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
    changes = body.model_dump(include=body.model_fields_set)
    if not changes:
        return await _info(runtime, user_id)
    try:
        await asyncio.to_thread(
            runtime.ledger.accounts.update, admin.account.user_id, user_id, **changes
        )
    except AccountError:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=NO_ACCOUNT) from None
    await _changed(runtime, user_id)
    if changes.keys() & QUEUE_LIMITS:
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
