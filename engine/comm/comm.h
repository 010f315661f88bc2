/* Collective communication between data-parallel ranks.
 *
 * One interface, several backends: `local` (ranks are threads of one
 * process, the default), and later `mpi` and `nccl`. The ordered allreduce
 * sums in rank order 0..W-1 for every element, so its result does not depend
 * on timing; the N2 pitfall switch sums in arrival order instead. */
#ifndef DL_COMM_H
#define DL_COMM_H

#include "status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct dl_comm dl_comm;

int dl_comm_rank(const dl_comm *c);
int dl_comm_world(const dl_comm *c);

/* buf := sum over ranks of buf (every rank gets the same bits). */
dl_status dl_comm_allreduce_sum(dl_comm *c, float *buf, int64_t n);
/* buf := root's buf. */
dl_status dl_comm_broadcast(dl_comm *c, void *buf, size_t bytes, int root);
/* recv[r*bytes .. (r+1)*bytes) := rank r's send, for every r. */
dl_status dl_comm_allgather(dl_comm *c, const void *send, void *recv, size_t bytes);
dl_status dl_comm_barrier(dl_comm *c);
/* Pitfall N2: sum in the order ranks arrived (timing-dependent). */
void dl_comm_set_arrival_order(dl_comm *c, bool on);
/* A failing rank calls this so that the others' collectives return an
 * error instead of waiting for it forever. */
void dl_comm_abort(dl_comm *c);
void dl_comm_destroy(dl_comm *c); /* each rank's handle; NULL allowed */

/* `world` handles of one in-process group: comms[r] is rank r's, to be used
 * by one thread each. */
dl_status dl_comm_local_create(int world, dl_comm **comms);

#endif
