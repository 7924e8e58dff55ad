"""One Flink SQL job in a PyFlink MiniCluster: the child process of bench/flink_job.py.

Run by the interpreter of the Flink venv (``.venv-flink``), never by the project's:
``python bench/flink_child.py JOB.json``. JOB.json holds ``conf`` (Flink configuration
keys and values), ``statements`` (DDL run first) and ``insert`` (the INSERT that is the
job); everything about the query is decided by bench/flink_job.py, this file only runs
it. Prints one JSON line per phase on stdout (``planned``, ``finished``, seconds since
the process started) and exits 0 when the job has finished, 2 on a bad job file.
"""

from __future__ import annotations

import json
import sys
import time

T0 = time.perf_counter()


def _say(event: str, **extra: object) -> None:
    print(json.dumps({"event": event, "t": round(time.perf_counter() - T0, 3), **extra}),
          flush=True)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: flink_child.py JOB.json", file=sys.stderr)
        return 2
    try:
        with open(argv[0], encoding="utf-8") as fh:
            job = json.load(fh)
        conf_items = dict(job["conf"])
        statements = list(job["statements"])
        insert = str(job["insert"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"flink_child: bad job file {argv[0]}: {exc}", file=sys.stderr)
        return 2

    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment

    conf = Configuration()
    for key, value in conf_items.items():
        conf.set_string(str(key), str(value))
    settings = (EnvironmentSettings.new_instance().in_streaming_mode()
                .with_configuration(conf).build())
    tenv = TableEnvironment.create(settings)
    _say("started")
    for stmt in statements:
        tenv.execute_sql(stmt)
    result = tenv.execute_sql(insert)
    client = result.get_job_client()
    _say("submitted", job_id=str(client.get_job_id()) if client is not None else None)
    result.wait()
    _say("finished")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
