"""Deprecated home of the stand-in rule judge, kept for one release.

The rule judge moved to :mod:`guardrail.local.rule_judge`; test-only helpers
(harness, fault scenarios) moved out of the package into ``tests/support``.
"""
