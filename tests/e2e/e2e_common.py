"""e2e_common.py - what the end-to-end scripts share: how to start MPI executables.

Leak checking is turned off inside MPI processes: Open MPI's own allocations
are never freed, so under -DEINC_SANITIZE=ON every rank (and every singleton
started without mpirun) would report them.  AddressSanitizer's other checks
stay on, and threads-runtime executables keep leak checking."""
import os


def asan_options_without_leak_check():
    """ASAN_OPTIONS as set in the environment, plus detect_leaks=0."""
    asan = os.environ.get("ASAN_OPTIONS", "")
    return (asan + ":" if asan else "") + "detect_leaks=0"


def no_leak_check_env():
    """The environment for an MPI executable started without mpirun (--info)."""
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = asan_options_without_leak_check()
    return env


def mpi_launch(mpirun, nranks):
    """The mpirun prefix for `nranks` ranks of an einc executable.  Root and
    more ranks than cores are normal here (containers, CI on two cores)."""
    return [mpirun, "-np", str(nranks), "--allow-run-as-root", "--oversubscribe",
            "-x", "ASAN_OPTIONS=" + asan_options_without_leak_check()]
