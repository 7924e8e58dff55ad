"""The Python API: a windowed aggregate built in Python, run on Spark with cec's guarantees.

::

    import cec_spark as cec

    res = (cec.stream(df, time="item_time")          # a DataFrame, or a file/folder
             .filter("item_price > 10")
             .group_by("item_id")
             .window(time="10 seconds", slide="5 seconds")   # or count=1000, slide=...
             .agg(avg="item_price")
             .checkpoint(Q="2x", U=1_000_000)
             .run("/path/run_dir"))
    res.results()          # a Spark DataFrame of the results (= cec export)

First read ``builder.py`` (:class:`Stream`: every call checked at once by the spec's
own validators, a bad one a :class:`cec.errors.SpecError` naming the call and the
field), then ``commands.py`` (:func:`run` a spec or a Stream; :func:`recover`,
:func:`standby`, :func:`export`, :func:`tail`, :func:`inspect_extent`,
:func:`inspect_log`, :func:`results`). ``launch.py``: a run started from Python, the
plan then the driver (the path of ``cec run pipeline``), and the :class:`Run` it
returns; ``session.py``: the SparkSession a run from Python uses and the settings it
borrows; ``frame.py``: a DataFrame source, written once to ``RUN/source``.

Why a package of five modules: the builder (pure: pydantic and the spec, no Spark) and
the commands were one module of 630 lines; ``Stream.run`` and :func:`run` both start a
run, so that path is ``launch``, which imports neither (the builder and the commands
once imported each other); the session and the DataFrame source are the two things
only a run started from Python needs. The command line is built on the functions
offered here (:func:`load`, :func:`run`, :func:`recover`, :func:`standby`,
:func:`export`, :func:`tail`, :func:`inspect_extent`, :func:`inspect_log`,
:func:`stored_spec`): one path for both.
"""

from __future__ import annotations

from cec_spark.api.builder import ORIGIN, SOURCE_DIR, Stream, generator, stream
from cec_spark.api.commands import (
    Run,
    export,
    inspect_extent,
    inspect_log,
    load,
    recover,
    results,
    run,
    standby,
    stored_spec,
    tail,
)

__all__ = ["ORIGIN", "SOURCE_DIR", "Run", "Stream", "export", "generator", "inspect_extent",
           "inspect_log", "load", "recover", "results", "run", "standby", "stored_spec", "stream",
           "tail"]
