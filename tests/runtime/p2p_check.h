/*
 * p2p_check.h - the point-to-point checker shared by the threads test
 * (test_p2p.c) and the MPI test (mpi_p2p.c).  Along every mesh axis each
 * device runs the transfers a pipeline makes and checks every byte it
 * receives against the stamp its sender wrote (p2p_stamp):
 *   shift          stage z sends to z+1, receives from z-1 (no wrap: the
 *                  ends have no peer there)
 *   both ways      the 1F1B pattern: send to z+1 and to z-1, then receive
 *                  from both, small and large (4 MiB) messages, so a send
 *                  that waited for its receiver would deadlock
 *   tags reversed  tags 0..7 sent (each its own size), received 7..0
 *   order          five messages with one tag, received in the order sent
 *   empty          zero-byte messages (NULL buffers)
 *   probe          rt_probe: absent before its send, present after it,
 *                  absent for another tag and once received
 */
#ifndef EINC_P2P_CHECK_H
#define EINC_P2P_CHECK_H

#include "rt_internal.h"

/* What the devices of one launch share. */
typedef struct p2p_config {
    int64_t *errors;             /* per device: wrong bytes or messages */
    int64_t *checked;            /* per device: bytes compared */
} p2p_config;

/* The byte at offset i of message `seq` of device `src`: mixes all three
 * so a message from another sender, another message or another offset
 * differs. */
unsigned char p2p_stamp(int64_t src, int64_t seq, int64_t i);

/* Size of the large messages: above every MPI eager limit, so MPI uses
 * its rendezvous protocol, where an unbuffered send waits for the
 * receive. */
#define P2P_LARGE (4 << 20)

/* The count p2p_check_device leaves in checked[id] when every transfer
 * arrives: the bytes of the messages device `id` of `prog` receives, plus
 * one per zero-byte message. */
int64_t p2p_expected_checked(const rt_program *prog, int64_t id);

/* The device function: runs and checks every transfer above along every
 * axis of the mesh (arg: a p2p_config), counting into errors[dev->id] and
 * checked[dev->id]. */
void p2p_check_device(rt_device *dev, void *arg);

#endif
