"""The rules layer: priority factors, SLA, tiers, aging, fair-share -> Decision."""
