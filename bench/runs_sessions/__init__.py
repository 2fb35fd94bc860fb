"""Agent runs and sessions: spans and turns assembled, then judged as a whole."""
