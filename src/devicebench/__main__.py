"""`python -m devicebench` runs the command-line tool."""

from devicebench.cli import app

app(prog_name="devicebench")
