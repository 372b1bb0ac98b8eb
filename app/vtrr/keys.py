"""Names of one queue's Redis keys: `vtrr:{name}:<part>`, the name being a Cluster hash tag."""

from __future__ import annotations

from dataclasses import astuple, dataclass


@dataclass(frozen=True)
class Keys:
    """Every key of one queue, in the order the Lua scripts receive them (see lua/_lib.lua)."""

    queue: str
    task: str
    meta: str
    inflight: str
    inflight_task: str
    lease: str
    timeouts: str
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

    @classmethod
    def for_queue(cls, name: str) -> Keys:
        """The keys of the queue called name; braces would break the hash tag and are refused."""
        if not name or "{" in name or "}" in name:
            raise ValueError(f"queue name must be non-empty and free of braces, got {name!r}")
        return cls(*(f"vtrr:{{{name}}}:{part}" for part in cls.__dataclass_fields__))

    def all(self) -> list[str]:
        """All keys, in script order."""
        return list(astuple(self))
