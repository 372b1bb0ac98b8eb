"""Webhooks: a job submitted with `"webhook": URL` gets its final status POSTed there, signed
per Standard Webhooks, by the sender process (`python -m app.webhooks`; docs/webhooks.md).

    destination.py   which URLs a webhook may go to (public addresses only, unless allowed)
    signing.py       the signer from WEBHOOK_SECRET, and a delivery's signed headers
    deliveries.py    the sender's side of Redis: the stream, the schedule, the outcomes
    sender.py        the sender's loops: take, claim, deliver, settle
    __main__.py      the process
"""
