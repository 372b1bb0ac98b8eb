"""The signature of a webhook, as the Standard Webhooks scheme says: `webhook-id`,
`webhook-timestamp` (Unix seconds) and `webhook-signature: v1,<base64 HMAC-SHA256 of
"id.timestamp.body">`, keyed with WEBHOOK_SECRET (`whsec_<base64>`). The standardwebhooks
package computes it, and receivers verify it with the same package (docs/webhooks.md)."""

from __future__ import annotations

import binascii
import math
from datetime import datetime

from standardwebhooks import Webhook
from standardwebhooks.webhooks import EmptyWebhookSecretError

from app.settings import Settings

USER_AGENT = "fairgpu-webhooks"


def signer(settings: Settings) -> Webhook | None:
    """What signs this deployment's webhooks; None when WEBHOOK_SECRET is unset or empty (then it
    sends none). ValueError when it is not a whsec_<base64> key."""
    secret = settings.webhook_secret
    if secret is None or not secret.get_secret_value():
        return None
    try:
        return Webhook(secret.get_secret_value())
    except (binascii.Error, EmptyWebhookSecretError, RuntimeError):
        raise ValueError("WEBHOOK_SECRET is not a whsec_<base64> key") from None


def signed_headers(sign: Webhook, message_id: str, body: str, at: datetime) -> dict[str, str]:
    """The headers of one delivery of body, sent at `at` (an aware datetime)."""
    return {
        "content-type": "application/json",
        "user-agent": USER_AGENT,
        "webhook-id": message_id,
        "webhook-timestamp": str(math.floor(at.timestamp())),  # sign() floors it too
        "webhook-signature": sign.sign(message_id, at, body),
    }
