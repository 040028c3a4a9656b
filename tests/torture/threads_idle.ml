(* threads_idle.ml — with the agent loaded but not profiling
   (FLAMME_AUTOSTART=0), 5000 systhreads come and go; then profiling starts
   (Flamme.start) and a new thread does the work: it must be registered and
   sampled (the slot table must not be used up by the threads that left).
   torture-libs: unix threads flamme *)
let[@inline never] short () = ignore (Sys.opaque_identity (List.init 10 Fun.id))

(* 0.3 s of CPU whatever the machine's speed (the other threads are gone:
   the process's CPU clock is this thread's). *)
let[@inline never] busy_in_new_thread () =
  let acc = ref 0 in
  let until = Sys.time () +. 0.3 in
  while Sys.time () < until do
    for i = 1 to 1_000_000 do acc := (!acc + i) land 0xffff done
  done;
  ignore (Sys.opaque_identity !acc)

let () =
  for _ = 1 to 100 do
    List.iter Thread.join (List.init 50 (fun _ -> Thread.create short ()))
  done;
  Flamme.start ~hz:499 ();
  Thread.join (Thread.create busy_in_new_thread ());
  Flamme.stop ();
  print_endline "done"
