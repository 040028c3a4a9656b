/*
 * agent/control.h — the control channel of a dormant agent, for
 * `flamme attach PID` (protocol and checks in agent/control.c).
 */
#ifndef FLAMME_AGENT_CONTROL_H
#define FLAMME_AGENT_CONTROL_H
#include <stddef.h>

/* Opens the channel and starts its thread (constructor, owning copy of the
 * agent, when no profile was started). Silently nothing on failure: the
 * program runs as without it, `flamme attach` says there is no agent. */
void flamme_control_init(void);

/* The abstract socket name of a process's channel, from its pid (also
 * used by tools/attach.c). */
#define FLAMME_CONTROL_NAME_FMT "flamme-agent-%d"

/* In a fork child: drops the inherited socket (no thread serves it). */
void flamme_control_atfork_child(void);

#endif
