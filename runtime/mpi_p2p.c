/*
 * mpi_p2p.c - point-to-point messages of the MPI backend.
 *
 * rt_send must return without waiting for the receiver (einrt.h), but a
 * blocking MPI_Send of a large message waits for the matching receive
 * (rendezvous), and two pipeline stages that send to each other first
 * (1F1B) would deadlock.  So a send copies the caller's bytes and posts an
 * MPI_Isend of the copy; the request and the copy go on this rank's
 * pending list.  Each later send or receive tests the list and frees what
 * has completed, so the list holds only messages still in flight.  MPI
 * keeps the messages of one (sender, tag, communicator) in the order sent,
 * which is the order einrt.h promises.
 *
 * rt_probe is MPI_Iprobe on the same communicator: it asks whether the
 * message has arrived without receiving it (a pipeline stage choosing
 * whether to wait for its next item's input or run other work first).
 *
 * A receive first probes for the message (MPI_Probe on the peer's rank and
 * the tag), so its size can be compared with the receive's before any
 * byte lands: a mismatch ends the job through rt_p2p_size_mismatch with
 * both sizes, where MPI_Recv would end it with MPI_ERR_TRUNCATE or take a
 * short message silently.
 *
 * At the end of a launch every rank learns, through one MPI_Alltoall of
 * per-destination send counts, how many messages each peer sent it; one
 * more than it received is a send without its receive, which ends the job
 * (waiting for that send to complete would hang).  Then the pending sends
 * all have their receives and MPI_Waitall completes them.
 *
 * Messages travel on their own communicator, so their tags never meet the
 * ReduceScatter exchange's.  Sizes are counted in MPI_BYTE with int
 * counts: a message above INT_MAX bytes (2 GiB) ends the job.  A receive
 * whose message never comes waits forever, as a mismatched MPI collective
 * does: MPI has no deadlock detection (the threads backend does).
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "rt_mpi.h"

void rt_mpi_p2p_init(rt_device *dev, rt_mpi_p2p *s, MPI_Comm cart)
{
    memset(s, 0, sizeof *s);
    MPI_Comm_dup(cart, &s->comm);
    int *ub = NULL, flag = 0;
    MPI_Comm_get_attr(s->comm, MPI_TAG_UB, &ub, &flag);
    s->tag_ub = flag && ub ? *ub : 32767; /* the least the standard allows */
    s->ndevices = dev->ndevices;
    s->sent = calloc((size_t)s->ndevices, sizeof *s->sent);
    s->received = calloc((size_t)s->ndevices, sizeof *s->received);
    if (!s->sent || !s->received)
        rt_fatal(dev, "out of memory for the point-to-point counts");
}

/* Frees the copies of the sends that have completed, keeping the rest in
 * order. */
static void progress(rt_mpi_p2p *s)
{
    int kept = 0;
    for (int i = 0; i < s->npending; i++) {
        int done = 0;
        MPI_Test(&s->reqs[i], &done, MPI_STATUS_IGNORE);
        if (done) {
            free(s->bufs[i]);
            continue;
        }
        s->reqs[kept] = s->reqs[i];
        s->bufs[kept] = s->bufs[i];
        kept++;
    }
    s->npending = kept;
}

/* Fatal unless MPI can carry a message of `bytes` with `tag`. */
static void check_wire(rt_device *dev, const rt_mpi_p2p *s, const char *what, int32_t tag,
                       int64_t bytes)
{
    if (tag > s->tag_ub)
        rt_fatal(dev, "%s: tag %d exceeds the largest tag of this MPI (%d)", what, tag,
                 s->tag_ub);
    if (bytes > INT_MAX)
        rt_fatal(dev, "%s (tag %d): a message of %lld bytes exceeds MPI's int counts", what, tag,
                 (long long)bytes);
}

void rt_mpi_p2p_send(rt_device *dev, rt_mpi_p2p *s, int64_t peer, int32_t tag, const void *buf,
                     int64_t bytes)
{
    check_wire(dev, s, "rt_send", tag, bytes);
    progress(s);
    if (s->npending == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        MPI_Request *reqs = realloc(s->reqs, (size_t)cap * sizeof *reqs);
        if (reqs)
            s->reqs = reqs;
        void **bufs = realloc(s->bufs, (size_t)cap * sizeof *bufs);
        if (bufs)
            s->bufs = bufs;
        if (!reqs || !bufs)
            rt_fatal(dev, "out of memory for %d messages in flight", cap);
        s->cap = cap;
    }
    void *copy = rt_xmalloc(dev, (size_t)bytes);
    if (bytes > 0)
        memcpy(copy, buf, (size_t)bytes);
    MPI_Isend(copy, (int)bytes, MPI_BYTE, (int)peer, tag, s->comm, &s->reqs[s->npending]);
    s->bufs[s->npending++] = copy;
    s->sent[peer]++;
}

void rt_mpi_p2p_recv(rt_device *dev, rt_mpi_p2p *s, int64_t peer, int32_t tag, void *buf,
                     int64_t bytes)
{
    check_wire(dev, s, "rt_recv", tag, bytes);
    progress(s);
    MPI_Status st;
    MPI_Probe((int)peer, tag, s->comm, &st);
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    if (count != bytes)
        rt_p2p_size_mismatch(dev, peer, tag, count, bytes);
    MPI_Recv(buf, count, MPI_BYTE, (int)peer, tag, s->comm, MPI_STATUS_IGNORE);
    s->received[peer]++;
}

int32_t rt_mpi_p2p_probe(rt_device *dev, rt_mpi_p2p *s, int64_t peer, int32_t tag)
{
    check_wire(dev, s, "rt_probe", tag, 0);
    progress(s);
    int flag = 0;
    MPI_Iprobe((int)peer, tag, s->comm, &flag, MPI_STATUS_IGNORE);
    return flag != 0;
}

void rt_mpi_p2p_finish(rt_device *dev, rt_mpi_p2p *s, MPI_Comm cart)
{
    int64_t *to_me = rt_xmalloc(dev, (size_t)s->ndevices * sizeof *to_me);
    MPI_Alltoall(s->sent, 1, MPI_INT64_T, to_me, 1, MPI_INT64_T, cart);
    int64_t bad = -1;
    for (int64_t src = 0; src < s->ndevices && bad < 0; src++)
        if (to_me[src] != s->received[src])
            bad = src;
    /* Every rank learns whether one found a message never received, and
     * the ranks that did not wait in a barrier that rank never enters while
     * its rt_fatal aborts the job.  Were they to go on to MPI_Finalize, the
     * abort would race their finalization, during which Open MPI's mpirun
     * (4.1, PMIx 3) now and then crashes in PMIx_server_finalize
     * (open-mpi/ompi#13650 and #6222 report the same race). */
    int mine = bad >= 0, any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, cart);
    if (bad >= 0)
        rt_fatal(dev, "%lld message(s) sent to this device by device %lld were never "
                 "received", (long long)(to_me[bad] - s->received[bad]), (long long)bad);
    if (any)
        MPI_Barrier(cart); /* never completes: the abort ends this rank here */
    free(to_me);
    MPI_Waitall(s->npending, s->reqs, MPI_STATUSES_IGNORE);
    for (int i = 0; i < s->npending; i++)
        free(s->bufs[i]);
    free(s->reqs);
    free(s->bufs);
    free(s->sent);
    free(s->received);
    MPI_Comm_free(&s->comm);
    memset(s, 0, sizeof *s);
}
