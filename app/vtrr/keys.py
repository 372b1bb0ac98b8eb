"""Names of one queue's Redis keys: `vtrr:{name}:<part>`, the name being a Cluster hash tag."""

from __future__ import annotations

from dataclasses import astuple, dataclass

from app.vtrr.layout import KIND_CLOCK, KIND_POOLS, KIND_TRIGGERS
from app.vtrr.pool import check_kind
from app.vtrr.slots import check_name


@dataclass(frozen=True)
class Keys:
    """Every key of one queue, in the order of lua/lib/keys.lua's names for them. `item`, `park`
    and `live` are prefixes (of each item's hash, and of each limited partition's parked items
    and items in flight), not keys themselves."""

    queue: str
    item: str
    inflight: str
    current_virtual_time: str
    partition_virtual_time: str
    partition_queued: str
    idle_partitions: str
    seq: str
    triggers: str
    stats: str
    wake: str
    queued_weight: str
    partition_items: str
    limits: str
    parked: str
    representatives: str
    waits: str
    park: str
    live: str
    freed: str
    usage: str
    usage_at: str
    pool: str
    pools: str
    kinds: str
    kind: str
    kpools: str
    kclock: str
    card: str
    resv: str
    fleet: str

    @classmethod
    def for_queue(
        cls,
        name: str,
        limits_group: str | None = None,
        kind: str | None = None,
        slot: tuple[str, str] | None = None,
    ) -> Keys:
        """The keys of the queue called name; braces would break the hash tag and are refused.
        Queues of one limits_group count their partitions' items in flight, and remember their
        usage, together: `live`, `freed`, `usage` and `usage_at` are the group's (and so,
        unlike the rest, not in the queue's slot).

        A consumer of a kind (pool.py) sees the queue through its kind's own keys: `kpools` (the
        pools it may take from), `kclock` (its clock) and `triggers` (its triggers). Without a
        kind, `kclock` is the queue's clock itself, which tells the Lua that the consumer has
        none, and `kpools` a set that is never written.

        The fleet's cards (lua/lib/cards.lua) are the limits group's (else the queue's): `fleet`
        is their prefix; a slotted consumer (slot: its host and card) sees its own card and its
        host's reservation as `card` and `resv`, one without a slot keys never written."""
        for word in (name, limits_group or "-"):
            if not word or "{" in word or "}" in word:
                raise ValueError(f"queue name must be non-empty and free of braces, got {word!r}")
        parts = {part: f"vtrr:{{{name}}}:{part}" for part in cls.__dataclass_fields__}
        if limits_group is not None:
            for part in ("live", "freed", "usage", "usage_at"):
                parts[part] = f"vtrr:limits:{{{limits_group}}}:{part}"
        for prefix in ("item", "park", "live", "pool", "kind"):
            parts[prefix] += ":"
        parts["kclock"] = parts["current_virtual_time"]
        parts["kpools"] = parts["kind"] + KIND_POOLS
        if kind is not None:
            own = parts["kind"] + check_kind(kind)
            parts["kclock"], parts["kpools"] = own + KIND_CLOCK, own + KIND_POOLS
            parts["triggers"] = own + KIND_TRIGGERS
        parts["fleet"] = f"vtrr:fleet:{{{limits_group or name}}}:"
        parts["card"], parts["resv"] = parts["fleet"] + "card:", parts["fleet"] + "resv:"
        if slot is not None:
            host, card = (check_name(word) for word in slot)
            parts["card"] += f"{host}:{card}"
            parts["resv"] += host
        return cls(**parts)

    def pool_line(self, pool: str) -> str:
        """The line (a ZSET like `queue`) of the items of one pool (pool.py's pool_name)."""
        return self.pool + pool

    def kind_triggers(self, kind: str) -> str:
        """The triggers count of the consumers of one kind (their view's `triggers`)."""
        return self.kind + check_kind(kind) + KIND_TRIGGERS

    def all(self) -> list[str]:
        """All keys (the item prefix among them), in script order."""
        return list(astuple(self))

    def item_key(self, task_id: str) -> str:
        """The key of one item's hash: its partition, cost, weight, payload, lease, ..."""
        return f"{self.item}{task_id}"
