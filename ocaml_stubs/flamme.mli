(** Flamme — sample the CPU (or wall-clock) time of this OCaml 5 program from
    inside, without [LD_PRELOAD].

    Linking this library links the flamme agent into the executable. Threads
    and domains are known to the agent from program start-up, so those already
    running when {!start} is called are sampled too. The profile is read with
    the [flamme] command ([flamme svg], [flamme collapse], [flamme report]).

    If the program also runs with a preloaded [libflamme.so], the preloaded
    agent does not start by itself; these functions drive it instead, so there
    is always exactly one profile, the one named here.

    All functions may be called from any domain or thread; calls are
    serialised. *)

exception Error of string
(** Raised with a one-line reason when profiling cannot start or stop:
    the output cannot be written (the message names the path), a profile is
    already running, none is running, [hz] is out of range, or profiling is
    unavailable in this process (not a native OCaml 5 program, or a fork
    child). *)

type mode = [ `Cpu | `Wall ]
(** [`Cpu] (default): each thread is sampled [hz] times per second of CPU
    time it uses. [`Wall]: every thread is sampled [hz] times per second of
    wall-clock time, blocked ones included. *)

val start :
  ?hz:int -> ?output:string -> ?mode:mode -> ?period:float -> ?alloc:float -> ?live:bool -> unit
  -> unit
(** Starts profiling every thread of the process into a new profile file.
    [hz] (1..10000) defaults to [FLAMME_HZ] or 99; [output] (["%p"] is
    replaced by the process id) defaults to [FLAMME_OUTPUT] or
    ["flamme.%p.flm"]; [mode] defaults to [FLAMME_MODE] or [`Cpu].
    An existing file is overwritten.
    [period] (seconds, 0.1..86400; default [FLAMME_PERIOD], else none)
    makes a continuous profile: one complete file (segment) per period,
    named after [output] with ["%n"] replaced by the segment's number
    (000001, 000002, ...), or with [".NNNNNN"] put before a final [".flm"];
    [flamme report/collapse/svg/export] read several segments as one. A
    period once given stays for later starts of the process.

    [alloc] (a rate in samples per word, e.g. {!default_alloc_rate}) also
    records sampled allocations with [Gc.Memprof] (OCaml 5.3 or later): for
    each sampled block its call stack, size, heap (minor or major) and
    source (normal, marshal, custom), read with [flamme svg --alloc] and
    the other verbs' [--alloc]. A [Gc.Memprof] profile covers the domain
    that calls [start] and the domains and threads it spawns afterwards:
    call [start] before the first [Domain.spawn] to see every domain.
    Without [alloc], [FLAMME_ALLOC] (set by [flamme record --alloc[=RATE]])
    gives the rate, and [FLAMME_LIVE=1] ([--live]) the default of [live].
    [live] (default [false]) also tracks each sampled block until it dies,
    for [flamme svg --live] (what is still reachable at {!stop}, which then
    runs a full major collection first); its cost grows with the sampled
    live heap.
    @raise Error when a profile is already running, the output cannot be
    created, [hz] or [alloc] is out of range, profiling is unavailable, or
    allocation profiling is (OCaml before 5.3, another [Gc.Memprof] profile
    already sampling in this domain). *)

val default_alloc_rate : float
(** [1e-4] samples per word (one sample per 80 KB allocated on average). *)

val stop : unit -> unit
(** Stops profiling and completes the profile file (waits for the agent's
    writer thread to flush it).
    @raise Error when no profile is running or the file could not be
    completed. *)

val is_running : unit -> bool
(** [true] between a successful {!start} and the next {!stop}. *)

val with_profile :
  ?hz:int -> ?output:string -> ?mode:mode -> ?period:float -> ?alloc:float -> ?live:bool
  -> (unit -> 'a) -> 'a
(** [with_profile f] profiles the call [f ()]: {!start}, [f ()], {!stop}. The
    profile is completed even when [f] raises; the exception is then
    re-raised with its original backtrace (an error while stopping is
    printed on stderr so it does not hide it).
    @raise Error as {!start} and {!stop}. *)

(** A profile still running when the program exits (normally or through an
    uncaught exception) is stopped and completed by an [at_exit] handler. *)
