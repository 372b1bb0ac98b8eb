"""The tables. Times are Unix seconds (Redis's clock, as the job records keep them). The bills'
table is declared with the bill itself (app/bill.py table), so that a bill's fields are named in
one module; the accounts' has a column for each term of an account (app/account.py Terms)."""

from __future__ import annotations

from types import NoneType
from typing import Any, get_args

from pydantic.fields import FieldInfo
from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Integer,
    String,
    Table,
    Text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeEngine

from app.account import MONEY, TERMS, Terms, column, terms_of
from app.bill import table


class Base(DeclarativeBase):
    """The metadata of every table (Alembic's target)."""


#: One row per bill, its job id the key (app/bill.py Bill.row, Bill.from_row).
BILLS = table(Base.metadata)


#: The SQL type of a term of each Python type.
SQL_TYPES: dict[Any, type[TypeEngine[Any]]] = {str: Text, float: Float, bool: Boolean, int: Integer}


def _column(name: str, field: FieldInfo) -> Column[Any]:
    """A term's column: its type from the field's (money in whole micro-units), null where the
    term may be (none: its default applies), its default where it has one."""
    kind = next(t for t in get_args(field.annotation) or (field.annotation,) if t is not NoneType)
    optional = kind is not field.annotation
    sql = BigInteger if name in MONEY else SQL_TYPES[kind]
    default = None if optional else field.default
    return Column(column(name), sql, nullable=optional, default=default)


#: One row per account: its id, a column per term (app/account.py), whether it is disabled.
ACCOUNTS = Table(
    "accounts",
    Base.metadata,
    Column("user_id", String(128), primary_key=True),
    *(_column(name, field) for name, field in Terms.model_fields.items()),
    Column("disabled", Boolean, nullable=False, default=False),
    Column("created_at", Float, nullable=False),
)


class AccountRow(Base):
    """An account: who pays, its terms (a column each: terms()), whether it is disabled."""

    __table__ = ACCOUNTS

    user_id: Mapped[str]
    disabled: Mapped[bool]
    created_at: Mapped[float]

    def terms(self) -> Terms:
        """The account's terms, from their columns."""
        return terms_of({column(name): getattr(self, column(name)) for name in TERMS})


class KeyRow(Base):
    """An API key, by the SHA-256 digest of its text (the text itself is never stored)."""

    __tablename__ = "api_keys"

    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("accounts.user_id"))
    label: Mapped[str] = mapped_column(String(128), default="")
    created_at: Mapped[float] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class AuditRow(Base):
    """One change of an account or a key: who made it, what, when."""

    __tablename__ = "audit"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[float] = mapped_column(Float)
    actor: Mapped[str] = mapped_column(String(128))
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(128))
    detail: Mapped[str] = mapped_column(Text, default="{}")
