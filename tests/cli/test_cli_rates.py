"""guardrail.cli.rates: the terminal table of ``guardrail rates``; and the
command's answer when there is no broker to read from."""

import subprocess
import sys
from pathlib import Path

from guardrail._processes import free_port
from guardrail.cli.rates import rates_table

BIN = Path(sys.executable).parent


def _row(metric, group, start, end, total, unsafe, errors, rate, **seen):
    return {"metric": metric, "group": group, "window_start": start, "window_end": end,
            **seen, "total": total, "unsafe": unsafe, "errors": errors, "unsafe_rate": rate}


def test_the_table_aligns_columns_and_keeps_the_rows_order():
    # The second row comes from a worker before sampling: no "seen", all judged.
    rows = [_row("toxicity", "model=m,model_version=v2", "2026-11-23T10:20:00.000+00:00",
                 "2026-11-23T10:25:00.000+00:00", 40, 12, 0, 0.3, seen=160),
            _row("bias", "", "2026-11-23T23:59:30.000+00:00",
                 "2026-11-24T00:00:30.000+00:00", 7, 0, 7, None)]
    assert rates_table(rows) == "\n".join([
        "metric    group                     unit  window (UTC)                       "
        "      seen  total  unsafe  errors   rate",
        "toxicity  model=m,model_version=v2  turn  2026-11-23 10:20–10:25             "
        "       160     40      12       0  30.0%",
        "bias      -                         turn  2026-11-23 23:59:30–2026-11-24 00:00:30"
        "     7      7       0       7      -"])


def test_session_cells_are_rows_of_their_own_with_the_unit_session():
    start, end = "2026-11-23T10:20:00.000+00:00", "2026-11-23T10:25:00.000+00:00"
    rows = [_row("toxicity", "model=m,unit=session", start, end, 12, 1, 0, 1 / 12, seen=12,
                 unit="session"),
            _row("toxicity", "model=m", start, end, 40, 12, 0, 0.3, seen=160, unit="turn"),
            # From a worker before sessions: no "unit", read from the group.
            _row("bias", "model=m,unit=session", start, end, 3, 0, 0, 0.0)]
    lines = [line.split() for line in rates_table(rows).splitlines()]
    assert [line[:3] for line in lines] == [["metric", "group", "unit"],
                                            ["toxicity", "model=m,unit=session", "session"],
                                            ["toxicity", "model=m", "turn"],
                                            ["bias", "model=m,unit=session", "session"]]
    assert [line[-1] for line in lines[1:]] == ["8.3%", "30.0%", "0.0%"]


def test_the_table_of_no_rows_is_its_header():
    assert rates_table([]).split() == ["metric", "group", "unit", "window", "(UTC)", "seen",
                                       "total", "unsafe", "errors", "rate"]


def test_rates_without_a_broker_is_one_clear_line_and_exit_2():
    nobody = f"127.0.0.1:{free_port()}"
    proc = subprocess.run([str(BIN / "guardrail"), "rates", "--bootstrap-servers", nobody],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"error: cannot read 'guardrail-window-counts-changelog' "
                                  f"from {nobody}: ")
    assert len(proc.stderr.splitlines()) == 1 and proc.stdout == ""
