"""Seed 004's opportunity-cost experiments: a dedicated simulator (:mod:`.sim`) and ``vcemu oppcost``
(:mod:`.experiment`). The policies themselves are pure, in :mod:`coordinator.policies.opportunity_cost`."""
