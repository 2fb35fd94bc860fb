"""Kafka I/O that is not Faust: the embedded broker, topic admin, clients."""

from .broker import EmbeddedBroker, find_broker_binary
from .clients import check_reachable, client_options, resolve_bootstrap
from .topics import TopicMismatch, ensure_topics, topic_plan

__all__ = ["EmbeddedBroker", "find_broker_binary", "client_options", "resolve_bootstrap",
           "check_reachable", "TopicMismatch", "ensure_topics", "topic_plan"]
