"""The operators' account commands, under `fairgpu admin` (admin accounts only): `accounts`
(list, show, create, update, disable, enable), `keys` (list, issue, revoke) and `audit`; and
`usage` from app/client/usage.py (every account's; `fairgpu usage` is anyone's own).

Their options are an account's terms (app/client/account_options.py): a quota, a limit or a
budget is cleared with the word `none` (`--budget-cost none`): the option then goes to the
server as null, and the default applies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer

from app.admin_models import AccountInfo
from app.client.account_options import with_terms
from app.client.admin_tables import (
    accounts_table,
    audit_table,
    budget_text,
    keys_table,
    limit_text,
    other_limits,
)
from app.client.errors import OneLineUsage, fail, session
from app.client.options import JsonOption, KeyOption, UrlOption
from app.client.render import fields_table, out
from app.client.transport import DEFAULT_URL
from app.client.usage import admin_usage

accounts = typer.Typer(help="Open, change, disable and list accounts (admins).")
keys = typer.Typer(help="Issue, revoke and list API keys (admins).")

UserId = Annotated[str, typer.Argument(help="the account's id")]


def _show(info: AccountInfo, as_json: bool) -> None:
    if as_json:
        typer.echo(info.model_dump_json())
        return
    table = fields_table()
    table.add_row("account", info.user_id)
    table.add_row("description", info.description)
    table.add_row("share", f"{info.share:g}")
    table.add_row("admin", "yes" if info.admin else "no")
    table.add_row("disabled", "yes" if info.disabled else "no")
    table.add_row("max queued", "default" if info.max_queued is None else str(info.max_queued))
    table.add_row("max running", limit_text(info.max_running))
    table.add_row("max held GPU-s", limit_text(info.max_held_gpu_seconds))
    for name, value in other_limits(info):
        table.add_row(name, limit_text(value))
    table.add_row("budget", budget_text(info))
    table.add_row("live keys", str(info.keys))
    out().print(table)


def list_accounts(
    url: UrlOption = DEFAULT_URL, key: KeyOption = None, as_json: JsonOption = False
) -> None:
    """Every account, disabled ones too."""
    with session(url, key) as client:
        found = client.accounts()
    if as_json:
        typer.echo("[" + ",".join(a.model_dump_json() for a in found) + "]")
        return
    console = out()
    console.print(accounts_table(found, console.width))


def show_account(
    user_id: UserId,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """One account."""
    with session(url, key) as client:
        _show(client.account_info(user_id), as_json)


@with_terms
def create_account(
    user_id: UserId,
    terms: dict[str, object],
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Open an account (then issue it a key: fairgpu admin keys issue ID)."""
    with session(url, key) as client:
        _show(client.create_account(user_id, terms), as_json)


@with_terms
def update_account(
    user_id: UserId,
    terms: dict[str, object],
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Change an account: what is given changes (a new share moves its queued jobs at once);
    none clears a quota, a limit or a budget."""
    if not terms:
        fail("nothing to change: give at least one option", 2)
    with session(url, key) as client:
        _show(client.update_account(user_id, terms), as_json)


def disable_account(
    user_id: UserId,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Disable an account: its keys stop working at once (its queued jobs still run)."""
    _set_disabled(user_id, True, url, key, as_json)


def enable_account(
    user_id: UserId,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Enable a disabled account again."""
    _set_disabled(user_id, False, url, key, as_json)


def _set_disabled(user_id: str, disabled: bool, url: str, key: str | None, as_json: bool) -> None:
    with session(url, key) as client:
        _show(client.update_account(user_id, {"disabled": disabled}), as_json)


def list_keys(
    user_id: UserId,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """An account's keys, revoked ones too (their ids: a key's text is never kept)."""
    with session(url, key) as client:
        found = client.keys(user_id)
    if as_json:
        typer.echo("[" + ",".join(k.model_dump_json() for k in found) + "]")
        return
    console = out()
    console.print(keys_table(found, console.width))


def issue_key(
    user_id: UserId,
    label: Annotated[str, typer.Option(help="what the key is for")] = "",
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Issue a key for an account. It is printed once: only its digest is kept."""
    with session(url, key) as client:
        issued = client.issue_key(user_id, label)
    if as_json:
        typer.echo(issued.model_dump_json())
        return
    typer.echo(issued.key)
    typer.echo(
        f"A key for {issued.user_id} (id {issued.id}). It is shown this once and kept nowhere: "
        "store it now.",
        err=True,
    )


def revoke_key(
    key_id: Annotated[str, typer.Argument(help="the key's id (8 hex digits or more)")],
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Revoke a key: every API process refuses it within a second."""
    with session(url, key) as client:
        revoked = client.revoke_key(key_id)
    if as_json:
        typer.echo(revoked.model_dump_json())
    else:
        out().print(f"Revoked key {revoked.id} of {revoked.user_id}.")


def audit(
    limit: Annotated[int, typer.Option(min=1, max=1000, help="most entries")] = 50,
    before: Annotated[int | None, typer.Option(help="entries older than this id")] = None,
    url: UrlOption = DEFAULT_URL,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Changes of accounts and keys, newest first: who, what, when."""
    with session(url, key) as client:
        found = client.audit(limit, before)
    if as_json:
        typer.echo("[" + ",".join(e.model_dump_json() for e in found) + "]")
        return
    console = out()
    console.print(audit_table(found, console.width))


def register(admin: typer.Typer) -> None:
    """Add the groups and commands of this module to `fairgpu admin`."""
    account_commands: list[tuple[str, Callable[..., None]]] = [
        ("list", list_accounts),
        ("show", show_account),
        ("create", create_account),
        ("update", update_account),
        ("disable", disable_account),
        ("enable", enable_account),
    ]
    for name, command in account_commands:
        accounts.command(name, cls=OneLineUsage)(command)
    key_commands: list[tuple[str, Callable[..., None]]] = [
        ("list", list_keys),
        ("issue", issue_key),
        ("revoke", revoke_key),
    ]
    for name, command in key_commands:
        keys.command(name, cls=OneLineUsage)(command)
    admin.add_typer(accounts, name="accounts")
    admin.add_typer(keys, name="keys")
    admin.command("audit", cls=OneLineUsage)(audit)
    admin.command("usage", cls=OneLineUsage)(admin_usage)
