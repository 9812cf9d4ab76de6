"""``python -m pettingllms.envs.household --seeds 0:64``: compile household games into the cache ahead of a run."""

from pettingllms.envs.household.generator import main

raise SystemExit(main())
