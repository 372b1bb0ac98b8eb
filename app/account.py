"""Account: who pays, and what it may do, once. Its terms (what an admin sets on it) are declared
here, each with its bounds and its description, in three groups, and every shape an account
takes is made of them:

    Account             the record the API holds an account to (app.auth authenticates it): its
                        id and keys, and its terms
    columns_of()        the terms as the account store's columns (app/ledger/schema.py makes a
                        column of each, its type from the field's); terms_of() back
    AccountFields       what admins send: the terms, strictly (app/admin_models.py, with
    AccountInfo         AccountCreate and AccountUpdate) and what they get back
    AccountView         what GET /account shows its caller: its Profile and its Limits
                        (app/models.py), its quota resolved
    CLI options         `fairgpu admin accounts create|update` take an option per term
                        (app/client/account_options.py)

So a new term is a field of Profile, Limits or Budgets here, and a migration that adds its
column; tests/test_account.py checks every shape has it. What it does is the code that enforces
it: a limit of the queues' in app/wiring/limits.py (QUEUE_LIMITS), one checked at submit in
app/api/routes/jobs.py. This module imports pydantic alone: the client loads it.

Money is set and shown in units of money, and kept in whole micro-units, exactly (MONEY).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: Micro-units in one unit of money (as app/bill.py counts them; imported from neither side, so
#: that the client does not load the bills' SQL).
MICROS = 1_000_000
#: Terms in money: each is kept in its column `<name>_micros`, as whole micro-units.
MONEY = frozenset({"budget_cost"})


class Named(BaseModel):
    """An account's id, first in each of its shapes: it names the account in bills, logs and
    URLs."""

    user_id: str


class Profile(BaseModel):
    """Who the account is and how much of the GPUs it gets."""

    description: str = Field("", max_length=500, description="what the account is for")
    share: float = Field(
        1.0, ge=0.001, le=1000, allow_inf_nan=False, description="its weight in the fair queues"
    )
    admin: bool = Field(False, description="may use the admin API")
    run_scripts: bool = Field(
        False, description="may upload its own code and run it as script jobs (docs/scripts.md)"
    )


class Limits(BaseModel):
    """What the account's jobs are held to, queued and running; null: the default, or none."""

    max_queued: int | None = Field(
        None, ge=1, description="most jobs queued in each queue; null: MAX_QUEUED_PER_ACCOUNT"
    )
    max_running: int | None = Field(
        None, ge=1, description="most of its jobs running at once, both queues; null: no limit"
    )
    max_held_gpu_seconds: float | None = Field(
        None,
        gt=0,
        le=1e12,
        allow_inf_nan=False,
        description="most GPU-seconds its running jobs may still have ahead, the next job's "
        "included; null: no limit",
    )


class Budgets(BaseModel):
    """What the account may be billed in a calendar month (app/api/budgets.py)."""

    budget_gpu_seconds: float | None = Field(
        None,
        ge=0,
        le=1e12,
        allow_inf_nan=False,
        description="GPU-seconds billed a month; null: none",
    )
    budget_cost: float | None = Field(
        None,
        ge=0,
        le=1e9,
        allow_inf_nan=False,
        description="cost a month, kept to the micro-unit (rounded); null: none",
    )


class Terms(Budgets, Limits, Profile):  # fields in this order: Profile's, Limits', Budgets'
    """Every term of an account: what an admin sets, the store keeps and the API enforces."""


#: The names of the terms, in order: what an account's update may change.
TERMS = tuple(Terms.model_fields)


class Account(Terms, Named):
    """One account as the API knows it: its id, its keys' digests (or plain keys, in a file)
    and its terms."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    user_id: str = Field(min_length=1)  # in Named's place, first
    api_keys: tuple[str, ...] = ()  # none: the account exists, nobody can act as it

    @model_validator(mode="before")
    @classmethod
    def _budget_in_micros(cls, data: Any) -> Any:
        # An accounts file may give the cost budget in micro-units, as the store keeps it.
        if isinstance(data, Mapping) and "budget_cost_micros" in data:
            data = dict(data)
            micros = data.pop("budget_cost_micros")
            data["budget_cost"] = None if micros is None else micros / MICROS
        return data

    @property
    def budget_cost_micros(self) -> int | None:
        """The cost budget in micro-units, exactly."""
        return micros(self.budget_cost)

    @property
    def budgeted(self) -> bool:
        """Whether the account has a monthly budget of either kind."""
        return self.budget_gpu_seconds is not None or self.budget_cost is not None


def micros(money: float | None) -> int | None:
    """An amount of money in whole micro-units: the decimal it was written as, rounded."""
    if money is None:
        return None
    return int(Decimal(repr(money)).scaleb(6).to_integral_value())


def column(name: str) -> str:
    """The store's column of a term."""
    return f"{name}_micros" if name in MONEY else name


def columns_of(terms: Mapping[str, Any]) -> dict[str, Any]:
    """Terms (all or some) as the store's columns: money in micro-units."""
    return {
        column(name): micros(value) if name in MONEY else value for name, value in terms.items()
    }


def terms_of(columns: Mapping[str, Any]) -> Terms:
    """An account's terms from its columns (others, as its id, are left)."""
    values = {name: columns[column(name)] for name in TERMS}
    for name in MONEY:
        kept = values[name]
        values[name] = None if kept is None else kept / MICROS
    return Terms.model_validate(values)
