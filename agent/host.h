/*
 * agent/host.h — what the agent hands the writer at each start
 * (writer/writer_host.h): its settings, its thread registry, its INFO
 * records and periodic work, a warning sink. The writer reaches the agent
 * only through it.
 * Who: flamme_agent_start (normal context, under the start lock).
 */
#ifndef FLAMME_AGENT_HOST_H
#define FLAMME_AGENT_HOST_H
#include "writer/writer_host.h"

/* The host for a start now: settings from flamme_cfg and the engine chosen
 * (call after flamme_engine_init); resets the handler's cost statistics,
 * which each profile reports on its own. */
const struct flamme_writer_host *flamme_agent_host_for_start(void);

#endif
