"""`python -m stratamem …` runs the CLI."""

from stratamem.cli.main import main

main()
