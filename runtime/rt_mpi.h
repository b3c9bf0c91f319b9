/*
 * rt_mpi.h - what the MPI backend's files share (only in libeinrt_mpi):
 * the state of rt_send / rt_recv on one rank (mpi_p2p.c), kept in the
 * backend's world by backend_mpi.c.
 */
#ifndef EINC_RT_MPI_H
#define EINC_RT_MPI_H

#include <mpi.h>

#include "rt_internal.h"

/* Point-to-point state of this rank's device during one launch. */
typedef struct rt_mpi_p2p {
    MPI_Comm comm;               /* messages travel here: a duplicate of the Cartesian
                                    communicator (rank = device id) */
    int tag_ub;                  /* largest tag MPI accepts (MPI_TAG_UB, >= 32767) */
    MPI_Request *reqs;           /* sends not yet known complete (malloc'd, owned) */
    void **bufs;                 /* the copy each of them sends (malloc'd, owned) */
    int npending;                /* entries of reqs and bufs in use */
    int cap;                     /* entries allocated */
    int64_t ndevices;            /* devices of the mesh */
    int64_t *sent;               /* per device id: messages sent to it (owned) */
    int64_t *received;           /* per device id: messages received from it (owned) */
} rt_mpi_p2p;

/* Before the device runs (collective over `cart`): duplicates `cart` into
 * s->comm and zeroes the counts.  Ends the job when out of memory. */
void rt_mpi_p2p_init(rt_device *dev, rt_mpi_p2p *s, MPI_Comm cart);
/* The backend's send / recv hooks (rt_device_ops; arguments checked by
 * p2p.c).  send copies the bytes and posts an MPI_Isend of the copy;
 * recv probes for the message, compares its size and receives it.  Both
 * first free the copies of sends that have completed. */
void rt_mpi_p2p_send(rt_device *dev, rt_mpi_p2p *s, int64_t peer, int32_t tag, const void *buf,
                     int64_t bytes);
void rt_mpi_p2p_recv(rt_device *dev, rt_mpi_p2p *s, int64_t peer, int32_t tag, void *buf,
                     int64_t bytes);
/* The backend's probe hook: MPI_Iprobe for the message from `peer` with
 * `tag` on the point-to-point communicator, 1 if it has arrived (it stays
 * for rt_mpi_p2p_recv), else 0; first frees the completed sends' copies. */
int32_t rt_mpi_p2p_probe(rt_device *dev, rt_mpi_p2p *s, int64_t peer, int32_t tag);
/* After the device has run (collective over `cart`): ends the job when a
 * message sent to this device was never received; else completes every
 * pending send and frees the state. */
void rt_mpi_p2p_finish(rt_device *dev, rt_mpi_p2p *s, MPI_Comm cart);

/* Collective over `comm`: seconds this rank's rt_now() reads ahead of
 * rank 0's (mpi_clock.c).  0 on rank 0, and with `same_node_is_zero` on
 * every rank of rank 0's node, which reads the same clock; elsewhere
 * Cristian's estimate from the shortest of several round trips to rank 0,
 * which *bound gets half of (the estimate's largest error, seconds; 0
 * where the offset is exact). */
double rt_mpi_clock_offset(MPI_Comm comm, int same_node_is_zero, double *bound);

#endif
