"""e2e_common.py - what the end-to-end scripts share: how to start MPI ranks."""
import os


def mpi_launch(mpirun, nranks):
    """The mpirun prefix for `nranks` ranks of an einc executable.

    Root and more ranks than cores are normal here (containers, CI on two
    cores).  Leak checking is off inside the ranks: Open MPI's own
    allocations are never freed, so under -DEINC_SANITIZE=ON every rank
    would report them; AddressSanitizer's other checks stay on."""
    asan = os.environ.get("ASAN_OPTIONS", "")
    asan = (asan + ":" if asan else "") + "detect_leaks=0"
    return [mpirun, "-np", str(nranks), "--allow-run-as-root", "--oversubscribe",
            "-x", "ASAN_OPTIONS=" + asan]
