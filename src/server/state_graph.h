/*
 * CUDA graphs and executable graphs in a checkpoint (sections GRAPH and
 * GRAPH_EXEC of docs/state-format.md): every graph's nodes and edges read
 * from the backend at the checkpoint (so captured graphs are carried like
 * built ones), restored under the ids the client holds, nodes included;
 * an executable graph instantiated again from its graph as it was at its
 * instantiation (a clone the session keeps, handlers_graph.c).
 */
#ifndef FLYT_STATE_GRAPH_H
#define FLYT_STATE_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "session.h"
#include "state_pipe.h"

/* Whether a section type is one of these. */
int flyt_state_graph_section(uint32_t type);
/* NULL when e (a graph, an exec or a node) can be captured, else what it
 * is, naming the node kind or the change that keeps it from a checkpoint. */
const char *flyt_state_graph_refused(flyt_session *s, const struct flyt_hentry *e);
/* Every graph and exec of the session to the writer (after all other objects). */
CUresult flyt_state_graph_write(flyt_session *s, struct flyt_swriter *sw);
/* A section made again: graphs, their nodes' ids, execs. */
CUresult flyt_state_graph_restore(flyt_session *s, uint32_t type, const unsigned char *p,
                                  uint64_t len, char *err, size_t errlen);

/* Recording hooks (handlers_graph.c, handlers_call.c). */
/* An exec was made from graph (id, backend handle): keeps a clone of it. */
void flyt_state_graph_instantiated(flyt_session *s, struct flyt_hentry *exec, uint64_t graph_id,
                                   flyt_bhandle graph, uint64_t flags);
/* cuGraphExecUpdate succeeded: the exec now stands for graph. */
void flyt_state_graph_exec_updated(flyt_session *s, struct flyt_hentry *exec, uint64_t graph_id,
                                   flyt_bhandle graph);
/* A node of the exec was changed in place (cuGraphExec*SetParams, cuGraphNodeSetEnabled). */
void flyt_state_graph_exec_changed(flyt_session *s, uint64_t exec_id);
/* The exec is being destroyed: its clone goes too. */
void flyt_state_graph_exec_gone(flyt_session *s, struct flyt_hentry *exec);
/* A graph entry names a graph owned by a node (a child graph, a conditional body). */
void flyt_state_graph_owned(struct flyt_hentry *graph);
/* A kernel with launch attributes was launched while a capture was open. */
void flyt_state_graph_attrs_seen(void);
/* A plain call succeeded: notes the ones a checkpoint cannot carry. */
void flyt_state_graph_call_note(flyt_session *s, uint32_t id, const uint64_t *args);

#endif
