/*
 * agent/sigaction.h — the program's handlers on an alternate signal stack
 * keep the agent's sample signals out of their stack (agent/sigaction.c).
 * Who: flamme_handler_install (agent/handler.c), normal context; the
 * interposed sigaction is the program's (any context).
 */
#ifndef FLAMME_AGENT_SIGACTION_H
#define FLAMME_AGENT_SIGACTION_H

/* From now on, every handler the program has or installs with SA_ONSTACK
 * masks sample_sig while it runs (sample_sig's own handler aside). Those
 * already installed are changed now, and then the caller waits 50 ms for
 * the ones running to return, before any engine is armed. Does nothing
 * for a signal already added, or out of 1..64. */
void flamme_sigaction_block(int sample_sig);

#endif
