"""Capacity: inventory, GPU sizing, gang placement and reservations."""
