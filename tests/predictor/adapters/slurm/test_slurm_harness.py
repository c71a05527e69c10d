"""The real-Slurm harness says what is missing instead of failing obscurely."""

import tests.integration.slurm_cluster as harness


def test_missing_mariadb_is_named(monkeypatch):
    monkeypatch.setattr(harness, "MARIADB", ("127.0.0.1", 1))
    assert any(m.startswith("MariaDB on 127.0.0.1:1") for m in harness.missing_requirements())


def test_missing_binaries_are_named(monkeypatch):
    monkeypatch.setattr(harness, "_binary", lambda name: None if name in ("slurmdbd", "sprio") else "/bin/true")
    missing = harness.missing_requirements()
    assert "slurmdbd" in missing and "sprio" in missing and "slurmctld" not in missing
