"""The admin API's calls of the client: accounts, keys, the audit log, the queues (admins only;
the API answers anyone else 404, which Transport._refused explains)."""

from __future__ import annotations

from pydantic import TypeAdapter

from app.admin_models import AccountInfo, AuditEntry, DropResult, IssuedKey, KeyInfo, QueuesView
from app.client.transport import Transport, segment
from app.models import TaskStatus

ACCOUNTS = TypeAdapter(list[AccountInfo])
KEYS = TypeAdapter(list[KeyInfo])
AUDIT = TypeAdapter(list[AuditEntry])


class AdminCalls(Transport):
    """GET/POST/PATCH/DELETE under /admin."""

    def accounts(self) -> list[AccountInfo]:
        """GET /admin/accounts (admins only)."""
        return self._list(ACCOUNTS, self._request("GET", "/admin/accounts", admin=True))

    def account_info(self, user_id: str) -> AccountInfo:
        """GET /admin/accounts/{id} (admins only)."""
        path = f"/admin/accounts/{segment(user_id)}"
        return self._parse(AccountInfo, self._request("GET", path, admin=True))

    def create_account(self, user_id: str, fields: dict[str, object]) -> AccountInfo:
        """POST /admin/accounts (admins only)."""
        body = {"user_id": user_id, **fields}
        return self._parse(
            AccountInfo, self._request("POST", "/admin/accounts", json=body, admin=True)
        )

    def update_account(self, user_id: str, changes: dict[str, object]) -> AccountInfo:
        """PATCH /admin/accounts/{id} (admins only): the fields given change; None clears a
        quota or a budget."""
        path = f"/admin/accounts/{segment(user_id)}"
        return self._parse(AccountInfo, self._request("PATCH", path, json=changes, admin=True))

    def keys(self, user_id: str) -> list[KeyInfo]:
        """GET /admin/accounts/{id}/keys (admins only)."""
        path = f"/admin/accounts/{segment(user_id)}/keys"
        return self._list(KEYS, self._request("GET", path, admin=True))

    def issue_key(self, user_id: str, label: str = "") -> IssuedKey:
        """POST /admin/accounts/{id}/keys (admins only): a new key, whose text is in this
        answer only."""
        path = f"/admin/accounts/{segment(user_id)}/keys"
        reply = self._request("POST", path, json={"label": label}, admin=True)
        return self._parse(IssuedKey, reply)

    def revoke_key(self, key_id: str) -> KeyInfo:
        """DELETE /admin/keys/{id} (admins only)."""
        path = f"/admin/keys/{segment(key_id)}"
        return self._parse(KeyInfo, self._request("DELETE", path, admin=True))

    def audit(self, limit: int = 100, before: int | None = None) -> list[AuditEntry]:
        """GET /admin/audit (admins only): changes of accounts and keys, newest first."""
        params: dict[str, str | int] = {"limit": limit}
        if before is not None:
            params["before"] = before
        return self._list(AUDIT, self._request("GET", "/admin/audit", params=params, admin=True))

    def queues(self) -> QueuesView:
        """GET /admin/queues (admins only)."""
        return self._parse(QueuesView, self._request("GET", "/admin/queues", admin=True))

    def promote(self, task_id: str) -> TaskStatus:
        """POST /admin/tasks/{id}/promote (admins only)."""
        path = f"/admin/tasks/{segment(task_id)}/promote"
        return self._parse(TaskStatus, self._request("POST", path, admin=True))

    def release(self, task_id: str) -> TaskStatus:
        """POST /admin/tasks/{id}/release (admins only)."""
        path = f"/admin/tasks/{segment(task_id)}/release"
        return self._parse(TaskStatus, self._request("POST", path, admin=True))

    def drop(self, queue: str) -> DropResult:
        """POST /admin/queues/{name}/drop (admins only): revoke every job queued in it."""
        path = f"/admin/queues/{segment(queue)}/drop"
        reply = self._request("POST", path, json={"confirm": queue}, admin=True)
        return self._parse(DropResult, reply)
