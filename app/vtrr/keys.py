"""Names of one queue's Redis keys: `vtrr:{name}:<part>`, the name being a Cluster hash tag."""

from __future__ import annotations

from dataclasses import astuple, dataclass


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

    @classmethod
    def for_queue(cls, name: str, limits_group: str | None = None) -> Keys:
        """The keys of the queue called name; braces would break the hash tag and are refused.
        Queues of one limits_group count their partitions' items in flight, and remember their
        usage, together: `live`, `freed`, `usage` and `usage_at` are the group's (and so,
        unlike the rest, not in the queue's slot)."""
        for word in (name, limits_group or "-"):
            if not word or "{" in word or "}" in word:
                raise ValueError(f"queue name must be non-empty and free of braces, got {word!r}")
        parts = {part: f"vtrr:{{{name}}}:{part}" for part in cls.__dataclass_fields__}
        if limits_group is not None:
            for part in ("live", "freed", "usage", "usage_at"):
                parts[part] = f"vtrr:limits:{{{limits_group}}}:{part}"
        for prefix in ("item", "park", "live"):
            parts[prefix] += ":"
        return cls(**parts)

    def all(self) -> list[str]:
        """All keys (the item prefix among them), in script order."""
        return list(astuple(self))

    def item_key(self, task_id: str) -> str:
        """The key of one item's hash: its partition, cost, weight, payload, lease, ..."""
        return f"{self.item}{task_id}"
