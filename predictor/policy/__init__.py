"""The rules layer: priority factors, SLA, tiers, aging, fair-share -> Decision.

Entry points (import them from their modules):

* ``predictor.policy.scheduler.decide(snapshot, policy) -> SchedulePlan`` - the one scheduling cycle
  the service and the replay both call;
* ``predictor.policy.incremental.IncrementalScheduler(policy).plan(snapshot)`` - the same cycle for a
  caller deciding again and again (the replay): same input, the acts of ``decide()`` as a
  ``light_plan.LightPlan`` (``.full()`` writes the SchedulePlan); what it keeps between cycles and
  why the result is ``decide()``'s: docs/replay.md (Performance);
* ``predictor.policy.presets.load_policy(path, preset=...)`` - the validated policy;
* ``predictor.policy.snapshot`` (``ClusterSnapshot``, ``PendingJobs``, ``RunningJobs``) and
  ``tests.builders`` (``SnapshotBuilder``, ``make_job``, ``snapshot_from_jobs``);
* ``predictor.policy.ledger.FairShareLedger`` - decayed team usage;
* ``predictor.policy.decision`` - the Decision contract.

See docs/rules-layer.md for the rules.
"""
