/*
 * main.c - main() of an einc executable on the threads backend.  Kept in its
 * own object of libeinrt so that it is linked only when the program object
 * (which defines `einc_program`) needs a main.
 */
#include "rt_internal.h"
#include "rt_job.h"

extern const rt_program einc_program;

int main(int argc, char **argv)
{
    return rt_main(argc, argv, &einc_program, &rt_threads_launcher);
}
