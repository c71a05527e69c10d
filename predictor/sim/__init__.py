"""Trace replay: an event-driven simulator that drives the same rules layer as production."""
