(* ownprof.ml — tests/signal program (run with the agent preloaded): the
   program owns SIGPROF and ITIMER_PROF, the way a home-made profiler or a
   CPU-time watchdog would. It installs its handler after the agent started,
   arms ITIMER_PROF at 100 Hz, burns CPU in [burn], then prints how many
   ticks its handler counted and the CPU time they stand for.
   Usage: ownprof.exe SECONDS
   Prints "ownprof: ticks=N cpu=SECONDS". *)

let ticks = Atomic.make 0

let[@inline never] burn until = Sys.opaque_identity (Work.burn until) + 1

let () =
  let secs = float_of_string Sys.argv.(1) in
  Sys.set_signal Sys.sigprof (Sys.Signal_handle (fun _ -> Atomic.incr ticks));
  let t0 = Sys.time () in
  ignore
    (Unix.setitimer Unix.ITIMER_PROF { Unix.it_interval = 0.01; it_value = 0.01 });
  ignore (Sys.opaque_identity (burn (t0 +. secs)));
  ignore (Unix.setitimer Unix.ITIMER_PROF { Unix.it_interval = 0.; it_value = 0. });
  let t1 = Sys.time () in
  Printf.printf "ownprof: ticks=%d cpu=%.3f\n" (Atomic.get ticks) (t1 -. t0)
