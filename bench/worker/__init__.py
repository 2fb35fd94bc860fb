"""What one worker costs: its rate with an instant judge, CPU per message,
latency, memory, start time, and OpenTelemetry input."""
