"""The one decision of Kafka's ``LogCleanerManager`` the offline job does not make: which eligible
partition to clean first. The job cleans every eligible partition in a round; the tests of
`policy/plan.py` check the plans it picks from against Kafka's order of preference."""

from __future__ import annotations

from collections.abc import Sequence

from compaction.policy.plan import PartitionPlan


def grab_filthiest(
    plans: Sequence[PartitionPlan], excluded: frozenset[tuple[str, int]] = frozenset()
) -> PartitionPlan | None:
    """``LogCleanerManager.grabFilthiestCompactedLog``'s final pick: among eligible plans not
    excluded (uncleanable / in progress), the largest cleanable ratio; ties go to the first.
    The offline job cleans every eligible partition; this gives Kafka's order of preference."""
    best: PartitionPlan | None = None
    for plan in plans:
        if plan.eligible and (plan.topic, plan.partition) not in excluded:
            if best is None or plan.cleanable_ratio > best.cleanable_ratio:
                best = plan
    return best
