/*
 * main.c - main() of an einc executable on the threads backend.  Kept in its
 * own object of libeinrt so that it is linked only when the program object
 * (which defines `einc_program`) needs a main.
 */
#include "rt_internal.h"
#include "rt_job.h"

extern const rt_program einc_program;
/* The draft that `einc --draft` links beside it, if any: a weak reference,
 * NULL in an executable without one (driver/companion.c). */
extern const rt_program einc_program_draft __attribute__((weak));
/* The chunked-prefill program of `einc --prefill`, likewise (--serve). */
extern const rt_program einc_program_prefill __attribute__((weak));

int main(int argc, char **argv)
{
    return rt_main(argc, argv, &einc_program, &einc_program_draft, &einc_program_prefill,
                   &rt_threads_launcher);
}
