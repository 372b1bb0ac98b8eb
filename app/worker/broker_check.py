"""What a worker checks at start about its broker: with RabbitMQ, that a trigger is not held
unacked for longer than the broker's consumer_timeout allows.

A worker acks a trigger when its run ends (late acks): after a drain (DRAIN_MAX_S) and the job
it started last (up to its longest duration, then the timeout's and the kill's graces). RabbitMQ
closes the channel of a consumer that holds a delivery unacked past `consumer_timeout` (30 min
by default), and puts the trigger back in its queue. No job is lost then (its lease in Redis
holds it, and its end is recorded and billed once; the trigger, delivered again, leases whatever
is queued next), but the worker's channel is closed under it and an idle worker may be woken
for nothing. RabbitMQ does not tell a client its consumer_timeout over AMQP (it says the value
only when it closes a channel for it: "Timeout value used: N ms" in the worker's log), so the
operator states it: BROKER_CONSUMER_TIMEOUT_S.
"""

from __future__ import annotations

from app.settings import Settings


def consumer_timeout_problem(settings: Settings) -> str | None:
    """What is wrong with RabbitMQ's consumer_timeout for these settings, or None (also with a
    Redis broker, whose visibility timeout the worker sets itself)."""
    if not settings.amqp_broker:
        return None
    hold = settings.longest_trigger_hold_s
    timeout = settings.broker_consumer_timeout_s
    if timeout > hold:
        return None
    return (
        f"RabbitMQ's consumer_timeout ({timeout:g} s, as BROKER_CONSUMER_TIMEOUT_S says) is not "
        f"above the longest a worker holds a trigger ({hold:g} s: DRAIN_MAX_S + the longest "
        "job + TIMEOUT_GRACE_S + CANCEL_GRACE_S). Set consumer_timeout on the broker above it "
        f"(e.g. consumer_timeout = {round((hold + 600) * 1000)} in rabbitmq.conf) and "
        "BROKER_CONSUMER_TIMEOUT_S to match, or lower DRAIN_MAX_S or MAX_LONG_S. Until then a "
        "long run's channel is closed under it and its trigger delivered again; no job is lost "
        "(docs/rabbitmq.md)."
    )
