"""The `cec` command line: a thin typer shell over the library (:mod:`cec_spark.api`).

=================  ===========================================================================
``app``            the commands, in the order a user meets them (run, tail, export, recover,
                   standby, inspect, examples); errors to one line and an exit status
``render``         the one renderer of a result: ``--json``, or a summary and a table with
                   numbers as a person reads them
``schema``         the JSON schema of every ``--json`` output, and docs/JSON.md from it
``example_specs``  ``cec examples``: the shipped specs listed and copied
``leave``          the end of a `cec` process: a normal exit's work, without the teardown
``examples/``      the example specs and their data (package data)
=================  ===========================================================================

First read: ``app.py``. Importing it loads typer and rich only; a command imports the
library when it runs.
"""
