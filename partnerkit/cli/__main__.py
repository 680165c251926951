"""`python -m partnerkit.cli` runs the same command line as the `partnerkit` script."""

from partnerkit.cli import main

main()
