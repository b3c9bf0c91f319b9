/*
 * main_mpi.c - main() of an einc executable on the MPI backend
 * (libeinrt_mpi); one MPI rank per device.
 */
#include "rt_internal.h"
#include "rt_job.h"

extern const rt_program einc_program;

int main(int argc, char **argv)
{
    return rt_main(argc, argv, &einc_program, &rt_mpi_launcher);
}
