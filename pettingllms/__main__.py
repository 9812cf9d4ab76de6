"""``python -m pettingllms ...``: the ``pettingllms`` command line (:mod:`pettingllms.cli`)."""

from pettingllms.cli import main

raise SystemExit(main())
