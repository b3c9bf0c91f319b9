/*
 * fatal.c - the runtime's error policy (einrt.h "Errors"): a failing device
 * prints one message and ends the whole job with status 1.  Nothing returns
 * an error code to emitted code, and no device is left waiting in a barrier:
 * the threads backend ends the process, the MPI backend calls MPI_Abort.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

#include "rt_internal.h"

void rt_fatal(const rt_device *dev, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (dev) {
        char where[128];
        int n = snprintf(where, sizeof where, "device %lld (", (long long)dev->id);
        for (int32_t a = 0; a < dev->prog->naxes && n < (int)sizeof where - 16; a++)
            n += snprintf(where + n, sizeof where - (size_t)n, "%s%c=%lld", a ? ", " : "",
                          dev->prog->axis_names[a], (long long)dev->coord[a]);
        fprintf(stderr, "einrt: error: %s): %s\n", where, msg);
    } else {
        fprintf(stderr, "einrt: error: %s\n", msg);
    }
    /* Flush what the job printed so far; other threads may still be running,
     * so end the process without running exit handlers concurrently. */
    fflush(NULL);
    if (dev && dev->ops && dev->ops->abort)
        dev->ops->abort();
    _exit(1);
}

void *rt_xmalloc(const rt_device *dev, size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        rt_fatal(dev, "out of memory allocating %zu bytes", bytes);
    return p;
}

int rt_errf(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}
