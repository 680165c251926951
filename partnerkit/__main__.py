"""`python -m partnerkit` runs the `partnerkit` command line."""

from partnerkit.cli import main

main()
