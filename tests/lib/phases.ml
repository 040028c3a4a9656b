(* phases.ml — tests/lib program: three phases, only the middle one profiled
   through the linked library. A second domain is spawned BEFORE
   Flamme.start and waits; once profiling runs it does its share of the
   middle phase. Each phase burns a given amount of CPU time (Work.burn).
   Usage: phases.exe OUTPUT HZ
   Prints: "phases: profiled_cpu=SECONDS" (process CPU time between start and
   stop; the checker compares it with the sample count). *)

let burn until = ignore (Sys.opaque_identity (Work.burn until))

(* Not tail calls, so each phase keeps its own frame above burn. *)
let[@inline never] warmup () = burn (Sys.time () +. 0.6); Sys.opaque_identity ()
let[@inline never] middle until = burn until; Sys.opaque_identity ()
let[@inline never] cooldown () = burn (Sys.time () +. 0.6); Sys.opaque_identity ()

let () =
  let output = Sys.argv.(1) and hz = int_of_string Sys.argv.(2) in
  let m = Mutex.create () and c = Condition.create () in
  let go = ref None in
  let d =
    Domain.spawn (fun () ->
        Mutex.lock m;
        while !go = None do Condition.wait c m done;
        let until = Option.get !go in
        Mutex.unlock m;
        middle until)
  in
  warmup ();
  Flamme.start ~hz ~output ();
  let t0 = Sys.time () in
  (* Two domains share 3.2 s of CPU: about 1.6 s each. *)
  let until = t0 +. 3.2 in
  Mutex.lock m;
  go := Some until;
  Condition.broadcast c;
  Mutex.unlock m;
  middle until;
  Domain.join d;
  let t1 = Sys.time () in
  Flamme.stop ();
  assert (not (Flamme.is_running ()));
  cooldown ();
  Printf.printf "phases: profiled_cpu=%.3f\n" (t1 -. t0)
