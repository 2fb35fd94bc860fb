"""Judging a backlog outside the stream: replay of a topic, backfills through a
provider's batch API."""
