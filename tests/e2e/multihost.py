#!/usr/bin/python3
"""multihost.py - MPI ranks on two hosts joined only by TCP.

Two Linux network namespaces joined by a veth pair stand for two hosts,
each with its own loopback, one address on a private /24 and its own host
name (a UTS namespace).  mpirun runs
in the first and starts the ranks of the second through a plm_rsh_agent
that runs the remote command under `ip netns exec` (as ssh would on a
cluster), with only the TCP transport (`--mca pml ob1 --mca btl tcp,self`)
on that link, two slots per host, ranks placed round-robin over the hosts
(`--map-by node`: ranks 0 and 2 on host a, 1 and 3 on host b), so that on
a 2x2 mesh the groups of the minor axis Y, {0, 1} and {2, 3}, span the two
hosts and its collectives cross the link.  Through a wrapper standing in for
mpirun it then runs, unchanged:

  - llama_layer.py --mpi: the LLaMA-2 decoder layer example on a 2x2 mesh
    (4 ranks, 2 per host) against its independent NumPy layer;
  - run_examples.py --runtime mpi --match ffw_: seed 000's FFW examples
    (DP, FSDP, TP, FSDP+TP) under --check (the unsharded reference built
    into the executable);

and checks that the ranks were in both namespaces and that the collectives'
bytes crossed the veth link.  docs/runtime.md shows the same setup with a
hostfile for a real cluster.

Needs root (namespaces, veth) and mpirun; without them it prints why it
skips and exits 0 with `0 passed, 0 failed, 1 skipped`, never silently.
The last line is `N passed, N failed, N skipped`; exit 1 on any failure.

Usage: multihost.py --einc PATH --examples DIR [--mpirun PATH]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree

HERE = os.path.dirname(os.path.abspath(__file__))
# Host names must be valid hostnames for Open MPI's node regex (no '_').
PREFIX = "einc-%d-" % os.getpid()
HOSTS = [PREFIX + "a", PREFIX + "b"]
VETH = [PREFIX[:-1][-8:] + "va", PREFIX[:-1][-8:] + "vb"]  # interface names: <= 15 chars
SUBNET = "10.213.77.0/24"
ADDRS = ["10.213.77.1", "10.213.77.2"]


def sh(*argv, check=True):
    return subprocess.run(list(argv), capture_output=True, text=True, check=check)


def setup():
    """Creates the two namespaces and the link; returns None or why not."""
    if os.geteuid() != 0:
        return "needs root for network namespaces"
    if not shutil.which("ip"):
        return "needs the ip command (iproute2)"
    p = sh("ip", "netns", "add", HOSTS[0], check=False)
    if p.returncode != 0:
        return "cannot create a network namespace: " + p.stderr.strip()
    sh("ip", "netns", "add", HOSTS[1])
    sh("ip", "link", "add", VETH[0], "type", "veth", "peer", "name", VETH[1])
    for host, dev, addr in zip(HOSTS, VETH, ADDRS):
        sh("ip", "link", "set", dev, "netns", host)
        sh("ip", "-n", host, "addr", "add", addr + "/24", "dev", dev)
        sh("ip", "-n", host, "link", "set", dev, "up")
        sh("ip", "-n", host, "link", "set", "lo", "up")
    return None


def teardown():
    for host in HOSTS:
        sh("ip", "netns", "del", host, check=False)  # removes its end of the veth pair


def rx_bytes(i):
    p = sh("ip", "netns", "exec", HOSTS[i], "cat",
           "/sys/class/net/%s/statistics/rx_bytes" % VETH[i])
    return int(p.stdout)


def write_launcher(work, mpirun):
    """The agent (`agent HOST CMD...`: CMD in namespace HOST, as ssh HOST
    CMD would on a cluster), the hostfile, and a wrapper that the e2e
    scripts call as their mpirun."""
    agent = os.path.join(work, "netns_agent.sh")
    with open(agent, "w") as f:
        # Each host also gets its own host name (a UTS namespace): Open MPI
        # names its session directory in /tmp after it, and two daemons of
        # one name would race for the same directory.
        f.write('#!/bin/sh\nhost=$1\nshift\n'
                'exec ip netns exec "$host" unshare --uts sh -c "hostname $host; $*"\n')
    hostfile = os.path.join(work, "hostfile")
    with open(hostfile, "w") as f:
        for h in HOSTS:
            f.write("%s slots=2\n" % h)
    wrapper = os.path.join(work, "mpirun_two_hosts.sh")
    with open(wrapper, "w") as f:
        f.write("#!/bin/sh\n# mpirun across the two namespaces over TCP only\n"
                'exec ip netns exec %s unshare --uts sh -c \'hostname %s; exec "$0" "$@"\' '
                '%s --hostfile %s --mca plm_rsh_agent %s '
                '--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include %s '
                '--mca oob_tcp_if_include %s --map-by node "$@"\n'
                % (HOSTS[0], HOSTS[0], shutil.which(mpirun) or mpirun, hostfile, agent, SUBNET,
                   SUBNET))
    for p in (agent, wrapper):
        os.chmod(p, 0o755)
    return wrapper


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--einc", required=True)
    ap.add_argument("--examples", required=True)
    ap.add_argument("--mpirun", default="mpirun")
    a = ap.parse_args()
    if not shutil.which(a.mpirun):
        print("skip multi-host MPI: no %s" % a.mpirun)
        print("0 passed, 0 failed, 1 skipped")
        return 0
    why = setup()
    if why:
        teardown()
        print("skip multi-host MPI: " + why)
        print("0 passed, 0 failed, 1 skipped")
        return 0
    passed = failed = 0
    work = tempfile.mkdtemp(prefix="einc-multihost-")
    try:
        wrapper = write_launcher(work, a.mpirun)
        # Where the 4 ranks of a job start: alternately on the two hosts.
        p = subprocess.run([wrapper, "-np", "4", "--allow-run-as-root", "sh", "-c",
                            "echo $OMPI_COMM_WORLD_RANK $(ip netns identify $$)"],
                           capture_output=True, text=True, timeout=60)
        where = [w for _, w in sorted(line.split() for line in p.stdout.splitlines()
                                      if len(line.split()) == 2)]
        if where == HOSTS * 2:
            passed += 1
            print("ok   ranks 0-3 start on hosts %s" % ", ".join(where))
        else:
            failed += 1
            print("FAIL ranks 0-3 should start on hosts a, b, a, b, got %r\n%s"
                  % (where, p.stderr[-2000:]))
        einc = os.path.abspath(a.einc)
        # Bytes that must reach host b in each run: the launch protocol
        # alone moves about 11 kB (measured with the Y groups inside one
        # host), the layer's Y collectives about 70 kB at the example's
        # check-with sizes, the FFW examples megabytes.
        runs = [("LLaMA-2 layer on 2x2 against NumPy", 40000,
                 [sys.executable, os.path.join(HERE, "llama_layer.py"), "--einc", einc,
                  "--example", os.path.join(a.examples, "llama2_layer.ein"), "--mpi",
                  "--mpirun", wrapper]),
                ("FFW examples under --check", 1000000,
                 [sys.executable, os.path.join(HERE, "run_examples.py"), "--einc", einc,
                  "--examples", a.examples, "--runtime", "mpi", "--mpirun", wrapper,
                  "--match", "ffw_"])]
        for title, least, cmd in runs:
            before = rx_bytes(1)
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            crossed = rx_bytes(1) - before
            for line in p.stdout.splitlines():
                print("     " + line)
            if p.returncode == 0 and crossed > least:
                passed += 1
                print("ok   %s across two hosts (%d bytes into host b)" % (title, crossed))
            else:
                failed += 1
                print("FAIL %s across two hosts: exit %d, %d bytes into host b (want > %d)\n%s"
                      % (title, p.returncode, crossed, least, p.stderr[-3000:]))
    finally:
        teardown()
        shutil.rmtree(work, ignore_errors=True)
    print("%d passed, %d failed, 0 skipped" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
