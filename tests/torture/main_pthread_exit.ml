(* main_pthread_exit.ml — the main thread starts a C thread that works for
   a while and writes worker.txt, then calls pthread_exit: the process must
   end (status 0) when that thread does, with a complete profile.
   torture-libs: *)
external start_worker : unit -> unit = "torture_start_worker"
external main_pthread_exit : unit -> unit = "torture_main_pthread_exit"

let () =
  start_worker ();
  print_endline "main thread leaves";
  main_pthread_exit ()
