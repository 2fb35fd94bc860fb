"""Test-side name for the stream harness (kept so tests import it briefly)."""

from guardrail.testing.harness import StreamEnv, WebhookSink, consume, produce

__all__ = ["StreamEnv", "WebhookSink", "consume", "produce"]
