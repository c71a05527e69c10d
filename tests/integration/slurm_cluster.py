"""A real single-node Slurm cluster for integration tests, started and stopped by the test session.

Everything lives under one temporary folder: munged on its own socket, slurmdbd on a fresh MariaDB
database (root, empty password, 127.0.0.1:3306), slurmctld and slurmd, on free ports chosen at start
so a second session (or a system Slurm) never clashes. Every daemon runs in the foreground as a child
of this process (``-D`` / ``--foreground``), so stopping it by PID also reaps it: no zombies are left
behind even where PID 1 does not reap orphans.

Facts this relies on are recorded in ``../shared/notes/local-services.md``: ``AccountingStoragePass``
must name the munge socket, QoS and fair-share need slurmdbd, and a job kept pending by a DOWN
partition (not ``--hold``) can still be re-prioritised.

Run this file directly to start a cluster by hand and print the environment to use it::

    .venv/bin/python tests/integration/slurm_cluster.py
"""

from __future__ import annotations

import ctypes
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

DAEMONS = ("munged", "slurmdbd", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scontrol", "sacctmgr", "sprio", "scancel", "sacct", "sinfo")
MARIADB = ("127.0.0.1", 3306)
CLUSTER_NAME = "predtest"
#: Accounts (teams) created in the accounting database, each with root as a member.
ACCOUNTS = ("vision", "nlp", "research")
#: Fake GPUs declared on the node (count-only GRES, no device files).
NODE_GPUS = 4
#: Their GRES type (Slurm's name for an "NVIDIA A10" in this project's node agent).
GPU_TYPE = "a10"


def _binary(name: str) -> str | None:
    for folder in (None, "/usr/sbin", "/usr/bin"):
        found = shutil.which(name, path=folder)
        if found:
            return found
    return None


def missing_requirements() -> list[str]:
    """What this machine lacks to run the cluster (empty when everything is there)."""
    missing = [name for name in DAEMONS + CLIENTS if _binary(name) is None]
    if os.geteuid() != 0:
        missing.append("root (munged runs as user munge, the Slurm daemons as root)")
    try:
        with socket.create_connection(MARIADB, timeout=1.0):
            pass
    except OSError as exc:
        missing.append(f"MariaDB on {MARIADB[0]}:{MARIADB[1]} ({exc.strerror or exc})")
    if _binary("mariadb") is None and _binary("mysql") is None:
        missing.append("mariadb client")
    return missing


def _free_ports(count: int) -> list[int]:
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _die_with_parent() -> None:
    """In the child before exec: have the kernel SIGTERM it when this process dies, even by SIGKILL,
    so a killed test session leaves no daemons behind."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _mariadb(sql: str) -> None:
    client = _binary("mariadb") or _binary("mysql")
    subprocess.run([client, "-uroot", "-h", MARIADB[0], "-P", str(MARIADB[1]), "-e", sql],
                   check=True, capture_output=True, text=True, timeout=30)


@dataclass
class SlurmCluster:
    """A running single-node cluster. ``env`` points the Slurm client commands at it."""

    root: Path
    database: str = field(default_factory=lambda: f"slurm_test_{secrets.token_hex(4)}")
    cpus: int = field(default_factory=lambda: os.cpu_count() or 2)
    memory_mib: int = 4096
    started_in_s: float = 0.0
    _procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.root / "run" / "munge.sock"

    @property
    def env(self) -> dict[str, str]:
        """Environment for the client commands (``SLURM_CONF`` names this cluster's config)."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self, timeout_s: float = 30.0) -> SlurmCluster:
        """Write configs, create the database, start the four daemons and wait until ready."""
        t0 = time.monotonic()
        self.root.chmod(0o755)  # munged (user munge) must reach its socket and key below it
        for sub in ("etc", "run", "log", "state", "spool", "munge"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        ctld_port, slurmd_port, dbd_port = _free_ports(3)
        self._write_configs(ctld_port, slurmd_port, dbd_port)
        _mariadb(f"CREATE DATABASE `{self.database}`")
        self._start_munged()
        self._spawn("slurmdbd", ["slurmdbd", "-D"])  # reads slurmdbd.conf beside $SLURM_CONF
        self._wait(lambda: self._port_open(dbd_port), "slurmdbd listening", timeout_s)
        self.run("sacctmgr", "-i", "add", "cluster", CLUSTER_NAME)
        self.run("sacctmgr", "-i", "add", "account", *ACCOUNTS)
        self.run("sacctmgr", "-i", "add", "user", "root", f"account={','.join(ACCOUNTS)}",
                 "defaultaccount=research", "adminlevel=Administrator")
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._wait(lambda: self._port_open(ctld_port), "slurmctld listening", timeout_s)
        self._spawn("slurmd", ["slurmd", "-D", "-N", "localhost", "-f", str(self.conf)])
        self._wait(self._node_idle, "node localhost IDLE", timeout_s)
        self.started_in_s = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Stop every daemon by PID (SIGTERM, then SIGKILL), reap it, and drop the database."""
        # slurmd and slurmctld together, then slurmdbd and munged (slurmctld reports to slurmdbd on exit)
        for group in (("slurmd", "slurmctld"), ("slurmdbd", "munged")):
            procs = [self._procs.pop(name) for name in group if name in self._procs]
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in procs:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
        try:
            _mariadb(f"DROP DATABASE IF EXISTS `{self.database}`")
        except (subprocess.SubprocessError, OSError):
            pass

    def pids(self) -> dict[str, int]:
        """PID of each daemon this cluster started."""
        return {name: p.pid for name, p in self._procs.items()}

    # -- helpers for tests --------------------------------------------------------------------

    def run(self, *argv: str, check: bool = True, timeout: float = 30.0) -> subprocess.CompletedProcess:
        """Run a Slurm client command against this cluster."""
        res = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and res.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {res.returncode}: {res.stderr.strip()}\n{self.logs()}")
        return res

    def submit(self, *sbatch_args: str, script: str = "sleep 600") -> str:
        """Submit a batch job with ``sbatch --parsable``; return its job id."""
        out = self.run("sbatch", "--parsable", "-o", "/dev/null", *sbatch_args, "--wrap", script).stdout
        return out.strip().split(";")[0]

    def set_partition(self, state: str, partition: str = "gpu") -> None:
        """Set the partition UP or DOWN (DOWN keeps submitted jobs pending yet re-prioritisable)."""
        self.run("scontrol", "update", f"partitionname={partition}", f"state={state}")

    def replace_config(self, lines: list[str]) -> None:
        """Set ``Key=Value`` lines in slurm.conf (replacing the same keys) and ``scontrol reconfigure``.

        Reconfiguring sets every partition back to its configured state (UP).
        """
        settings = [ln.split("#", 1)[0].strip() for ln in lines]
        keys = {ln.split("=", 1)[0].lower() for ln in settings if "=" in ln}
        kept = [ln for ln in self.conf.read_text().splitlines() if ln.split("=", 1)[0].strip().lower() not in keys]
        self.conf.write_text("\n".join(kept + lines) + "\n")
        self.run("scontrol", "reconfigure")

    def gres_report(self, gres_conf: str) -> subprocess.CompletedProcess:
        """What ``slurmd -G`` (parse and print the node's GRES configuration, then exit) makes of
        ``gres_conf``; the running slurmd keeps its configuration."""
        path = self.root / "etc" / "gres.conf"
        original = path.read_text()
        path.write_text(gres_conf)
        try:
            return subprocess.run(["slurmd", "-G", "-N", "localhost", "-f", str(self.conf)], env=self.env,
                                  capture_output=True, text=True, timeout=30)
        finally:
            path.write_text(original)

    def logs(self, tail: int = 15) -> str:
        """The last lines of every daemon log (for failure messages)."""
        parts = []
        for log in sorted((self.root / "log").glob("*.log")):
            lines = log.read_text(errors="replace").splitlines()[-tail:]
            parts.append(f"--- {log.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    # -- internals ----------------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.stdout", "ab")  # noqa: SIM115 - owned by the child
        self._procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                             start_new_session=True, preexec_fn=_die_with_parent)
        log.close()

    def _start_munged(self) -> None:
        key = self.root / "munge" / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        for path in (self.root / "munge", self.root / "run", key):
            shutil.chown(path, "munge", "munge")
        (self.root / "run").chmod(0o755)
        shutil.chown(self.root / "log", "munge", "munge")
        self._spawn("munged", [
            "runuser", "-u", "munge", "--", "munged", "--foreground",
            f"--socket={self.munge_socket}", f"--key-file={key}",
            f"--pid-file={self.root / 'run' / 'munged.pid'}",
            f"--log-file={self.root / 'log' / 'munged.log'}",
            f"--seed-file={self.root / 'munge' / 'munged.seed'}",
        ])
        self._wait(self.munge_socket.exists, "munge socket", 10.0)

    def _write_configs(self, ctld_port: int, slurmd_port: int, dbd_port: int) -> None:
        r = self.root
        auth = f"AuthType=auth/munge\nAuthInfo=socket={self.munge_socket}\n"
        dbd = r / "etc" / "slurmdbd.conf"
        dbd.write_text(
            auth + f"DbdHost=localhost\nDbdAddr=127.0.0.1\nDbdPort={dbd_port}\nSlurmUser=root\n"
            f"StorageType=accounting_storage/mysql\nStorageHost={MARIADB[0]}\nStoragePort={MARIADB[1]}\n"
            f"StorageUser=root\nStorageLoc={self.database}\nLogFile={r}/log/slurmdbd.log\n"
            f"PidFile={r}/run/slurmdbd.pid\nDebugLevel=info\n"
        )
        dbd.chmod(0o600)
        # Slurm drops file-less GPUs and wants character devices: copies of /dev/null (1:3) stand in
        # for /dev/nvidia0..N-1.
        (r / "dev").mkdir(exist_ok=True)
        for i in range(NODE_GPUS):
            os.mknod(r / "dev" / f"nvidia{i}", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        (r / "etc" / "gres.conf").write_text(f"Name=gpu Type={GPU_TYPE} File={r}/dev/nvidia[0-{NODE_GPUS - 1}]\n")
        self.conf.write_text(
            auth + f"""ClusterName={CLUSTER_NAME}
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
CredType=cred/munge
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=debug2
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
JobRequeue=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
GresTypes=gpu
PriorityType=priority/multifactor
PriorityCalcPeriod=1
PriorityFlags=ACCRUE_ALWAYS
PriorityWeightAge=1000
PriorityWeightFairshare=10000
PriorityWeightJobSize=100
PriorityWeightPartition=1000
PriorityWeightQOS=100000
PreemptType=preempt/qos
PreemptMode=REQUEUE
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={dbd_port}
AccountingStoragePass={self.munge_socket}
AccountingStorageTRES=gres/gpu
AccountingStorageEnforce=associations,limits,qos
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
InactiveLimit=0
KillWait=5
MinJobAge=300
NodeName=localhost NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={self.memory_mib} Gres=gpu:{GPU_TYPE}:{NODE_GPUS} State=UNKNOWN
PartitionName=gpu Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""
        )

    def _port_open(self, port: int) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            return False

    def _node_idle(self) -> bool:
        res = self.run("sinfo", "-h", "-n", "localhost", "-o", "%t", check=False, timeout=5)
        return res.returncode == 0 and res.stdout.strip().startswith("idle")

    def _wait(self, ready, what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode} while waiting for {what}\n"
                                       f"{self.logs()}")
            if ready():
                return
            time.sleep(0.1)
        raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}\n{self.logs()}")


def _require(config: pytest.Config, condition: bool, what: str) -> None:
    """tests/conftest.py's ``require`` (skip locally, fail in CI), taken from pytest's own registry
    so it is that file's module and not another folder's ``conftest``."""
    root_conftest = config.pluginmanager.get_plugin(str(Path(__file__).resolve().parents[1] / "conftest.py"))
    root_conftest.require(condition, what)


@pytest.fixture(scope="session")
def slurm_cluster(request: pytest.FixtureRequest) -> Iterator[SlurmCluster]:
    """A real single-node Slurm for the whole session; skips (fails in CI) naming what is missing."""
    missing = missing_requirements()
    _require(request.config, not missing, "real Slurm cluster: " + "; ".join(missing))
    cluster = SlurmCluster(root=Path(tempfile.mkdtemp(prefix="slurm-test-")))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(cluster.root, ignore_errors=True)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _interrupt)  # `timeout` / `kill` stop it as cleanly as Ctrl-C
    demo = SlurmCluster(root=Path(tempfile.mkdtemp(prefix="slurm-demo-")))
    try:
        demo.start()
        print(f"started in {demo.started_in_s:.1f} s; export SLURM_CONF={demo.conf}", flush=True)
        print("pids:", demo.pids(), flush=True)
        print("press Ctrl-C to stop", flush=True)
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        demo.stop()
        shutil.rmtree(demo.root, ignore_errors=True)
