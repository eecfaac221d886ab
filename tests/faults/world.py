"""The reference rows of the fault scenarios, written once into the migrated template database.

Run as `python -m tests.faults.world` with DATABASE_URL naming the template (the pytest process
itself is set up for the suite's own test database, so this runs in a process of its own); prints
the world as JSON. Every scenario's database is a copy of the template, so the tokens printed
here work in each of them.

- `faults-demo`: the insight the `pop worker`s pull, for `demo` operations (scripts/cluster_demo.py
  records each run), with a queue of 16 (two workers of concurrency 4, twice over);
- `faults-idle`: an insight nobody submits to, for pullers that only long-poll (the squeeze).
"""

from __future__ import annotations

import json
import sys


def main() -> int:
    from bench.common import make_world

    world = make_world(
        customers=2,
        queue_size=16,
        lease_seconds=30,
        slug_prefix="faults",
        operation_types=["demo"],
    )
    from resourcepools.models import Insight

    demo = Insight.objects.get(pk=world.insight_id)
    idle = Insight.objects.create(
        resource_pool=demo.resource_pool,
        name="faults-idle",
        queue_size=4,
        mappers={"operation_type": ["idle"]},
        order=1,
    )
    print(json.dumps({"world": json.loads(world.to_json()), "idle_insight": str(idle.pk)}))
    return 0


if __name__ == "__main__":
    import django

    django.setup()
    sys.exit(main())
