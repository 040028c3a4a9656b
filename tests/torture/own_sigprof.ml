(* own_sigprof.ml — the program owns SIGPROF and ITIMER_PROF (a home-made
   profiler, a CPU watchdog): its handler must count its own 100 Hz ticks,
   no more (the agent's signals) and no fewer (the agent's timer replacing
   the program's). Prints whether the count fits the CPU time used.
   torture-libs: unix *)

let ticks = Atomic.make 0

let[@inline never] burn until =
  let acc = ref 1 in
  while Sys.time () < until do
    for i = 1 to 100_000 do acc := (!acc * 31 + i) land 0xffffff done
  done;
  !acc

let () =
  Sys.set_signal Sys.sigprof (Sys.Signal_handle (fun _ -> Atomic.incr ticks));
  let t0 = Sys.time () in
  ignore (Unix.setitimer Unix.ITIMER_PROF { Unix.it_interval = 0.01; it_value = 0.01 });
  ignore (Sys.opaque_identity (burn (t0 +. 0.5)));
  ignore (Unix.setitimer Unix.ITIMER_PROF { Unix.it_interval = 0.; it_value = 0. });
  let expected = (Sys.time () -. t0) /. 0.01 and got = float (Atomic.get ticks) in
  Printf.printf "own ticks as expected: %b\n" (got >= 0.5 *. expected && got <= 1.5 *. expected)
