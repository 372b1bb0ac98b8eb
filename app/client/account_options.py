"""The options of `fairgpu admin accounts create` and `update`: one for each term of an account
(app/account.py Terms), made from its field, so that a new term is an option with no code here.

A term that may be null (a quota, a limit, a budget) takes a number or the word `none`, which
clears it (the option goes to the server as null, and the default applies); a yes-or-no term is
a pair of flags (`--admin/--no-admin`); any other takes its value. Each option's help is its
field's description. A term left out is not sent: the server keeps it (or, for a new account,
gives its default).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from types import NoneType
from typing import Annotated, Any, get_args

import typer
from pydantic.fields import FieldInfo

from app.account import TERMS, Terms
from app.client.admin_tables import NONE  # the word that clears a term, as tables show none
from app.client.errors import fail


def _nullable(field: FieldInfo) -> bool:
    return NoneType in get_args(field.annotation)


def _option(name: str, field: FieldInfo) -> inspect.Parameter:
    """A term's option: its help is its field's description, "null" said as `none`."""
    help_text = (field.description or "").replace("null:", f"{NONE}:")
    if field.annotation is bool:
        flag = name.replace("_", "-")
        option: object = Annotated[
            bool | None, typer.Option(f"--{flag}/--no-{flag}", help=help_text)
        ]
    else:  # read as text, then as the term's type (_value)
        option = Annotated[str | None, typer.Option(help=help_text)]
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=option)


def _value(name: str, given: object, field: FieldInfo) -> object:
    """A term's option as the API takes it: a number of the term's type (or None for `none`,
    where it may be null), the text itself, or the flag."""
    kinds = set(get_args(field.annotation)) or {field.annotation}
    if not isinstance(given, str) or str in kinds:
        return given
    if _nullable(field) and given.lower() == NONE:
        return None
    try:
        return int(given) if int in kinds else float(given)
    except ValueError:
        either = f", or {NONE}" if _nullable(field) else ""
        fail(f"--{name.replace('_', '-')}: a number{either}", 2)


def changes(given: Mapping[str, object]) -> dict[str, object]:
    """The terms given on the command line (None: not given), as the API takes them."""
    fields = Terms.model_fields
    return {
        name: _value(name, value, fields[name])
        for name, value in given.items()
        if value is not None
    }


def with_terms(command: Callable[..., None]) -> Callable[..., None]:
    """The command with an option per term after its first parameter (the account's id); the
    terms given reach it as `terms`, as the API takes them (changes())."""
    own = inspect.signature(command, eval_str=True).parameters
    first, *rest = (p for p in own.values() if p.name != "terms")
    added = [_option(name, field) for name, field in Terms.model_fields.items()]

    @functools.wraps(command)
    def run(**given: Any) -> None:
        command(terms=changes({name: given.pop(name) for name in TERMS}), **given)

    # typer reads a command's options off its signature: this one's is the command's own, the
    # terms' options after its first parameter.
    keyword = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in rest]
    parameters = [first, *added, *keyword]
    setattr(run, "__signature__", inspect.Signature(parameters))  # noqa: B010
    run.__annotations__ = {p.name: p.annotation for p in parameters}
    return run
