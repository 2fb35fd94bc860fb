"""What the judge is sent and how it is called: rates bound by its latency, the
judge alone, tokens per message, a guard model first, moderation in batches,
and verdicts against truth labels."""
