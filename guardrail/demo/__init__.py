"""``guardrail demo``: broker, judge, worker and sample traffic in one command.

    from guardrail.demo import Demo, DemoOptions
    exit_code = Demo(DemoOptions(judge="rules"), echo=print).run()

- :mod:`.runner` starts and stops the processes and tells the story;
- :mod:`.display` formats results and alerts for the terminal;
- :mod:`.screen` prints them in reading order (an alert after the answers it names);
- :mod:`.judge_status` says what the local judge does before its first verdict;
- :mod:`.truth` compares the verdicts with the samples' truth labels;
- ``samples.jsonl`` holds the built-in answers of two assistant versions.

- :mod:`.stream` is its Kafka side: publish the samples, follow results and alerts.

It starts the broker, the judge and a worker as processes, so it imports their
wings' settings and helpers, never the worker's Faust code.
"""

from .display import alert_lines, result_line
from .runner import JUDGES, Demo, DemoOptions, load_samples, settings_env

__all__ = ["Demo", "DemoOptions", "JUDGES", "alert_lines", "load_samples", "result_line",
           "settings_env"]
