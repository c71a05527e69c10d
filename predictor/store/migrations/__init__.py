"""Alembic migration environment and scripts for the state store (run via ``predictor.store.migrate``)."""
