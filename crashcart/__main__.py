"""``python -m crashcart``: the same command line as the ``crashcart`` script."""

from crashcart.cli import main

raise SystemExit(main())
