"""The `cec` command line: a thin typer shell over the library."""
