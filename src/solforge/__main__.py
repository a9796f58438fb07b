"""`python -m solforge` is the `solforge` command."""

from solforge.cli import main

main()
