"""Virtual hosts on one machine: Linux network namespaces joined by veth
links to a bridge, for running ztrain's executables across "hosts" the way
a cluster runs them (issue 47 item 6; docs/scale-out.md).

Each host is a network namespace with its own interface `eth0` (address
10.77.0.<i+1>/24), its own loopback and, for every process started in it,
its own UTS namespace carrying the host's name (`zt-h<i>`), so Open MPI
sees distinct nodes: ranks on one host talk through shared memory (vader),
ranks on different hosts through TCP over the veth link, which `tc` can
slow down (a token bucket filter). The bridge lives in a namespace of its own, so nothing touches
the machine's own network. Open MPI's `mpirun` runs in host 0 and starts
its daemons on the other hosts through an `plm_rsh_agent` script that does
what ssh would (the command line joined and run by a shell), inside the
host's namespaces.

Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN), `ip` (iproute2), `unshare`
(util-linux) and Open MPI. `available()` says whether this machine can;
tests skip with its reason. Everything is removed on exit, including after
an error.

    with VirtualCluster(hosts=2) as cluster:
        p = cluster.mpirun(2, ["./model", "--steps", "10"])   # 2 ranks per host
"""

import json
import os
import shlex
import shutil
import subprocess
import tempfile

SUBNET = "10.77.0"


def _run(cmd, check=True):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, check=check)


def available():
    """(True, "") where namespaces can be made here, else (False, why)."""
    for tool in ("ip", "unshare", "mpirun", "tc"):
        if not shutil.which(tool):
            return False, f"{tool} not found"
    if os.geteuid() != 0:
        return False, "network namespaces need root"
    name = f"ztprobe{os.getpid()}"
    p = _run(["ip", "netns", "add", name], check=False)
    if p.returncode != 0:
        return False, f"cannot create a network namespace: {p.stderr.strip()}"
    _run(["ip", "netns", "del", name], check=False)
    return True, ""


AGENT = r"""#!/bin/sh
# plm_rsh_agent for ztrain's virtual hosts: "AGENT [ssh options] HOST
# COMMAND...", run as ssh would (the words joined, a shell parses them)
# inside HOST's network namespace, with the host's name.
while [ $# -gt 0 ]; do
  case "$1" in
    -*) shift ;;
    *) break ;;
  esac
done
host="$1"; shift
case "$host" in
%(cases)s
  *) echo "virtual host agent: unknown host $host" >&2; exit 255 ;;
esac
exec ip netns exec "$ns" unshare --uts /bin/sh -c "hostname $name && $*"
"""


class VirtualCluster:
    """`hosts` network namespaces on one bridge. `rate`: the bandwidth of every
    host's link to the bridge (a tc rate, e.g. "1gbit": a token bucket
    filter on its interface, tbf, which every kernel with traffic control
    has; netem's delay is often a module that is not there), None for the
    veth's own speed."""

    def __init__(self, hosts=2, rate=None):
        self.count = hosts
        self.rate = rate
        tag = f"zt{os.getpid()}"
        self.switch = f"{tag}sw"
        self.namespaces = [f"{tag}h{i}" for i in range(hosts)]
        self.names = [f"zt-h{i}" for i in range(hosts)]
        self.addresses = [f"{SUBNET}.{i + 1}" for i in range(hosts)]
        self.workdir = None
        self.agent = None

    def __enter__(self):
        try:
            self._setup()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def _setup(self):
        sw = self.switch
        _run(["ip", "netns", "add", sw])
        _run(["ip", "-n", sw, "link", "set", "lo", "up"])
        _run(["ip", "-n", sw, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", sw, "link", "set", "br0", "up"])
        for i, (ns, addr) in enumerate(zip(self.namespaces, self.addresses)):
            _run(["ip", "netns", "add", ns])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            # eth0 in the host, its peer port<i> on the bridge.
            _run(["ip", "-n", ns, "link", "add", "eth0", "type", "veth",
                  "peer", "name", f"port{i}", "netns", sw])
            _run(["ip", "-n", sw, "link", "set", f"port{i}", "master", "br0"])
            _run(["ip", "-n", sw, "link", "set", f"port{i}", "up"])
            _run(["ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0"])
            _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
            if self.rate:
                _run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev",
                      "eth0", "root", "tbf", "rate", self.rate, "burst", "256kb",
                      "latency", "50ms"])
        self.workdir = tempfile.mkdtemp(prefix="ztrain-hosts-")
        cases = "\n".join(f'  {addr}|{name}) ns={ns}; name={name} ;;'
                          for ns, name, addr in
                          zip(self.namespaces, self.names, self.addresses))
        self.agent = os.path.join(self.workdir, "agent.sh")
        with open(self.agent, "w") as fh:
            fh.write(AGENT % {"cases": cases})
        os.chmod(self.agent, 0o755)

    def close(self):
        """Kills what still runs in the hosts and removes every namespace and
        file made; safe to call twice."""
        for ns in self.namespaces + [self.switch]:
            pids = _run(["ip", "netns", "pids", ns], check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
            _run(["ip", "netns", "del", ns], check=False)
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def link_bytes(self, host):
        """(received, sent) bytes on host `host`'s link to the bridge so far."""
        out = _run(["ip", "-n", self.namespaces[host], "-s", "-j", "link", "show",
                    "eth0"]).stdout
        stats = json.loads(out)[0]["stats64"]
        return stats["rx"]["bytes"], stats["tx"]["bytes"]

    def exec_in(self, host, cmd):
        """The command line that runs `cmd` in host `host`'s namespaces."""
        return ["ip", "netns", "exec", self.namespaces[host], "unshare", "--uts",
                "/bin/sh", "-c", f'hostname {self.names[host]} && exec "$@"', "sh"] + \
            [str(c) for c in cmd]

    def mpirun_command(self, ranks_per_host, cmd, mpi_args=()):
        """`mpirun` started in host 0 with `ranks_per_host` ranks on each
        host (ranks 0..k-1 on host 0, and so on), TCP between hosts over
        eth0, shared memory inside them."""
        hosts = ",".join(f"{addr}:{ranks_per_host}" for addr in self.addresses)
        launcher = [
            "mpirun", "--oversubscribe", "-np", str(ranks_per_host * self.count),
            "--host", hosts,
            "--mca", "plm_rsh_agent", self.agent,
            "--mca", "plm_rsh_no_tree_spawn", "1",
            "--mca", "btl", "self,vader,tcp",
            "--mca", "btl_tcp_if_include", "eth0",
            "--mca", "oob_tcp_if_include", "eth0",
        ] + list(mpi_args)
        return self.exec_in(0, launcher + [str(c) for c in cmd])

    def mpirun(self, ranks_per_host, cmd, mpi_args=(), timeout=600):
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1",
                   OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        return subprocess.run(self.mpirun_command(ranks_per_host, cmd, mpi_args),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, timeout=timeout, env=env)


def describe(cluster):
    """One line per host, for logs."""
    return "\n".join(f"{name} ({ns}) {addr}" for name, ns, addr in
                     zip(cluster.names, cluster.namespaces, cluster.addresses))


if __name__ == "__main__":  # a smoke test: where do 2 x 2 ranks land?
    ok, why = available()
    if not ok:
        raise SystemExit(f"virtual hosts unavailable: {why}")
    with VirtualCluster(2) as c:
        print(describe(c))
        p = c.mpirun(2, ["hostname"])
        print(p.returncode, p.stdout, p.stderr)
        print(shlex.join(c.mpirun_command(2, ["hostname"])))
